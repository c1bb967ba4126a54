"""Admission policies of the engine core: which sequences run in an instance's next iteration.

``vllm`` (:class:`VllmV0`): vLLM (v0) default scheduling. Prefill-prioritised: while sequences
wait, the next iteration is a prefill-only pass over waiting sequences taken in order while the
pass stays within ``max_num_batched_tokens`` prompt tokens, ``max_num_seqs`` sequences (running
ones included) and the free KV blocks minus the watermark. Otherwise every running sequence
decodes one token; when the blocks they need are not free, the most recently admitted one is
preempted by recomputation (its blocks are freed and it goes back to the head of the queue; on
readmission its whole context is prefilled again). A prompt longer than the budget is admitted
alone (vLLM would reject it unless ``max_num_batched_tokens`` is raised to the model length; we
do the latter).

``padded`` (:class:`PaddedPrefill`): the same, with the prefill budget of the vLLM v0 fork that
Ayo/Teola runs (``NetX-lab/Ayo``, ``vllm/vllm/core/scheduler.py``, ``Scheduler._schedule``): a
pass is padded to its longest prompt, so it admits while ``len(pass) x max(prompt tokens) <=
max_num_batched_tokens``. The pass's time is that of its real tokens.

``sarathi`` (:class:`Sarathi`): Sarathi-Serve chunked prefill. Each iteration has a token budget
``min(chunk_size, max_num_batched_tokens)``. Every running sequence decodes one token (1 token
each); the rest of the budget goes to prefill chunks, first to admitted sequences whose prompt
is unfinished (in order), then to newly admitted ones (all prompt blocks are allocated on
admission, as vLLM's chunked prefill does). Preemption when decode blocks run out takes the
newest partially prefilled sequence first, then the newest decoding one.

A prefill of ``n`` new tokens on top of ``c`` tokens already in the KV cache (a continued
prompt, a prefix-cache hit, an earlier chunk) pays attention work ``(c + n)^2 - c^2``.

Background sequences (``Seq.background``, queued in ``LLMCore.background``: Teola's partial
prefills) never go ahead of a queued regular one: every policy admits them only after the
regular queue is empty, into what is left of a prefill pass (or, for ``sarathi``, of an
iteration's token budget) that runs anyway, or on an instance with nothing else to do. Without
background sequences every policy behaves exactly as described above.
"""
from __future__ import annotations

from typing import Any

from orchestrator.engines.llm_core import LLMCore

SCHEDULERS = ("vllm", "sarathi", "padded")


class VllmV0:
    name = "vllm"

    def schedule(self, inst: LLMCore, now: float) -> float:
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
            elif inst.background and not inst.running and not inst.waiting:   # idle: background may run
                dur = self._prefill(inst, now)
                if dur:
                    return dur
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

    def over_budget(self, tokens: int, longest: int, seqs: int, n: int, limit: int) -> bool:
        """Whether a prompt of ``n`` tokens would overflow a pass of ``seqs`` prompts holding
        ``tokens`` tokens (the longest ``longest``)."""
        return tokens + n > limit

    def _prefill(self, inst: LLMCore, now: float) -> float:
        acc = self._admit(inst, inst.waiting, (0, 0.0, 0), now)
        if inst.background and not inst.waiting and (inst.chunks or not inst.running):
            acc = self._admit(inst, inst.background, acc, now)
        if not inst.chunks:
            return 0.0
        return inst.step.step_s(acc[0], acc[1], 0, 0.0, prefill_seqs=len(inst.chunks))

    def _admit(self, inst: LLMCore, queue: Any, acc: tuple[int, float, int], now: float) -> tuple[int, float, int]:
        """Admit from the head of ``queue`` into this pass; ``acc`` = (tokens, attention work,
        longest prompt) of the pass so far."""
        chunks = inst.chunks
        tokens, attn, longest = acc
        seats = inst.max_batch - len(inst.running)
        limit = inst.max_batch_tokens
        while queue and len(chunks) < seats:
            c = queue[0]
            n = c.eff
            if chunks and self.over_budget(tokens, longest, len(chunks), n, limit):
                break
            if inst.free - inst.new_blocks(c) < inst.watermark:
                break
            queue.popleft()
            have = c.have
            inst.admit(c, now)
            inst.prefilling.append(c)
            chunks.append((c, n))
            tokens += n
            longest = max(longest, n)
            attn += float(have + n) ** 2 - float(have) ** 2
        return tokens, attn, longest


class PaddedPrefill(VllmV0):
    name = "padded"

    def over_budget(self, tokens: int, longest: int, seqs: int, n: int, limit: int) -> bool:
        return (seqs + 1) * max(longest, n) > limit


class Sarathi:
    name = "sarathi"

    def __init__(self, *, chunk_size: int = 512) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.chunk_size = chunk_size

    def budget(self, inst: LLMCore) -> int:
        return min(self.chunk_size, inst.max_batch_tokens)

    def schedule(self, inst: LLMCore, now: float) -> float:
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
            done = c.have + c.filled
            attn += float(done + m) ** 2 - float(done) ** 2
            finishing += c.filled + m == c.eff
        tokens, attn, finishing = self._admit(inst, inst.waiting, budget, (tokens, attn, finishing), now)
        if inst.background and not inst.waiting and (chunks or not n):
            tokens, attn, finishing = self._admit(inst, inst.background, budget, (tokens, attn, finishing), now)
        if tokens == 0:
            return 0.0
        if tokens == n:
            return inst.decode_s(n, inst.ctx_sum)
        return inst.step.step_s(tokens - n, attn, n, float(inst.ctx_sum), prefill_seqs=finishing)

    @staticmethod
    def _admit(inst: LLMCore, queue: Any, budget: int, acc: tuple[int, float, int],
               now: float) -> tuple[int, float, int]:
        """Admit from the head of ``queue`` while budget, seats and blocks allow; ``acc`` =
        (tokens, attention work, prompts finishing) of the iteration so far."""
        chunks = inst.chunks
        tokens, attn, finishing = acc
        n = len(inst.running)
        while queue and tokens < budget and n + len(inst.prefilling) < inst.max_batch:
            c = queue[0]
            if inst.free - inst.new_blocks(c) < inst.watermark:
                break
            queue.popleft()
            inst.admit(c, now)
            inst.prefilling.append(c)
            m = min(c.eff, budget - tokens)
            chunks.append((c, m))
            tokens += m
            attn += float(c.have + m) ** 2 - float(c.have) ** 2
            finishing += m == c.eff
        return tokens, attn, finishing


def make_admission(config: Any) -> VllmV0 | PaddedPrefill | Sarathi:
    """The policy ``config.scheduler`` names (a ``profiler.engine.EngineConfig``)."""
    name = config.scheduler
    if name == "vllm":
        return VllmV0()
    if name == "padded":
        return PaddedPrefill()
    if name == "sarathi":
        return Sarathi(chunk_size=config.chunk_size)
    raise KeyError(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}")
