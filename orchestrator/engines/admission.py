"""Admission policies of the engine core: which sequences run in an instance's next iteration.

``vllm-v1`` (:class:`~orchestrator.engines.vllm_v1.VllmV1`, the default): vLLM's V1 scheduler
(its own module). The three below are the older ones, selectable by name.

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

Each policy reads the core through a read-only :class:`~orchestrator.engines.llm_plan.CoreView`
and returns an immutable :class:`~orchestrator.engines.llm_plan.IterationPlan` (which sequences
are preempted, whether the decode batch decodes, which sequences prefill how many tokens); the
core applies it and times it, as vLLM v1's ``Scheduler.schedule`` returns a ``SchedulerOutput``
that the model runner executes (``vllm/v1/core/sched/scheduler.py`` and ``output.py``, vLLM
main at commits 00024d3 and 00e8f1f). A policy that preempts works out what the preemption
frees and where the victims go (the head of the waiting queue) before it admits, as the plan is
applied in that order. A policy may keep private state between iterations (``VllmV0`` remembers
the queue head and free blocks of its last failed admission); one policy object serves one core.

Background sequences (``Seq.background``, queued in ``LLMCore.background``: Teola's partial
prefills) never go ahead of a queued regular one: every policy admits them only after the
regular queue is empty, into what is left of a prefill pass (or, for ``sarathi``, of an
iteration's token budget) that runs anyway, or on an instance with nothing else to do. Without
background sequences every policy behaves exactly as described above.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain

from orchestrator.engines.llm_plan import DECODE_ONLY, IDLE, CoreView, IterationPlan, Policy
from orchestrator.engines.llm_seq import WAITING, Seq
from orchestrator.engines.vllm_v1 import VllmV1, preempt_newest
from profiler.engine import SCHEDULERS, EngineConfig

Chunk = tuple[Seq, int]


def _prefill_cost(v: CoreView, s: Seq) -> tuple[int, int]:
    """(tokens to prefill, new blocks) of admitting ``s``: a waiting sequence, or one this plan
    preempts (not applied yet: still admitted), which prefills its whole context again."""
    if s.state == WAITING:
        return s.eff, v.new_blocks(s)
    n = v.recompute_tokens(s)
    return n, v.blocks(n)


class VllmV0:
    name = "vllm"
    decodes_when_quiet = True     # Policy: nothing queued and blocks free -> DECODE_ONLY
    # Policy: after DECODE_ONLY, with the same queue head and no more free blocks admission is
    # not retried (``_head``, ``_free``), so the answer stays DECODE_ONLY while the batch's blocks are free
    decode_only_repeats = True
    #: the pass's prompt budget: its tokens (vLLM) or, padded, its length x its longest prompt
    padded = False

    def __init__(self) -> None:
        # the queue head and free blocks when admission last failed
        self._head: Seq | None = None
        self._free = -1

    def schedule(self, v: CoreView) -> IterationPlan:
        free, running, waiting = v.free, len(v.running), v.waiting
        if waiting:
            head = waiting[0]
            # admission is retried only when the queue head or the free blocks changed
            if head is not self._head or free > self._free or not running:
                # a pass admits nothing when the head has no seat or blocks (what _admit finds first)
                if (running < v.max_batch                # v.new_blocks(head), inlined: most iterations
                        and free - (-(-(head.have + head.eff) // v.block_size) - head.held) >= v.watermark):
                    chunks = self._prefill(v, (), free, running)
                    if chunks:
                        return IterationPlan((), False, chunks)
                self._head, self._free = head, free
        elif v.background and not running:   # idle: background may run
            chunks = self._prefill(v, (), free, running)
            if chunks:
                return IterationPlan((), False, chunks)
        if not running:
            return IDLE
        need = v.need_blocks()
        if free >= need:
            return DECODE_ONLY
        victims: list[Seq] = []
        for s in reversed(v.running.values()):        # the most recently admitted first
            victims.append(s)
            free += v.held_blocks(s)
            need -= v.needs_block(s)
            if free >= need:
                break
        if len(victims) < running:
            return IterationPlan(preempt=tuple(victims), decode=True)
        # preemption emptied the decode batch: a second pass over the queue, victims at its head
        chunks = self._prefill(v, victims, free, 0)
        if not chunks:
            self._head, self._free = victims[-1], free
        return IterationPlan(preempt=tuple(victims), chunks=chunks)

    def _prefill(self, v: CoreView, requeued: Sequence[Seq], free: int, running: int) -> tuple[Chunk, ...]:
        """A prefill pass over the queue (``requeued`` at its head): ``free`` blocks, ``running``
        decoding sequences."""
        chunks: list[Chunk] = []
        acc = self._admit(v, requeued, v.waiting, chunks, (0, 0, free), running)
        if v.background and len(chunks) == len(requeued) + len(v.waiting) and (chunks or not running):
            self._admit(v, (), v.background, chunks, acc, running)
        return tuple(chunks)

    def _admit(self, v: CoreView, requeued: Sequence[Seq], queue: Iterable[Seq], chunks: list[Chunk],
               acc: tuple[int, int, int], running: int) -> tuple[int, int, int]:
        """Admit from the head of ``queue`` into this pass; ``requeued``: sequences this plan
        preempts (still admitted until it is applied), which go to the queue's head in reverse
        order and prefill their whole context again; ``acc`` = (tokens, longest prompt, free
        blocks) of the pass so far. A prompt that would overflow the pass's budget (``padded``)
        or seats, or leave fewer free blocks than the watermark, ends it."""
        tokens, longest, free = acc
        seats = v.max_batch - running
        limit, watermark, padded, bs = v.max_batch_tokens, v.watermark, self.padded, v.block_size
        k = len(chunks)
        for c in chain(reversed(requeued), queue) if requeued else queue:
            if k >= seats:
                break
            waiting = c.state == WAITING    # else preempted by this plan: its whole context again
            n = c.eff if waiting else v.recompute_tokens(c)
            if k and ((k + 1) * (n if n > longest else longest) > limit if padded else tokens + n > limit):
                break
            # new_blocks(c) or blocks(n), inlined (after the budget: it often ends the pass)
            nb = -(-(c.have + n) // bs) - c.held if waiting else -(-n // bs)
            if free - nb < watermark:
                break
            free -= nb
            chunks.append((c, n))
            k += 1
            tokens += n
            if n > longest:
                longest = n
        return tokens, longest, free


class PaddedPrefill(VllmV0):
    name = "padded"
    padded = True


class Sarathi:
    name = "sarathi"
    decodes_when_quiet = True     # Policy: nothing queued and blocks free -> DECODE_ONLY
    # Policy: after DECODE_ONLY (nothing prefilling), admission of the same queue head with the same
    # seats and no more free blocks fails again, so the answer repeats while the blocks are free
    decode_only_repeats = True

    def __init__(self, *, chunk_size: int = 512) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.chunk_size = chunk_size

    def budget(self, v: CoreView) -> int:
        return min(self.chunk_size, v.max_batch_tokens)

    def schedule(self, v: CoreView) -> IterationPlan:
        budget = min(self.chunk_size, v.max_batch_tokens)     # self.budget(v)
        free, n, prefilling = v.free, len(v.running), v.prefilling
        victims: list[Seq] = []
        if n:
            need = v.need_blocks()
            if free < need:     # the newest partial prefill goes first, then the newest decode
                prefilling, n, free = preempt_newest(v, need, victims)
            else:
                free -= need
        chunks: list[Chunk] = []
        tokens = n
        for c in prefilling:
            if tokens >= budget:
                break
            m = min(c.eff - c.filled, budget - tokens)
            chunks.append((c, m))
            tokens += m
        if (victims or v.waiting or v.background) and tokens < budget:
            seats = v.max_batch - n - len(prefilling)
            pre = len(chunks)
            acc = self._admit(v, victims, v.waiting, chunks, budget, (tokens, free, seats))
            if v.background and len(chunks) - pre == len(victims) + len(v.waiting) and (chunks or not n):
                self._admit(v, (), v.background, chunks, budget, acc)
        if chunks:
            return IterationPlan(tuple(victims) if victims else (), n > 0, tuple(chunks))
        if victims:
            return IterationPlan(preempt=tuple(victims), decode=n > 0)
        return DECODE_ONLY if n else IDLE

    @staticmethod
    def _admit(v: CoreView, requeued: Sequence[Seq], queue: Iterable[Seq], chunks: list[Chunk], budget: int,
               acc: tuple[int, int, int]) -> tuple[int, int, int]:
        """Admit from the head of ``queue`` (``requeued`` at its head) while budget, seats and
        blocks allow; ``acc`` = (tokens, free blocks, free seats) of the iteration so far."""
        tokens, free, seats = acc
        watermark = v.watermark
        for c in chain(reversed(requeued), queue) if requeued else queue:
            if tokens >= budget or seats <= 0:
                break
            eff, nb = _prefill_cost(v, c)
            if free - nb < watermark:
                break
            free -= nb
            seats -= 1
            m = min(eff, budget - tokens)
            chunks.append((c, m))
            tokens += m
        return tokens, free, seats


def make_admission(config: EngineConfig) -> Policy:
    """The policy ``config.scheduler`` names (one object per core)."""
    name = config.scheduler
    if name == "vllm-v1":
        return VllmV1()
    if name == "vllm":
        return VllmV0()
    if name == "padded":
        return PaddedPrefill()
    if name == "sarathi":
        return Sarathi(chunk_size=config.chunk_size)
    raise KeyError(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}")
