"""The vocabulary the LLM core (``orchestrator.engines.llm_core``) and its policies
(``orchestrator.engines.admission``) share: a sequence (:class:`Seq`, its states, the callbacks the
core tells of finished sequences and reached marks), the state sequences live in (:class:`PagedKV`,
the core's base class: queues, paged KV blocks, the decode batch, preemption), what a policy sees
of it (:class:`CoreView`, read-only), what it decides (:class:`IterationPlan`, immutable) and the
policy interface itself (:class:`Policy`).

:class:`PagedKV`: KV in blocks of ``block_size`` tokens (vLLM's paged allocation), ``free`` of
``total_blocks``, ``watermark`` kept free at admission. Its public methods are the capacity half
of :class:`CoreView` and change nothing; its private ones are the changes the core makes when it
applies a plan or ends an iteration (a sequence joins or leaves the decode batch, reaches a mark,
is preempted). The decode batch's bookkeeping is O(1) per iteration: a decoding sequence needs a
new block exactly when its context is a multiple of ``block_size``, so sequences are grouped by
``(ctx0 - join) mod block_size`` and group ``(-k) mod block_size`` is the demand of decode
iteration ``k`` (``dit``: decode iterations run so far); ``ctx_sum`` is the batch's total
context; a decoding sequence's last iteration (and each mark's) is known when it joins, so it
waits in a bucket per iteration index.

Tokens: the prefill that completes a prompt produces the first output token (vLLM); each
decode iteration one more. A prefill-only sequence (``output == 0``) parks its KV under
``park`` (blocks stay allocated) and records whether its last logits give a first token
(``final``); a later sequence with ``kv_from`` set takes that KV over: it prefills only its own
new tokens, paying attention over the parked prefix, or, with nothing new to prefill, joins the
decode batch at once.
"""
from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from orchestrator.runtime.events import Event
from profiler.engine import EngineConfig

WAITING, PREFILL, DECODE, DONE, FAILED = range(5)
NAN = float("nan")


class Seq:
    """One sequence served by one core: ``prompt`` new tokens in, ``output`` tokens out.

    ``cached``: prefix tokens whose KV is already computed (a prefix-cache hit; not prefilled,
    blocks allocated). ``kv_from``/``park``/``final``: see the module docstring. ``marks``:
    ascending counts of generated tokens at which the core reports a piece. ``background``: a
    low-priority prefill (Teola's partial prefilling): admitted only into a prefill pass that runs
    anyway, with what its budget leaves, or on an idle instance; never ahead of a queued
    sequence (:meth:`LLMCore.promote` makes it a regular one). Times are simulated
    seconds (NaN until they happen): ``arrival_s`` (reached the instance), ``sched_s`` (first
    admitted), ``first_s`` (first output token), ``done_s`` (finished, parked or rejected).
    ``owner`` is free for the caller."""

    __slots__ = ("id", "prompt", "output", "cached", "kv_from", "park", "final", "marks", "mark_i",
                 "arrival_s", "sched_s", "first_s", "done_s", "state", "gen", "have", "held", "eff",
                 "filled", "tokens0", "ctx0", "join", "finish", "preemptions", "owner", "background")

    def __init__(self, id: int, prompt: int, output: int, arrival_s: float = NAN, owner: object = None, *,
                 cached: int = 0, kv_from: Hashable | None = None, park: Hashable | None = None, final: bool = True,
                 marks: Sequence[int] = (), background: bool = False) -> None:
        self.id, self.prompt, self.output, self.owner = id, prompt, output, owner
        self.background = background
        self.cached, self.kv_from, self.park, self.final = cached, kv_from, park, final
        self.marks, self.mark_i = tuple(marks), 0
        self.arrival_s = arrival_s
        self.sched_s = self.first_s = self.done_s = NAN
        self.state = WAITING
        self.gen = 0          # output tokens generated so far
        self.have = cached    # context tokens whose KV exists when admitted
        self.held = 0         # KV blocks it owns before admission (a parked prefix)
        self.eff = prompt     # tokens the next prefill must process
        self.filled = 0       # of `eff`, already prefilled (chunked prefill)
        self.tokens0 = cached + prompt   # its context before generating (set again on kv_from)
        self.ctx0 = 0         # KV tokens when it joined the decode pool ...
        self.join = 0         # ... at this decode-iteration index
        self.finish = -1      # decode-iteration index of its last token
        self.preemptions = 0

    @property
    def failed(self) -> bool:
        return self.state == FAILED


Sink = Callable[[Seq, float], "Iterable[Event] | None"]
PieceSink = Callable[[Seq, int, float], "Iterable[Event] | None"]


class PagedKV:
    """KV blocks and queues of one core (``kv_tokens`` of cache, ``config``'s block size,
    watermark and batch limits)."""

    def __init__(self, name: str, kv_tokens: int, config: EngineConfig, on_piece: PieceSink | None = None) -> None:
        bs = config.block_size
        if kv_tokens < bs:
            raise ValueError(f"{name}: KV cache of {kv_tokens} tokens holds less than one block")
        self.name, self.config = name, config
        self.max_batch, self.max_batch_tokens, self.block_size = config.max_num_seqs, config.max_num_batched_tokens, bs
        self.total_blocks = kv_tokens // bs
        self.watermark = int(config.watermark * self.total_blocks)
        self.free = self.total_blocks
        self.waiting: deque[Seq] = deque()
        self.prefilling: deque[Seq] = deque()    # admitted, prompt not fully prefilled
        self.running: dict[int, Seq] = {}        # decoding, in admission order
        self.ready: deque[Seq] = deque()         # continue a parked KV with nothing to prefill
        self.background: deque[Seq] = deque()    # low-priority prefills (Seq.background)
        self.parked: dict[Hashable, tuple[int, bool]] = {}   # key -> (KV tokens, first token ready)
        self.on_piece = on_piece
        self.buckets: dict[int, list[Seq]] = {}  # decode-iteration index -> sequences finishing then
        self.finish_keys: list[int] = []          # the keys of ``buckets``, a min-heap
        self.mark_buckets: dict[int, list[Seq]] = {}
        self.preemptions = 0
        self.groups = [0] * bs
        self.dit = 0                              # decode iterations run so far
        self.ctx_sum = 0

    @property
    def kv_tokens(self) -> int:
        return self.total_blocks * self.block_size

    @property
    def used_kv_tokens(self) -> int:
        """KV held (blocks in use x block size), parked prefixes included."""
        return (self.total_blocks - self.free) * self.block_size

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def new_blocks(self, s: Seq) -> int:
        """Blocks ``s`` must newly take to be admitted (its parked prefix is already held)."""
        return -(-(s.have + s.eff) // self.block_size) - s.held

    def fits(self, s: Seq) -> bool:
        """Whether the sequence could ever run: its whole context fits the usable cache."""
        return self.blocks(s.tokens0 + s.output) <= self.total_blocks - self.watermark

    def need_blocks(self) -> int:
        """New blocks the decode batch needs in the next decode iteration."""
        return self.groups[-self.dit % self.block_size]

    def needs_block(self, s: Seq) -> bool:
        return (s.ctx0 - s.join) % self.block_size == -self.dit % self.block_size

    def held_blocks(self, s: Seq) -> int:
        if s.state == DECODE:
            return self.blocks(s.ctx0 + self.dit - s.join)
        return self.blocks(s.have + s.eff)

    def recompute_tokens(self, s: Seq) -> int:
        return s.tokens0 + s.gen + (self.dit - s.join if s.state == DECODE else 0)

    # ---- changes: the decode batch and preemption ---------------------------------------
    def _preempt(self, s: Seq) -> None:
        """Recomputation preemption: free ``s``'s blocks, requeue it at the head of the queue."""
        if s.state == DECODE:
            k = self.dit
            ctx = s.ctx0 + (k - s.join)
            del self.running[s.id]
            self.free += -(-ctx // self.block_size)
            self.ctx_sum -= ctx
            self.groups[(s.ctx0 - s.join) % self.block_size] -= 1
            s.gen += k - s.join
        elif s.state == PREFILL and s.eff > s.filled:
            if self.prefilling[-1] is s:
                self.prefilling.pop()
            else:
                self.prefilling.remove(s)
            self.free += self.blocks(s.have + s.eff)
        else:
            raise RuntimeError(f"{self.name}: plan preempts sequence {s.id}, which is not admitted")
        s.eff = s.tokens0 + s.gen
        s.have = s.held = s.filled = 0
        s.state = WAITING
        s.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(s)

    def _emit_marks(self, s: Seq, now: float, events: list[Event]) -> None:
        """Report every mark the sequence has reached (``gen`` tokens) and not reported yet."""
        if self.on_piece is None:
            return
        while s.mark_i < len(s.marks) and s.marks[s.mark_i] <= s.gen:
            new = self.on_piece(s, s.mark_i, now)
            s.mark_i += 1
            if new:
                events.extend(new)

    def _join_decode(self, s: Seq, now: float, events: list[Event]) -> None:
        if self.on_piece is not None:
            self._emit_marks(s, now, events)
        s.state = DECODE
        s.ctx0 = s.have + s.eff
        s.join = k = self.dit
        s.finish = f = k + s.output - s.gen - 1
        if s.first_s != s.first_s and s.gen:
            s.first_s = now
        self.running[s.id] = s
        self.groups[(s.ctx0 - k) % self.block_size] += 1
        self.ctx_sum += s.ctx0
        b = self.buckets.get(f)
        if b is None:
            self.buckets[f] = [s]
            heappush(self.finish_keys, f)
        else:
            b.append(s)
        if s.mark_i < len(s.marks) and self.on_piece is not None:
            # mark m is reached at the end of decode iteration k + m - gen - 1
            for m in s.marks[s.mark_i:]:
                self.mark_buckets.setdefault(k + m - s.gen - 1, []).append(s)

    def _advance_decode(self, k: int, done: list[Seq], events: list[Event], now: float) -> None:
        """Decode iteration ``k`` ended: report the marks reached, retire the sequences done."""
        if self.mark_buckets:
            for s in self.mark_buckets.pop(k, ()):
                # stale entries (a preempted and readmitted sequence) do not match
                if (s.state == DECODE and s.mark_i < len(s.marks)
                        and s.join + s.marks[s.mark_i] - s.gen - 1 == k):
                    new = self.on_piece(s, s.mark_i, now)
                    s.mark_i += 1
                    if new:
                        events.extend(new)
        bucket = self.buckets.pop(k, None)
        if bucket is None:
            return
        heappop(self.finish_keys)       # k: every key below it was popped at its own iteration
        bs = self.block_size
        for s in bucket:
            if s.state != DECODE or s.finish != k:
                continue  # preempted since (and maybe rescheduled to another index)
            ctx = s.ctx0 + (k + 1 - s.join)
            del self.running[s.id]
            self.free += -(-ctx // bs)
            self.ctx_sum -= ctx
            self.groups[(s.ctx0 - s.join) % bs] -= 1
            s.gen = s.output
            s.state = DONE  # guards against a second bucket entry after a re-admission
            done.append(s)

    def check(self) -> None:
        """Recount the O(1) bookkeeping from scratch (tests; slow)."""
        used = sum(self.blocks(s.ctx0 + self.dit - s.join) for s in self.running.values())
        used += sum(self.blocks(s.have + s.eff) for s in self.prefilling)
        used += sum(s.held for q in (self.ready, self.waiting, self.background) for s in q)
        used += sum(self.blocks(t) for t, _ in self.parked.values())
        assert used + self.free == self.total_blocks, (used, self.free, self.total_blocks)
        assert self.ctx_sum == sum(s.ctx0 + self.dit - s.join for s in self.running.values())
        assert sum(self.groups) == len(self.running)
        assert sorted(self.finish_keys) == sorted(self.buckets) and all(k >= self.dit for k in self.buckets)


class IterationPlan(NamedTuple):
    """One iteration as a policy decides it; only the core applies it, in this order (vLLM v1's
    ``SchedulerOutput``: ``preempted_req_ids``, then ``num_scheduled_tokens`` per request).

    ``preempt``: sequences preempted by recomputation, in order; each frees its blocks and goes to
    the head of the waiting queue (so the last one ends first), to prefill its whole context
    (:meth:`CoreView.recompute_tokens`) when readmitted. ``decode``: whether the decode batch left
    after the preemptions decodes one token per sequence (the batch advances as a whole: its
    bookkeeping is O(1) per iteration; a policy that would decode only some preempts the others).
    ``chunks``: (sequence, prompt tokens) prefilled in this iteration, in order: a sequence being
    prefilled continues, a waiting one (the head of its queue, the regular queue before the
    background one) is admitted first, taking the blocks of its whole prompt.

    The core times the iteration from the plan (the step time model), not the policy."""

    preempt: tuple[Seq, ...] = ()
    decode: bool = False
    chunks: tuple[tuple[Seq, int], ...] = ()


#: an iteration with nothing to run; one where only the decode batch runs
IDLE = IterationPlan()
DECODE_ONLY = IterationPlan(decode=True)


class CoreView(Protocol):
    """What a policy may read of a core (``LLMCore`` is one); nothing here may be written.

    Queues in order: ``waiting`` (regular sequences not admitted), ``background`` (low-priority
    prefills, ``Seq.background``), ``prefilling`` (admitted, prompt not fully prefilled) and
    ``running`` (decoding, by id in admission order). KV in blocks of ``block_size`` tokens:
    ``free`` of ``total_blocks``, ``watermark`` kept free at admission."""

    @property
    def config(self) -> EngineConfig: ...
    @property
    def waiting(self) -> Sequence[Seq]: ...
    @property
    def background(self) -> Sequence[Seq]: ...
    @property
    def prefilling(self) -> Sequence[Seq]: ...
    @property
    def running(self) -> Mapping[int, Seq]: ...
    @property
    def free(self) -> int: ...
    @property
    def watermark(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_batch_tokens(self) -> int: ...

    def blocks(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""

    def new_blocks(self, s: Seq) -> int:
        """Blocks waiting sequence ``s`` must newly take to be admitted."""

    def need_blocks(self) -> int:
        """New blocks the decode batch needs in its next decode iteration."""

    def needs_block(self, s: Seq) -> bool:
        """Whether decoding sequence ``s`` is one of those needing a new block."""

    def held_blocks(self, s: Seq) -> int:
        """Blocks admitted sequence ``s`` (decoding or prefilling) frees when preempted now."""

    def recompute_tokens(self, s: Seq) -> int:
        """Tokens admitted sequence ``s`` prefills when readmitted after a preemption now."""


class Policy(Protocol):
    """Decides each iteration of one core (``EngineConfig.scheduler`` names one).

    A policy may declare ``decodes_when_quiet = True``: with nothing waiting, prefilling, ready
    or in the background queue and the decode batch's next blocks free, its plan is always
    :data:`DECODE_ONLY`, so the core does not ask (most iterations of a busy core; every policy
    of ``orchestrator.engines.admission`` declares it). Without it the core asks every time.

    A policy may also declare ``decode_only_repeats = True``: once it answered
    :data:`DECODE_ONLY`, it answers it again at the next iteration as long as nothing reached the
    core (nothing submitted, admitted, finished, preempted or released: only the decode batch
    decoded, so the free blocks did not grow) and the batch's next blocks are free. A core built
    with ``coast`` then runs such stretches without asking (``LLMCore._coast``); every policy of
    ``orchestrator.engines.admission`` declares it. A policy keeping state between iterations
    must not need to see those iterations."""

    name: str

    def schedule(self, view: CoreView) -> IterationPlan:
        """The next iteration; :data:`IDLE` when there is nothing to run."""
