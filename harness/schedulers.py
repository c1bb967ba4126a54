"""Batching policies: which calls run in an instance's next iteration.

``vllm``: vLLM (v0) default scheduling. Prefill-prioritised: while calls wait, the next
iteration is a prefill-only batch of waiting calls taken in order while the batch stays
within ``max_batch_tokens`` prompt tokens, ``max_batch`` sequences (running ones included)
and the free KV blocks minus a 1% watermark. Otherwise every running call decodes one token;
when the blocks they need are not free, the most recently admitted call is preempted by
recomputation (its blocks are freed and it goes back to the head of the queue; on
re-admission its prompt plus the tokens it had generated are prefilled again). A prompt
longer than ``max_batch_tokens`` is admitted alone (vLLM would reject it unless
``max_num_batched_tokens`` is raised to the model length; we do the latter).

``sarathi``: Sarathi-Serve chunked prefill. Each iteration has a token budget
``min(chunk_size, max_batch_tokens)`` (Sarathi-Serve's ``chunk_size`` is the per-iteration
budget). Every running call decodes one token (1 token each); the rest of the budget goes to
prefill chunks, first to admitted calls whose prompt is unfinished (in order), then to newly
admitted ones (all prompt blocks are allocated on admission, as vLLM's chunked prefill does).
Preemption when decode blocks run out takes the newest partially prefilled call first, then
the newest decoding call.
"""
from __future__ import annotations

from harness.instance import Instance

SCHEDULERS = ("vllm", "sarathi")


class VllmScheduler:
    name = "vllm"

    def schedule(self, inst: Instance, now: float) -> float:
        inst.chunks.clear()
        inst.n_decode = 0
        for _ in range(2):  # a second pass only after preemption emptied the decode batch
            # admission is retried only when the queue head or the free blocks changed
            if inst.waiting and (inst.waiting[0] is not inst.blocked[0] or inst.free > inst.blocked[1]
                                 or not inst.running):
                dur = self._prefill(inst, now)
                if dur:
                    return dur
                inst.blocked = (inst.waiting[0], inst.free)
            if not inst.running:
                return 0.0
            need = inst.need_blocks()
            while inst.free < need and inst.running:
                inst.preempt_decode_last()
                need = inst.need_blocks()
            if inst.running:
                inst.free -= need
                inst.n_decode = n = len(inst.running)
                return inst.decode_s(n, inst.ctx_sum)
        return 0.0

    def _prefill(self, inst: Instance, now: float) -> float:
        chunks, waiting = inst.chunks, inst.waiting
        tokens, attn = 0, 0.0
        seats = inst.max_batch - len(inst.running)
        limit = inst.max_batch_tokens
        while waiting and len(chunks) < seats:
            c = waiting[0]
            n = c.eff
            if chunks and tokens + n > limit:
                break
            if inst.free - inst.blocks(n) < inst.watermark:
                break
            waiting.popleft()
            inst.admit(c, now)
            inst.prefilling.append(c)
            chunks.append((c, n))
            tokens += n
            attn += float(n) * n
        if not chunks:
            return 0.0
        return inst.step.step_s(tokens, attn, 0, 0.0, prefill_seqs=len(chunks))


class SarathiScheduler:
    name = "sarathi"

    def __init__(self, *, chunk_size: int = 512) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.chunk_size = chunk_size

    def budget(self, inst: Instance) -> int:
        return min(self.chunk_size, inst.max_batch_tokens)

    def schedule(self, inst: Instance, now: float) -> float:
        chunks = inst.chunks
        chunks.clear()
        budget = self.budget(inst)
        n = len(inst.running)
        if n:
            need = inst.need_blocks()
            while inst.free < need and (inst.prefilling or inst.running):
                if inst.prefilling:
                    inst.preempt_prefill_last()
                else:
                    inst.preempt_decode_last()
                need = inst.need_blocks()
            inst.free -= need
            n = len(inst.running)
        inst.n_decode = n
        tokens, attn, finishing = n, 0.0, 0
        for c in inst.prefilling:
            if tokens >= budget:
                break
            m = min(c.eff - c.filled, budget - tokens)
            chunks.append((c, m))
            tokens += m
            attn += float(c.filled + m) ** 2 - float(c.filled) ** 2
            finishing += c.filled + m == c.eff
        waiting = inst.waiting
        while waiting and tokens < budget and n + len(inst.prefilling) < inst.max_batch:
            c = waiting[0]
            if inst.free - inst.blocks(c.eff) < inst.watermark:
                break
            waiting.popleft()
            inst.admit(c, now)
            inst.prefilling.append(c)
            m = min(c.eff, budget - tokens)
            chunks.append((c, m))
            tokens += m
            attn += float(m) ** 2
            finishing += m == c.eff
        if tokens == 0:
            return 0.0
        if tokens == n:
            return inst.decode_s(n, inst.ctx_sum)
        return inst.step.step_s(tokens - n, attn, n, float(inst.ctx_sum), prefill_seqs=finishing)


def make_scheduler(name: str, *, chunk_size: int = 512) -> VllmScheduler | SarathiScheduler:
    """A scheduler by name; unknown names list the known ones."""
    if name == "vllm":
        return VllmScheduler()
    if name == "sarathi":
        return SarathiScheduler(chunk_size=chunk_size)
    raise KeyError(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}")
