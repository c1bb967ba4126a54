"""The LLM core's policy interface (``orchestrator.engines.llm_core``; its policies:
``orchestrator.engines.admission``): what a policy sees of a core (:class:`CoreView`, read-only),
what it decides (:class:`IterationPlan`, immutable) and the interface itself (:class:`Policy`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from orchestrator.engines.llm_seq import Seq
from profiler.engine import EngineConfig


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
    def block_size(self) -> int: ...
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
