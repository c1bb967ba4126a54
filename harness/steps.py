"""Thin adapter to the profiler's analytic step-time model (``profiler.analytic``).

Everything the harness needs from the profiler goes through here: the step model of a
(model, GPU, tp, pp) and the KV-cache capacity of an instance.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any


class UnknownName(KeyError):
    """An unknown model or GPU name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, Any], dict[str, Any], Any]:
    from profiler.analytic import AnalyticModel
    from profiler.catalog import load_gpus, load_models
    return load_models(), load_gpus(), AnalyticModel()


def model_names() -> list[str]:
    return sorted(_catalog()[0])


def gpu_spec(name: str) -> Any:
    gpus = _catalog()[1]
    if name not in gpus:
        raise UnknownName(f"unknown GPU '{name}'; known: {', '.join(sorted(gpus))}")
    return gpus[name]


def step_model(model: str, gpu: str, tp: int, pp: int) -> Any:
    """The profiler's cached ``StepModel``; ``UnknownName`` for an unknown model or GPU,
    ``ValueError`` when the model cannot be sharded that way."""
    models, _, am = _catalog()
    if model not in models:
        raise UnknownName(f"unknown model '{model}'; known: {', '.join(sorted(models))}")
    return am.step_model(models[model], gpu_spec(gpu), tp, pp)


def kv_capacity_tokens(sm: Any, *, mem_gb: float, max_batch_tokens: int, max_batch: int) -> int:
    """KV-cache tokens an instance holds: ``(mem_gb - weights - activations) / kv per token``.

    ``mem_gb`` is the memory the instance may use on all its GPUs together (GB); activations
    are the profiler's workspace for ``max_batch_tokens`` batched tokens and ``max_batch``
    logit rows plus its fixed runtime overhead per GPU. Returns 0 when nothing is left.
    """
    free = mem_gb - sm.weights_gb - sm.activation_gb(max_batch_tokens, max_batch)
    return max(0, int(free / sm.kv_gb_per_token))
