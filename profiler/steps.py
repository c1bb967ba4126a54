"""The one adapter from names to the profiler's step-time model, cached.

Everything that times an instance by catalog names (the resolver, the cluster and what-if
simulators, the orchestrator's simulated LLM engines) gets its ``StepModel`` from
:func:`step_model`: the catalog files are read once and each (model, GPU, tp, pp) is built once
per process.
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


def analytic_model() -> Any:
    """The process-wide :class:`~profiler.analytic.AnalyticModel` (default calibration)."""
    return _catalog()[2]


def model_spec(name: str) -> Any:
    models = _catalog()[0]
    if name not in models:
        raise UnknownName(f"unknown model '{name}'; known: {', '.join(sorted(models))}")
    return models[name]


def gpu_spec(name: str) -> Any:
    gpus = _catalog()[1]
    if name not in gpus:
        raise UnknownName(f"unknown GPU '{name}'; known: {', '.join(sorted(gpus))}")
    return gpus[name]


def step_model(model: str, gpu: str, tp: int = 1, pp: int = 1) -> Any:
    """The cached ``StepModel`` of ``model`` on ``tp x pp`` ``gpu`` s; :class:`UnknownName` for
    an unknown model or GPU, ``ValueError`` when the model cannot be sharded that way."""
    return analytic_model().step_model(model_spec(model), gpu_spec(gpu), tp, pp)
