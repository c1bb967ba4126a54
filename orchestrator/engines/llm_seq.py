"""The state of the LLM core (``orchestrator.engines.llm_core``): a sequence (:class:`Seq`, its
states, the callbacks the core tells of finished sequences and reached marks), the state sequences
live in (:class:`PagedKV`: queues, paged KV blocks, the decode batch, preemption) and the core's
quiet decode stretches (:class:`QuietStretches`, the core's base class). What a policy sees of it,
what it decides and the policy interface: ``orchestrator.engines.llm_plan``.

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

Quiet decode stretches (:class:`QuietStretches`): A quiet iteration is decode-only, ends reporting nothing (no sequence finishes, no mark is
reached) and is followed by a decode-only start: the policy repeats ``DECODE_ONLY`` while nothing
reaches the core (``Policy.decode_only_repeats``) and the batch's next blocks are free. Most
iterations of a busy core are quiet, and nothing outside the core sees them, so their ends are
worked out in one go when the stretch starts (the same step times, summed in the same order) and
only the stretch's last end is on the event loop. Anything that reaches the core before that
(``submit``, ``promote``, ``release``, another core taking a shard on its GPU) settles the
iterations ended so far and moves the entry to the end of the one in flight
(``Simulator.reschedule``): the core's state, times, busy times, GPU busy times and the event
count (each settled end counts as the event it replaces) are those of running every iteration
as an event. Only a core alone on its GPUs coasts (colocated cores slow each other down at every
iteration start).

The one difference: when a settled iteration end falls on exactly the same simulated time as
another event (to the bit: identical cores with identical work and a constant step time), the
two may be handled in the other order than the event-by-event loop would (its order at a tie is
the order in which events were pushed); routing decisions taken at that instant can then differ.
Profiled step times and measured or random arrival times make such ties practically absent
(``experiments/scripts/sim_identity.py``: every compared array identical; tests in
``tests/harness/test_coast.py``).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from heapq import heappop, heappush
from collections.abc import Callable, Hashable, Iterable, Sequence

from orchestrator.engines.llm_timing import GpuSlot
from orchestrator.runtime.events import Entry, Event, Simulator
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

    def __init__(self, id: int, prompt: int, output: int, arrival_s: float = NAN, owner: object = None,
                 cached: int = 0, kv_from: Hashable | None = None, park: Hashable | None = None, final: bool = True,
                 marks: Sequence[int] = (), background: bool = False) -> None:
        # (defaults positional, not keyword-only: a call that omits keyword-only parameters looks
        # each one up in a dict; one assignment per statement or one value to many: no tuples)
        self.id = id
        self.prompt = prompt
        self.output = output
        self.owner = owner
        self.background = background
        self.cached = cached
        self.kv_from = kv_from
        self.park = park
        self.final = final
        self.marks = marks if marks.__class__ is tuple else tuple(marks)
        self.arrival_s = arrival_s
        self.sched_s = self.first_s = self.done_s = NAN
        self.state = WAITING
        # output tokens generated so far; KV blocks it owns before admission (a parked prefix); of
        # `eff`, the tokens already prefilled (chunked prefill); KV tokens when it joined the decode
        # pool ... at this decode-iteration index; marks reported
        self.gen = self.held = self.filled = self.ctx0 = self.join = self.mark_i = self.preemptions = 0
        self.have = cached    # context tokens whose KV exists when admitted
        self.eff = prompt     # tokens the next prefill must process
        self.tokens0 = cached + prompt   # its context before generating (set again on kv_from)
        self.finish = -1      # decode-iteration index of its last token

    @property
    def failed(self) -> bool:
        return self.state == FAILED


Sink = Callable[[Seq, float], "Iterable[Event] | None"]
PieceSink = Callable[[Seq, int, float], "Iterable[Event] | None"]


class PagedKV:
    """KV blocks and queues of one core (``kv_tokens`` of cache, ``config``'s block size,
    watermark and batch limits). Its attributes are slots of the core (``LLMCore.__slots__``)."""

    __slots__ = ()

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
        bs, running, groups = self.block_size, self.running, self.groups
        for s in bucket:
            if s.state != DECODE or s.finish != k:
                continue  # preempted since (and maybe rescheduled to another index)
            ctx = s.ctx0 + (k + 1 - s.join)
            del running[s.id]
            self.free += -(-ctx // bs)
            self.ctx_sum -= ctx
            groups[(s.ctx0 - s.join) % bs] -= 1
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


#: the most iterations one quiet stretch covers (:meth:`QuietStretches._coast`)
RUN_CAP = 64


class QuietStretches(PagedKV):
    """The KV and batch state (:class:`PagedKV`) plus the iteration clock a stretch advances; the
    core (``LLMCore``) sets every attribute below."""

    __slots__ = ()

    time: float                                  # the end of the iteration in flight (or of the stretch)
    iter_start: float
    busy_s: float
    tokens: int
    iterations: int
    n_decode: int
    gpus: tuple[GpuSlot, ...]
    loop: Simulator | None
    coast: bool
    _solo: bool
    _run: list[float] | None                     # a stretch under way: its iterations' ends
    _entry: Entry | None                         # ... and its heap entry
    _decode_coef: dict[int, tuple[float, float]]

    def _coast(self) -> bool:
        """The decode-only iteration just started begins a quiet stretch: the iterations after it
        whose end reports nothing (no sequence finishes, no mark is reached) and whose next start
        would be decode-only again (the policy repeats ``DECODE_ONLY`` while nothing reaches the
        core: ``Policy.decode_only_repeats``, or nothing is queued; the batch's next blocks are
        free). Their ends are worked out now (the same step times, summed in the same order) and
        the stretch is one heap entry, at the end of its last iteration (at most ``RUN_CAP``
        iterations, none past the loop's ``until_s``). Returns whether there is a stretch (the
        core then pushed its entry itself). Only a core alone on its GPUs coasts (``share_gpu``)."""
        k, n, free, bs = self.dit, self.n_decode, self.free, self.block_size
        last = k + RUN_CAP                      # the stretch's last iteration (its end is the entry)
        if self.finish_keys and self.finish_keys[0] < last:
            last = self.finish_keys[0]
        if self.mark_buckets:
            last = min(last, min(self.mark_buckets))
        m = last - k                            # quiet ends (each followed by a decode-only start)
        if m and free < n * (m // bs + 1):      # the blocks may run out: the first start they do not cover
            groups = self.groups
            for i in range(1, m + 1):
                free -= groups[-(k + i) % bs]
                if free < 0:
                    m = i - 1
                    break
        if not m:
            return False
        coef = self._decode_coef.get(n)         # _start's duration of a decode-only iteration
        if coef is None:                        # not affine (LLMCore.decode_s): no stretch
            return False
        a, b = coef
        t = self.time
        ends = [t]
        # the batch's context at each start as a float (exact: an integer below 2**53), so b * c
        # is a float product, as b * the int was (which converts it); range(m): small cached ints
        c, fn = float(self.ctx_sum), float(n)
        for _ in range(m):
            c += fn
            t = t + (a + b * c)
            ends.append(t)
        loop = self.loop
        until = loop.until_s                    # type: ignore[union-attr] - an iteration ran, so it has a loop
        if ends[m] > until:
            m = bisect_right(ends, until) - 1
            if m <= 0:
                return False
            del ends[m + 1:]
        self._run = ends
        self.time = ends[m]
        self._entry = loop.push(self)           # type: ignore[union-attr]
        return True

    def _settle(self, j: int) -> None:
        """End the quiet stretch after its first ``j`` iterations (each ended and the next started,
        as ``handle`` and ``_start`` would have); the next one is in flight (``time``: its end)."""
        ends = self._run
        self._run = None
        if j:
            done = ends[:j]                     # type: ignore[index]
            start, busy = self.iter_start, self.busy_s
            gpus = self.gpus
            if len(gpus) == 1 and gpus[0].since == start and done[-1] < gpus[0].until_s:
                g = gpus[0]                     # its busy time runs with the core's: the same lengths
                gpu_busy = g.busy_s
                if gpu_busy == busy:            # (alone on it from the start) the same sums too: one loop
                    for t in done:
                        busy += t - start
                        start = t
                    gpu_busy = busy
                else:
                    for t in done:
                        d = t - start
                        busy += d
                        gpu_busy += d
                        start = t
                g.since, g.busy_s = start, gpu_busy
                gpus = ()
            else:
                for t in done:                  # each iteration's length added in turn, as handle does
                    busy += t - start
                    start = t
            self.busy_s, self.iter_start = busy, start
            for g in gpus:                      # alone on it: busy ends and starts again at each end
                u, since, gpu_busy = g.until_s, g.since, g.busy_s
                for t in done:
                    if t > u:
                        t = u
                    gpu_busy += t - since
                    since = t
                g.since, g.busy_s = since, gpu_busy
            k, n, bs, groups = self.dit, self.n_decode, self.block_size, self.groups
            need, r = j // bs * n, j % bs       # blocks the j starts take: n per bs iterations, then groups
            if r:                               # -(k + i) % bs, i = j - r + 1 .. j: r indices down from hi,
                hi, lo = -(k + j - r + 1) % bs, -(k + j) % bs   # lo > hi: around the ring
                need += sum(groups[lo:hi + 1]) if lo <= hi else sum(groups[:hi + 1]) + sum(groups[lo:])
            self.free -= need
            self.tokens += n * j
            self.ctx_sum += n * j
            self.dit = k + j
            self.iterations += j
            self.loop.events_handled += j       # type: ignore[union-attr] - each end an event
        self.time = ends[j]                     # type: ignore[index]

    def _interrupt(self, now: float) -> None:
        """Something reaches the core at ``now`` during a quiet stretch: the iterations ended before
        ``now`` are settled and the one in flight becomes the last (its end is the core's entry)."""
        ends = self._run
        last = len(ends) - 1                    # type: ignore[arg-type]
        j = bisect_left(ends, now, 0, last)     # type: ignore[arg-type]
        self._settle(j)
        if j < last:
            self._entry = self.loop.reschedule(self._entry)   # type: ignore[union-attr, arg-type]

    def share_gpu(self) -> None:
        """Another core took a shard on one of this core's GPUs: their iterations slow each other
        down (``Colocation``), so this core runs every iteration as an event from now on."""
        self._solo = False
        if self._run is not None:
            self._interrupt(self.loop.now)      # type: ignore[union-attr]
