"""How long one iteration of the LLM core (``orchestrator.engines.llm_core``) takes: the step
time model it is given (:class:`StepTime`) and how instances sharing a GPU slow each other
(:class:`GpuSlot`, :class:`Colocation`). Engines sharing a few CPU cores: ``cpu_sharing``."""
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
    instance alone on its GPUs (every ``busy`` 1) runs at full speed: the core does not ask."""

    def factor(self, gpus: Sequence[GpuSlot]) -> float:
        if len(gpus) == 1:
            return float(gpus[0].busy)
        return float(max(g.busy for g in gpus))
