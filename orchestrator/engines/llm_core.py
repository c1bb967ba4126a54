"""The one iteration-level LLM engine core (continuous batching, paged KV cache, preemption).

Every simulated LLM instance is an :class:`LLMCore`: the harness's (one call of a workflow
stage = one ``Seq`` with a prompt and an output) and the orchestrator's (Teola's primitives: a
partial prefill parks its KV under a key, a full prefill or a decoding continues it; sequences
and their token rules: ``orchestrator.engines.llm_seq``). Its policy
(``orchestrator.engines.admission``) reads it as a read-only ``CoreView`` and returns an
immutable ``IterationPlan``; only the core applies a plan (preemptions, the decode batch's
blocks, admissions) and times it with the step model. Colocation and step time:
``orchestrator.engines.llm_timing``; settings: one ``profiler.engine.EngineConfig``.

A sequence goes WAITING -> PREFILL (admitted; prompt prefilled in one or more chunks) -> DECODE
(a token per decode iteration) -> DONE; a preemption (by recomputation: blocks freed, the whole
context prefilled again on readmission) sends it back to WAITING; one that can never fit the
cache is FAILED at once. An idle core that receives work starts its next iteration at the end
of the instant (the event loop's ``defer``), so every submission of an instant can join it.

Bookkeeping, O(1) amortised per iteration whatever the batch size: the paged KV cache, the
decode batch and preemption (``orchestrator.engines.llm_seq.PagedKV``, the core's base class).
A core built with ``coast`` (the harness's, ``harness.cluster.build_core``) runs stretches of quiet
decode iterations as one event (``orchestrator.engines.llm_seq.QuietStretches``, its base class); read
its state at its own events or after the loop ran (a Teola engine reads it at any time: it does
not coast).
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from orchestrator.engines.admission import make_admission
from orchestrator.engines.llm_plan import DECODE_ONLY, IterationPlan, Policy
from orchestrator.engines.llm_seq import DONE, FAILED, PREFILL, WAITING, PagedKV, PieceSink, QuietStretches, Seq, Sink
from orchestrator.engines.llm_timing import Colocation, GpuSlot, StepTime
from orchestrator.runtime.events import P_DONE, Event, Simulator
from profiler.engine import EngineConfig, engine_step


class LLMCore(QuietStretches, Event):
    """A model instance. ``sink(seq, now)`` is told of every finished, parked or rejected
    sequence; ``on_piece(seq, mark index, now)`` of every mark reached. ``policy`` decides its
    iterations (default: the one ``config.scheduler`` names); ``loop`` is the event loop it runs
    on (:meth:`bind`). One iteration runs at a time, so the core is its own iteration-end event
    (``time``: when the running iteration ends; :meth:`handle` ends it)."""

    priority = P_DONE
    # every attribute of the core and of its state (PagedKV, QuietStretches: their slots are here, one
    # layout with Event's ``time``): read as slots, not through an instance dict of ~50 keys
    __slots__ = ("name", "config", "max_batch", "max_batch_tokens", "block_size", "total_blocks", "watermark",
                 "free", "waiting", "prefilling", "running", "ready", "background", "parked", "on_piece",
                 "buckets", "finish_keys", "mark_buckets", "preemptions", "groups", "dit", "ctx_sum",
                 "step", "sink", "loop", "policy", "_quiet_decode", "gpus", "colocation", "chunks", "n_decode",
                 "busy", "kicked", "outstanding", "iter_start", "iterations", "rejected", "completed",
                 "prefill_iterations", "busy_s", "tokens", "_decode_coef", "_prefill_memo", "_me", "coast",
                 "_repeats", "_run", "_entry", "_solo", "_lag")

    def __init__(self, *, name: str, step: StepTime, kv_tokens: int, sink: Sink, config: EngineConfig,
                 policy: Policy | None = None, on_piece: PieceSink | None = None,
                 gpus: Sequence[GpuSlot] = (), colocation: Colocation | None = None,
                 loop: Simulator | None = None, coast: bool = False) -> None:
        PagedKV.__init__(self, name, kv_tokens, config, on_piece)
        self.time = 0.0
        self.step, self.sink, self.loop = engine_step(step, config), sink, loop  # config's scheduling mode
        self.policy: Policy = policy or make_admission(config)
        self._quiet_decode = bool(getattr(self.policy, "decodes_when_quiet", False))
        self.gpus = tuple(gpus)                   # slots whose busy time it keeps
        self.colocation = colocation if self.gpus else None
        self.chunks: tuple[tuple[Seq, int], ...] = ()   # this iteration's prefill work
        self.n_decode = 0                         # this iteration's decode batch
        self.busy = self.kicked = False
        self.outstanding = 0                      # queued + running sequences
        self.iter_start = 0.0
        self.iterations = self.preemptions = self.rejected = self.completed = 0
        self.prefill_iterations = 0
        self.busy_s = 0.0
        self.tokens = 0
        self._decode_coef = {}
        self._prefill_memo: dict[tuple[int, float, int], float] = {}
        self._me = (self,)
        self.coast = coast
        self._repeats = bool(getattr(self.policy, "decode_only_repeats", False))
        self._lag = config.async_scheduling       # admissions planned one iteration ahead (_late)
        self._run = self._entry = None            # no quiet stretch under way (QuietStretches)
        for g in self.gpus:
            for other in g.cores:
                other.share_gpu()
            g.cores.append(self)
        self._solo = all(len(g.cores) == 1 for g in self.gpus)

    def bind(self, loop: Simulator) -> None:
        """Run on ``loop`` from now on (where it defers its next iteration's start)."""
        self.loop = loop

    def decode_s(self, n: int, ctx: float) -> float:
        """``step.step_s(0, 0, n, ctx)``, memoised as ``a(n) + b(n) * ctx``: a decode iteration's time
        is affine in the batch's total context (attention reads it; nothing else depends on it);
        tests check the identity against the profiler. Not memoised where the step's async floor
        binds (``StepModel.async_floor_s``: a step is max(forward, CPU step time), so not affine)."""
        c = self._decode_coef.get(n)
        if c is None:
            a = self.step.step_s(0, 0.0, n, 0.0)
            if a <= getattr(self.step, "async_floor_s", 0.0):
                return self.step.step_s(0, 0.0, n, ctx)
            c = self._decode_coef[n] = (a, (self.step.step_s(0, 0.0, n, 1e6) - a) / 1e6)
        return c[0] + c[1] * ctx

    # ---- arrivals ------------------------------------------------------------------
    def submit(self, s: Seq, now: float, *, front: bool = False) -> Iterable[Event] | None:
        """Queue ``s`` (at the head with ``front``, as vLLM re-queues a continued prompt); returns
        the events this causes (the sink's on reject or an immediate finish); an idle core starts
        its next iteration at the end of the instant."""
        s.arrival_s = now
        if s.kv_from is not None:
            tokens, first = self.parked.pop(s.kv_from)
            s.have += tokens
            s.held = self.blocks(tokens)
            s.tokens0 = s.have + s.prompt
            if s.prompt == 0 and first:
                s.gen = 1          # the parked prefill's logits gave the first token
        fits = -(-(s.tokens0 + s.output) // self.block_size) <= self.total_blocks - self.watermark   # fits(s)
        if self._run is not None and not (fits and self.waiting and self._repeats and s.eff and s.kv_from is None
                                          and not (front or s.background)):
            self._interrupt(now)        # (queued behind a waiting sequence, it changes nothing yet)
        if not fits:
            self.free += s.held
            s.held = 0
            s.state = FAILED
            s.done_s = now
            self.rejected += 1
            return self.sink(s, now)
        self.outstanding += 1
        if s.eff == 0:
            if s.output - s.gen <= 0:      # nothing left to do
                return self._finish_now(s, now)
            self.ready.append(s)
        elif s.background:
            self.background.append(s)
        elif front:
            self.waiting.appendleft(s)
        else:
            self.waiting.append(s)
        if not (self.busy or self.kicked):
            self._wake()
        return None

    def promote(self, s: Seq, now: float) -> None:
        """Background sequence ``s`` became critical: it joins the end of the regular queue
        (nothing if it was admitted already)."""
        s.background = False
        if self._run is not None:
            self._interrupt(now)
        if s.state != WAITING or s not in self.background:
            return
        self.background.remove(s)
        self.waiting.append(s)
        self._wake()

    def withdraw(self, s: Seq, now: float) -> bool:
        """Take back ``s`` if it was never admitted (queued, regular or background): True when
        taken back; it is then no longer this core's."""
        if s.state != WAITING or s.sched_s == s.sched_s or s.held:   # sched_s is NaN until scheduled
            return False
        for q in (self.background, self.waiting):
            if s in q:
                if self._run is not None:
                    self._interrupt(now)
                q.remove(s)
                self.outstanding -= 1
                return True
        return False

    def _wake(self) -> None:
        if not (self.busy or self.kicked):
            if self.loop is None:
                raise RuntimeError(f"{self.name}: not bound to an event loop (LLMCore.bind)")
            self.kicked = True
            self.loop.defer(self)

    def _finish_now(self, s: Seq, now: float) -> list[Event]:
        """A sequence with nothing to compute: a continued prompt with no new tokens parks its
        KV again; a decode whose token came from the parked prefill ends."""
        if s.output == 0 and s.park is not None:
            self.parked[s.park] = (s.have, s.final)
        else:
            self.free += s.held
        s.held = 0
        s.first_s = now if s.first_s != s.first_s else s.first_s
        s.state, s.done_s = DONE, now
        self.outstanding -= 1
        self.completed += 1
        events: list[Event] = []
        self._emit_marks(s, now, events)
        events.extend(self.sink(s, now) or ())
        return events

    # ---- applying a plan -----------------------------------------------------------------
    def _admit_ready(self, now: float, events: list[Event]) -> None:
        """Sequences continuing a parked KV with nothing to prefill join the decode batch
        (they hold their blocks already) while seats are free."""
        while self.ready and len(self.running) + len(self.prefilling) < self.max_batch:
            s = self.ready.popleft()
            if s.sched_s != s.sched_s:
                s.sched_s = now
            s.held = 0
            s.state = PREFILL
            self._join_decode(s, now, events)

    def _apply(self, plan: IterationPlan, now: float) -> float:
        """Apply ``plan``; returns the iteration's duration (0: nothing runs)."""
        preempt, decode, chunks = plan
        if preempt:
            for s in preempt:
                self._preempt(s)
        n = 0
        if decode and self.running:
            self.free -= self.groups[-self.dit % self.block_size]     # need_blocks()
            n = len(self.running)
        self.n_decode = n
        self.chunks = chunks
        if not chunks:
            if self.free < 0:
                raise RuntimeError(f"{self.name}: plan overdraws the KV cache by {-self.free} blocks")
            if not n:
                return 0.0
            c = self._decode_coef.get(n)        # decode_s(n, ctx_sum), inlined: most iterations
            return c[0] + c[1] * self.ctx_sum if c is not None else self.decode_s(n, self.ctx_sum)
        tokens, attn, finishing = 0, 0.0, 0
        bs = self.block_size
        for s, m in chunks:
            if s.state == WAITING:
                q = self.background if s.background else self.waiting
                if not q or q[0] is not s:
                    raise RuntimeError(f"{self.name}: plan admits sequence {s.id}, not the head of its queue")
                q.popleft()
                self.free -= -(-(s.have + s.eff) // bs) - s.held      # new_blocks(s)
                s.held = 0              # its blocks are now counted as blocks(have + eff)
                s.state = PREFILL
                if s.sched_s != s.sched_s:  # NaN: first admission
                    s.sched_s = now
                self.prefilling.append(s)
            filled = s.filled
            if not 0 < m <= s.eff - filled:
                raise RuntimeError(f"{self.name}: plan prefills {m} tokens of sequence {s.id}")
            done = s.have + filled
            # (done + m)^2 - done^2 with products: the doubles ** 2 gave (both exact below 2**26 tokens)
            end, start = float(done + m), float(done)
            attn += end * end - start * start
            tokens += m
            finishing += filled + m == s.eff
        if self.free < 0:
            raise RuntimeError(f"{self.name}: plan overdraws the KV cache by {-self.free} blocks")
        if n:
            return self.step.step_s(tokens, attn, n, float(self.ctx_sum), prefill_seqs=finishing)
        key = (tokens, attn, finishing)         # a prefill-only pass: memoised (passes of equal prompts recur)
        dur = self._prefill_memo.get(key)
        if dur is None:
            dur = self._prefill_memo[key] = self.step.step_s(tokens, attn, 0, 0.0, prefill_seqs=finishing)
        return dur

    # ---- iterations ----------------------------------------------------------------
    def at_instant_end(self, now: float) -> Sequence[Event] | None:
        """Start the next iteration unless one runs (the loop calls this once the instant is over)."""
        self.kicked = False
        if self.busy:
            return None
        return self._start(now)

    def _start(self, now: float) -> Sequence[Event] | None:
        """Start the next iteration at ``now`` (nothing else can happen at this instant); returns
        the events it causes, the core's own iteration end last (none when it stays idle)."""
        events: list[Event] | None = None
        running = self.running
        if (self._quiet_decode and running and not (self.waiting or self.prefilling or self.ready or self.background)
                and self.free >= self.groups[-self.dit % self.block_size]):
            plan = DECODE_ONLY          # what the policy answers here (Policy.decodes_when_quiet)
            late = None
        else:
            if self.ready:
                events = []
                self._admit_ready(now, events)
            late = self._late(now) if self._lag and self.waiting else None
            plan = self.policy.schedule(self)
            if late:
                self.waiting.extend(late)
                if not (plan.decode or plan.chunks):     # nothing was planned: an idle engine admits at once
                    late = None
                    plan = self.policy.schedule(self)
        quiet = False
        if plan is DECODE_ONLY and running:        # most iterations: the whole batch decodes
            quiet = self.coast and self._solo and not events and not late
            self.free = free = self.free - self.groups[-self.dit % self.block_size]
            self.n_decode = n = len(running)
            self.chunks = ()
            if free < 0:
                raise RuntimeError(f"{self.name}: plan overdraws the KV cache by {-free} blocks")
            c = self._decode_coef.get(n)        # decode_s(n, ctx_sum), inlined
            dur = c[0] + c[1] * self.ctx_sum if c is not None else self.decode_s(n, self.ctx_sum)
        else:
            dur = self._apply(plan, now)
        if dur <= 0.0:
            self.busy = False
            return events
        if self.gpus:
            most = 0
            for g in self.gpus:
                if not g.busy:          # the GPU turns busy: its busy time runs from now (to until_s)
                    g.since = now if now < g.until_s else g.until_s
                g.busy += 1
                if g.busy > most:
                    most = g.busy
            c = self.colocation
            if c is not None and most > 1:      # alone on its GPUs: full speed
                dur *= c.factor(self.gpus)
        self.busy = True
        self.iter_start = now
        self.iterations += 1
        if self.chunks:
            self.prefill_iterations += 1
        self.time = now + dur
        if events:
            events.append(self)
            return events
        if quiet and (self._repeats or not (self.waiting or self.prefilling or self.ready or self.background)) \
                and self._coast():
            return None
        return self._me

    def _late(self, now: float) -> list[Seq] | None:
        """Async scheduling: vLLM plans step n+1 as step n starts (``step_with_batch_queue``), so
        the queue's tail that arrived after the step just ended had started is taken off (returned
        in order) for this plan; an engine that was idle (no step ended now) admits at once."""
        if self.time != now or not self.iterations:
            return None
        w, cut = self.waiting, self.iter_start
        late: list[Seq] = []
        while w and w[-1].arrival_s > cut:
            late.append(w.pop())
        late.reverse()
        return late

    def end_iteration(self, now: float) -> list[Event] | None:
        """End the running iteration at ``now``; the next one starts at the instant's end."""
        if self._run is not None:
            raise RuntimeError(f"{self.name}: end_iteration during a quiet stretch (a coasting core runs on its loop)")
        self.time = now
        return self.handle(None)

    def handle(self, sim: Simulator | None) -> list[Event] | Sequence[Event] | None:
        """The running iteration ends (at ``time``): tokens, finished sequences, the sink's events;
        then the next iteration starts at once when nothing else can happen at this instant on
        ``sim`` (the loop running it: ``Simulator.instant_over``), else at the instant's end (the
        loop's ``defer``)."""
        if self._run is not None:       # the last iteration of a quiet stretch ends
            self._settle(len(self._run) - 1)
        now = self.time
        if self.gpus:
            for g in self.gpus:
                g.busy -= 1
                if not g.busy:
                    g.busy_s += (now if now < g.until_s else g.until_s) - g.since
        self.busy_s += now - self.iter_start
        done: list[Seq] | None = None
        events: list[Event] | None = None
        n = self.n_decode
        if n:
            self.tokens += n
            k = self.dit
            self.ctx_sum += n
            self.dit = k + 1
            if self.mark_buckets or k in self.buckets:
                done, events = [], []
                self._advance_decode(k, done, events, now)
        if self.chunks:
            if done is None:
                done, events = [], []
            self._end_chunks(now, done, events)     # type: ignore[arg-type]
        if done:
            for s in done:
                s.state = DONE
                s.done_s = now
                self.outstanding -= 1
                self.completed += 1
                new = self.sink(s, now)
                if new:
                    events.extend(new)              # type: ignore[union-attr]
        self.busy = False
        if (self.running or self.waiting or self.ready or self.prefilling or self.background) and not self.kicked:
            if not events and sim is not None and sim.instant_over(now):
                return self._start(now)             # what the deferred start would do next
            self.kicked = True                  # _wake() inlined: once per iteration
            self.loop.defer(self)               # type: ignore[union-attr] - an iteration ran, so it has a loop
        return events

    def _end_chunks(self, now: float, done: list[Seq], events: list[Event]) -> None:
        """This iteration's prefill chunks are done: completed prompts park, finish or decode."""
        prefilling, tokens = self.prefilling, 0
        for s, n in self.chunks:
            tokens += n
            s.filled += n
            if s.filled < s.eff:
                continue
            if prefilling and prefilling[0] is s:
                prefilling.popleft()
            else:
                prefilling.remove(s)
            if s.output == 0:
                self._park(s)
                done.append(s)
                continue
            s.gen += 1
            if s.first_s != s.first_s:
                s.first_s = now
            if s.gen >= s.output:
                self._emit_marks(s, now, events)
                self.free += self.blocks(s.have + s.eff)
                done.append(s)
            else:
                self._join_decode(s, now, events)
        self.tokens += tokens

    def _park(self, s: Seq) -> None:
        if s.park is None:       # nothing will continue it: free the KV
            self.free += self.blocks(s.have + s.eff)
        else:
            self.parked[s.park] = (s.have + s.eff, s.final)

    def release(self, key: Hashable) -> None:
        """Drop a parked KV nobody will continue."""
        if self._run is not None:
            self._interrupt(self.loop.now)      # type: ignore[union-attr] - a run has a loop
        tokens, _ = self.parked.pop(key)
        self.free += self.blocks(tokens)
