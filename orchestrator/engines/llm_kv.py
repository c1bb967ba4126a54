"""The paged KV cache of an engine core and the read-only view a policy has of it.

:class:`PagedKV` is the block accounting of ``orchestrator.engines.llm_core.LLMCore`` (its base
class): KV in blocks of ``block_size`` tokens (vLLM's paged allocation), ``free`` of
``total_blocks``, ``watermark`` kept free at admission, and the queues a policy reads. Its
methods are the capacity half of ``orchestrator.engines.llm_seq.CoreView``: what a sequence
needs to be admitted, what the decode batch needs next, what a preemption would free. The core
changes the state; nothing here does.

The decode batch's bookkeeping is O(1) per iteration: a decoding sequence needs a new block
exactly when its context is a multiple of ``block_size``, so sequences are grouped by ``(ctx0 -
join) mod block_size`` and group ``(-k) mod block_size`` is the demand of decode iteration ``k``
(``dit``: decode iterations run so far); ``ctx_sum`` is the decode batch's total context.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from orchestrator.engines.llm_seq import DECODE, Seq
from profiler.engine import EngineConfig


class PagedKV:
    """KV blocks and queues of one core (``kv_tokens`` of cache, ``config``'s block size,
    watermark and batch limits)."""

    def __init__(self, name: str, kv_tokens: int, config: EngineConfig) -> None:
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

    def check(self) -> None:
        """Recount the O(1) bookkeeping from scratch (tests; slow)."""
        used = sum(self.blocks(s.ctx0 + self.dit - s.join) for s in self.running.values())
        used += sum(self.blocks(s.have + s.eff) for s in self.prefilling)
        used += sum(s.held for q in (self.ready, self.waiting, self.background) for s in q)
        used += sum(self.blocks(t) for t, _ in self.parked.values())
        assert used + self.free == self.total_blocks, (used, self.free, self.total_blocks)
        assert self.ctx_sum == sum(s.ctx0 + self.dit - s.join for s in self.running.values())
        assert sum(self.groups) == len(self.running)
