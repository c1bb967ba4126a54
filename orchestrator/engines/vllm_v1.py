"""``vllm-v1`` (:class:`VllmV1`): vLLM's V1 scheduler, the default admission policy of the engine core.

Modelled on ``Scheduler.schedule`` in ``vllm/v1/core/sched/scheduler.py`` of vLLM main at commit
00024d314514900f361ad072af6931e403b7f589 (the commit the core's plan interface cites; the V1
engine has been vLLM's only engine since 0.10, and the rules below are the ones that matter for
plain text generation without speculative decoding, LoRA, encoders or KV connectors). Its rules,
each one a test in ``tests/harness/test_vllm_v1_rules.py``:

1. No prefill phase: one token budget per step, ``max_num_batched_tokens``, shared by every
   request the step runs (``token_budget = self.max_num_scheduled_tokens``).
2. Running requests first, in the order they were admitted (``self.running``): a decoding one
   takes 1 token, one whose prompt is unfinished takes ``min(prompt left, budget left)`` (chunked
   prefill always), while budget is left.
3. ``long_prefill_token_threshold`` (when > 0) caps the tokens one request prefills per step,
   running or newly admitted.
4. Preemption by recomputation when KV blocks run out: a running request that cannot get its
   blocks preempts ``self.running.pop()``, the most recently admitted running request, until it
   fits or has preempted itself; a preempted request frees all its blocks, goes to the head of the
   waiting queue (``prepend_request``) and prefills its prompt and generated tokens again.
5. Waiting requests are admitted only in a step that preempted nothing (``if not
   preempted_reqs``), from the head of the queue (FCFS: the first that does not fit stops
   admission), while budget is left and fewer than ``max_num_seqs`` requests run (prefilling ones
   count), each with its first chunk of ``min(tokens to compute, threshold, budget left)``.
6. No watermark: the scheduler at that commit calls ``allocate_slots`` without one (the v0
   ``watermark`` setting does not apply to this policy).

What the core's plan interface makes approximate (documented in docs/harness.md, "vLLM V1"):
admission takes the blocks of the whole prompt at once (V1 allocates a chunk's blocks when the
chunk is scheduled), so under KV pressure a long chunked prompt is admitted a little later than V1
would, and a preempted partial prefill frees its whole prompt's blocks; and the decode batch
decodes as a whole before any prefill chunk, where V1 walks ``self.running`` in admission order.
The two orders agree whenever ``long_prefill_token_threshold`` is 0 (the default): a request with
an unfinished prompt has then taken the whole rest of a step's budget, so it is the last admitted
running request and nothing is admitted behind it until its prompt is done. That also makes
"newest partial prefill first, then the newest decoding request" exactly V1's victim order.

Background sequences (Teola's partial prefills, ``Seq.background``) are admitted as in every
policy of the core: after the regular queue is empty, into what is left of the budget of a step
that prefills anyway, or on an instance with nothing else to do.
"""
from __future__ import annotations

from collections.abc import Iterable

from orchestrator.engines.llm_plan import DECODE_ONLY, IDLE, CoreView, IterationPlan
from orchestrator.engines.llm_seq import Seq

Chunk = tuple[Seq, int]
NO_CAP = 1 << 62


class VllmV1:
    name = "vllm-v1"
    decodes_when_quiet = True     # Policy: nothing queued and blocks free -> DECODE_ONLY
    # Policy: after DECODE_ONLY, the same running requests take the same budget and the same queue
    # head finds no more free blocks or seats, so the answer repeats while the blocks are free
    decode_only_repeats = True

    def schedule(self, v: CoreView) -> IterationPlan:
        budget = v.max_batch_tokens
        threshold = v.config.long_prefill_token_threshold or NO_CAP
        free, decodes, prefilling = v.free, len(v.running), v.prefilling
        victims: list[Seq] = []
        if decodes:
            need = v.need_blocks()
            if free < need:
                prefilling, decodes, free = preempt_newest(v, need, victims)
            else:
                free -= need
        tokens = decodes                      # rule 2: a decoding request takes one token
        chunks: list[Chunk] = []
        for s in prefilling:                  # rule 2: then unfinished prompts, in admission order
            m = min(s.eff - s.filled, threshold, budget - tokens)
            if m <= 0:
                break
            chunks.append((s, m))
            tokens += m
        if not victims and tokens < budget and (v.waiting or v.background):     # rule 5
            seats = v.max_batch - decodes - len(prefilling)
            acc = self._admit(v, v.waiting, chunks, (tokens, free, seats), budget, threshold)
            if v.background and not acc[3] and (chunks or not decodes):
                self._admit(v, v.background, chunks, acc[:3], budget, threshold)
        if chunks:
            return IterationPlan(tuple(victims), decodes > 0, tuple(chunks))
        if victims:
            return IterationPlan(preempt=tuple(victims), decode=decodes > 0)
        return DECODE_ONLY if decodes else IDLE

    @staticmethod
    def _admit(v: CoreView, queue: Iterable[Seq], chunks: list[Chunk], acc: tuple[int, int, int], budget: int,
               threshold: int) -> tuple[int, int, int, bool]:
        """Rule 5: admit from the head of ``queue`` while budget, seats (``max_num_seqs``) and
        blocks allow; ``acc`` = (tokens, free blocks, free seats) so far. Returns them and whether
        a request was left waiting."""
        tokens, free, seats = acc
        for c in queue:
            if tokens >= budget or seats <= 0:
                return tokens, free, seats, True
            nb = v.new_blocks(c)
            if free < nb:
                return tokens, free, seats, True
            m = min(c.eff, threshold, budget - tokens)
            chunks.append((c, m))
            free, seats, tokens = free - nb, seats - 1, tokens + m
        return tokens, free, seats, False


def preempt_newest(v: CoreView, need: int, victims: list[Seq]) -> tuple[list[Seq], int, int]:
    """Rule 4 (also ``sarathi``'s): preempt the most recently admitted running request (an
    unfinished prompt, the newest, first; then the newest decoding one) until the decode batch's
    ``need`` new blocks fit; appends them to ``victims``. Returns the prefilling requests left,
    the number of decoding ones left and the blocks free once those have taken theirs."""
    free = v.free
    prefilling, decoding = list(v.prefilling), list(v.running.values())
    while free < need and decoding:
        if prefilling:
            s = prefilling.pop()
        else:
            s = decoding.pop()
            need -= v.needs_block(s)
        victims.append(s)
        free += v.held_blocks(s)
    return prefilling, len(decoding), free - need
