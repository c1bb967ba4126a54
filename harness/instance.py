"""One serving instance (one model on tp*pp GPUs): iteration-level continuous batching.

The instance owns the bookkeeping every scheduler shares and keeps it O(1) amortised per
iteration, whatever the batch size:

- KV cache in blocks of ``block_size`` tokens (vLLM's paged allocation). A decoding call's
  context grows by one token per decode iteration, so it needs a new block exactly when its
  context is a multiple of ``block_size``. Calls are grouped by ``(ctx0 - join) mod
  block_size``; the calls that need a block in decode iteration ``k`` are the group
  ``(-k) mod block_size``, so a counter per group gives the demand without visiting calls.
- A decoding call's last iteration is known when it joins (``finish``), so calls wait in a
  bucket per iteration index instead of being advanced one by one.
- ``ctx_sum`` (total context of the decode batch, what decode attention reads) grows by the
  batch size per decode iteration and shrinks when calls leave.

Which calls run in the next iteration (admission, chunking, preemption) is the scheduler's
decision (``harness.schedulers``); how colocated instances slow each other is the
``Colocation`` policy's.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from harness.calls import DECODE, DONE, FAILED, PREFILL, WAITING, Call
from harness.core import Event, Simulator


class StepTime(Protocol):
    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float: ...


class Scheduler(Protocol):
    name: str

    def schedule(self, inst: Instance, now: float) -> float:
        """Fill ``inst.chunks`` / ``inst.n_decode`` for the next iteration; return its
        duration in seconds (0 when there is nothing to run)."""


Sink = Callable[[Call, float], "Iterable[Event] | None"]


class GpuSlot:
    """One physical GPU; ``busy`` counts instances with a shard on it that are mid-iteration."""

    __slots__ = ("id", "busy")

    def __init__(self, id: int) -> None:
        self.id = id
        self.busy = 0


class Colocation:
    """Processor sharing: an iteration that starts while ``k`` instances (itself included)
    are busy on one of its GPUs takes ``k`` times as long (the slowest shard bounds it).

    Approximation: the factor is fixed when the iteration starts, so an instance that
    starts first is slowed from its next iteration on (iterations last milliseconds)."""

    def factor(self, gpus: Sequence[GpuSlot]) -> float:
        return float(max(g.busy for g in gpus))


class IterationEnd(Event):
    __slots__ = ("inst",)

    def __init__(self, time: float, inst: Instance) -> None:
        super().__init__(time)
        self.inst = inst

    def handle(self, sim: Simulator) -> list[Event]:
        return self.inst.end_iteration(self.time)


class Kick(Event):
    """Start an idle instance after every same-time arrival has queued (priority 1)."""

    __slots__ = ("inst",)
    priority = 1

    def __init__(self, time: float, inst: Instance) -> None:
        super().__init__(time)
        self.inst = inst

    def handle(self, sim: Simulator) -> list[Event]:
        self.inst.kicked = False
        return [] if self.inst.busy else self.inst.start_iteration(self.time)


class Instance:
    """A model instance; ``sink(call, now)`` is told of every finished or rejected call."""

    def __init__(self, *, name: str, step: StepTime, scheduler: Scheduler, kv_tokens: int,
                 sink: Sink, max_batch: int = 128, max_batch_tokens: int = 4096,
                 block_size: int = 16, watermark: float = 0.01, gpus: Sequence[GpuSlot] = (),
                 colocation: Colocation | None = None, meta: Any = None) -> None:
        if kv_tokens < block_size:
            raise ValueError(f"{name}: KV cache of {kv_tokens} tokens holds less than one block")
        self.name, self.step, self.scheduler, self.sink, self.meta = name, step, scheduler, sink, meta
        self.max_batch, self.max_batch_tokens, self.block_size = max_batch, max_batch_tokens, block_size
        self.total_blocks = kv_tokens // block_size
        self.watermark = int(watermark * self.total_blocks)
        self.free = self.total_blocks
        self.gpus = tuple(gpus)
        self.colocation = colocation if len(self.gpus) else None
        self.waiting: deque[Call] = deque()
        self.prefilling: deque[Call] = deque()    # admitted, prompt not fully prefilled
        self.running: dict[int, Call] = {}        # decoding, in admission order
        self.buckets: dict[int, list[Call]] = {}  # decode-iteration index -> calls finishing then
        self.groups = [0] * block_size
        self.dit = 0                              # decode iterations run so far
        self.ctx_sum = 0
        self.chunks: list[tuple[Call, int]] = []  # this iteration's prefill work
        self.n_decode = 0                         # this iteration's decode batch
        self.busy = self.kicked = False
        self.outstanding = 0                      # queued + running calls
        self.iter_start = 0.0
        # counters
        self.iterations = self.preemptions = self.rejected = self.completed = 0
        self.busy_s = 0.0
        self.tokens = 0
        self._decode_coef: dict[int, tuple[float, float]] = {}
        self.blocked: tuple[Call | None, int] = (None, -1)   # (queue head, free blocks) when admission failed

    def decode_s(self, n: int, ctx: float) -> float:
        """``step.step_s(0, 0, n, ctx)``, memoised as ``a(n) + b(n) * ctx``: a decode iteration's time
        is affine in the batch's total context (attention reads it; nothing else depends on it);
        tests/harness check the identity against the profiler."""
        c = self._decode_coef.get(n)
        if c is None:
            a = self.step.step_s(0, 0.0, n, 0.0)
            c = self._decode_coef[n] = (a, (self.step.step_s(0, 0.0, n, 1e6) - a) / 1e6)
        return c[0] + c[1] * ctx

    # ---- capacity ------------------------------------------------------------------
    @property
    def kv_tokens(self) -> int:
        return self.total_blocks * self.block_size

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def fits(self, call: Call) -> bool:
        """Whether the call could ever run: its whole context fits the usable cache."""
        return self.blocks(call.prompt + call.output) <= self.total_blocks - self.watermark

    def need_blocks(self) -> int:
        """New blocks the decode batch needs in the next decode iteration."""
        return self.groups[-self.dit % self.block_size]

    # ---- arrivals ------------------------------------------------------------------
    def submit(self, call: Call, now: float) -> Iterable[Event] | None:
        """Queue ``call``; returns the events this causes (a kick, or the sink's on reject)."""
        call.instance = self
        call.arrival_s = now
        if not self.fits(call):
            call.state = FAILED
            call.done_s = now
            self.rejected += 1
            return self.sink(call, now)
        self.waiting.append(call)
        self.outstanding += 1
        if self.busy or self.kicked:
            return None
        self.kicked = True
        return (Kick(now, self),)

    # ---- state changes used by schedulers -----------------------------------------
    def admit(self, call: Call, now: float) -> None:
        self.free -= self.blocks(call.eff)
        call.state = PREFILL
        if call.sched_s != call.sched_s:  # NaN: first admission
            call.sched_s = now

    def preempt_decode_last(self) -> Call:
        """Recomputation preemption of the most recently admitted decoding call."""
        c = self.running.popitem()[1]
        k = self.dit
        ctx = c.ctx0 + (k - c.join)
        self.free += -(-ctx // self.block_size)
        self.ctx_sum -= ctx
        self.groups[(c.ctx0 - c.join) % self.block_size] -= 1
        c.gen += k - c.join
        return self._requeue(c)

    def preempt_prefill_last(self) -> Call:
        c = self.prefilling.pop()
        self.free += self.blocks(c.eff)
        return self._requeue(c)

    def _requeue(self, c: Call) -> Call:
        c.eff = c.prompt + c.gen
        c.filled = 0
        c.state = WAITING
        c.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(c)
        return c

    # ---- iterations ----------------------------------------------------------------
    def start_iteration(self, now: float) -> list[Event]:
        dur = self.scheduler.schedule(self, now)
        if dur <= 0.0:
            self.busy = False
            return []
        if self.colocation is not None:
            for g in self.gpus:
                g.busy += 1
            dur *= self.colocation.factor(self.gpus)
        self.busy = True
        self.iter_start = now
        self.iterations += 1
        return [IterationEnd(now + dur, self)]

    def end_iteration(self, now: float) -> list[Event]:
        if self.colocation is not None:
            for g in self.gpus:
                g.busy -= 1
        self.busy_s += now - self.iter_start
        done: list[Call] = []
        if self.n_decode:
            self.tokens += self.n_decode
            self._advance_decode(done)
        for c, n in self.chunks:
            self.tokens += n
            c.filled += n
            if c.filled < c.eff:
                continue
            if self.prefilling and self.prefilling[0] is c:
                self.prefilling.popleft()
            c.gen += 1
            if c.first_s != c.first_s:
                c.first_s = now
            if c.gen >= c.output:
                self.free += self.blocks(c.eff)
                done.append(c)
            else:
                self._join_decode(c)
        events: list[Event] = []
        for c in done:
            c.state = DONE
            c.done_s = now
            self.outstanding -= 1
            self.completed += 1
            new = self.sink(c, now)
            if new:
                events.extend(new)
        events.extend(self.start_iteration(now))
        return events

    def _join_decode(self, c: Call) -> None:
        c.state = DECODE
        c.ctx0 = c.eff
        c.join = k = self.dit
        c.finish = f = k + c.output - c.gen - 1
        self.running[c.id] = c
        self.groups[(c.ctx0 - k) % self.block_size] += 1
        self.ctx_sum += c.ctx0
        b = self.buckets.get(f)
        if b is None:
            self.buckets[f] = [c]
        else:
            b.append(c)

    def _advance_decode(self, done: list[Call]) -> None:
        k = self.dit
        self.ctx_sum += self.n_decode
        self.dit = k + 1
        bucket = self.buckets.pop(k, None)
        if not bucket:
            return
        bs = self.block_size
        for c in bucket:
            if c.state != DECODE or c.finish != k:
                continue  # preempted since (and maybe rescheduled to another index)
            ctx = c.ctx0 + (k + 1 - c.join)
            del self.running[c.id]
            self.free += -(-ctx // bs)
            self.ctx_sum -= ctx
            self.groups[(c.ctx0 - c.join) % bs] -= 1
            c.gen = c.output
            c.state = DONE  # guards against a second bucket entry after a re-admission
            done.append(c)

    def check(self) -> None:
        """Recount the O(1) bookkeeping from scratch (tests; slow)."""
        used = sum(self.blocks(c.ctx0 + self.dit - c.join) for c in self.running.values())
        used += sum(self.blocks(c.eff) for c in self.prefilling)
        assert used + self.free == self.total_blocks, (used, self.free, self.total_blocks)
        assert self.ctx_sum == sum(c.ctx0 + self.dit - c.join for c in self.running.values())
        assert sum(self.groups) == len(self.running)
