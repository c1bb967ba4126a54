"""The paged KV cache of an engine core, its decode batch and preemption, and the read-only view
a policy has of them.

:class:`PagedKV` is the block accounting of ``orchestrator.engines.llm_core.LLMCore`` (its base
class): KV in blocks of ``block_size`` tokens (vLLM's paged allocation), ``free`` of
``total_blocks``, ``watermark`` kept free at admission, and the queues a policy reads. Its
public methods are the capacity half of ``orchestrator.engines.llm_seq.CoreView`` (what a
sequence needs to be admitted, what the decode batch needs next, what a preemption would free)
and change nothing; its private ones are the state changes the core makes when it applies a
plan or ends an iteration: a sequence joins or leaves the decode batch, reaches a mark, or is
preempted.

The decode batch's bookkeeping is O(1) per iteration: a decoding sequence needs a new block
exactly when its context is a multiple of ``block_size``, so sequences are grouped by ``(ctx0 -
join) mod block_size`` and group ``(-k) mod block_size`` is the demand of decode iteration ``k``
(``dit``: decode iterations run so far); ``ctx_sum`` is the decode batch's total context.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from orchestrator.engines.llm_seq import DECODE, DONE, PREFILL, WAITING, PieceSink, Seq
from orchestrator.runtime.events import Event
from profiler.engine import EngineConfig


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
        if not bucket:
            return
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
