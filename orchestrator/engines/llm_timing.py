"""How long one iteration of the LLM core (``orchestrator.engines.llm_core``) takes: the step
time model it is given (:class:`StepTime`) and how instances sharing a GPU slow each other
(:class:`GpuSlot`, :class:`Colocation`), or engines of every kind sharing a few CPU cores
(:class:`SharedCores`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class StepTime(Protocol):
    """Duration (s) of one iteration: ``prefill_tokens`` new prompt tokens whose attention work is
    ``prefill_attn_tokens2`` (sum of ``(cached + n)^2 - cached^2``) over ``prefill_seqs``
    sequences, plus one decode token for each of ``decode_batch`` sequences reading
    ``decode_context_tokens`` tokens in total. The profiler's ``StepModel`` is one."""

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float: ...


class GpuUser(Protocol):
    """An engine core with a shard on a GPU (``GpuSlot.cores``)."""

    def share_gpu(self) -> None:
        """Another core took a shard on one of its GPUs."""


class GpuSlot:
    """One physical GPU; ``busy`` counts instances with a shard on it that are mid-iteration,
    ``busy_s`` adds up the simulated time during which ``busy > 0``, up to ``until_s`` (the
    engine core keeps both as its iterations start and end; ``since``: when ``busy`` last left 0,
    capped at ``until_s``); ``cores``: the engine cores with a shard on it (each adds itself)."""

    __slots__ = ("id", "busy", "until_s", "since", "busy_s", "cores")

    def __init__(self, id: int, *, until_s: float = float("inf")) -> None:
        self.id, self.until_s = id, until_s
        self.busy = 0
        self.since = self.busy_s = 0.0
        self.cores: list[GpuUser] = []


class Colocation:
    """Processor sharing: an iteration that starts while ``k`` instances (itself included)
    are busy on one of its GPUs takes ``k`` times as long (the slowest shard bounds it).

    Approximation: the factor is fixed when the iteration starts, so an instance that
    starts first is slowed from its next iteration on (iterations last milliseconds). An
    instance alone on its GPUs (every ``busy`` 1) runs at full speed: the core does not ask
    unless ``slows_alone``."""

    #: whether an execution alone on its slots is slowed too (a core asks for its factor then)
    slows_alone = False

    def factor(self, gpus: Sequence[GpuSlot]) -> float:
        if len(gpus) == 1:
            return float(gpus[0].busy)
        return float(max(g.busy for g in gpus))


class SharedCores(Colocation):
    """Processor sharing on ``cores`` CPU cores, one :class:`GpuSlot` standing for them all: an
    execution (an LLM iteration, a non-LLM engine's batch) that starts while ``k`` executions (itself
    included) run on them, beside ``background`` runnable tasks of other programs, takes
    ``max(1, (k + background) / cores)`` times as long.

    Approximation (:class:`Colocation`'s): the factor is fixed when the execution starts; one that
    starts first is not slowed by those that start after it, and is not sped up when others end."""

    def __init__(self, cores: int, background: float = 0.0) -> None:
        if cores < 1:
            raise ValueError(f"cores: {cores} (at least 1)")
        if background < 0:
            raise ValueError(f"background: {background} (at least 0)")
        self.cores, self.background = cores, background
        self.slows_alone = background + 1 > cores

    def factor(self, gpus: Sequence[GpuSlot]) -> float:
        return max(1.0, (max(g.busy for g in gpus) + self.background) / self.cores)
