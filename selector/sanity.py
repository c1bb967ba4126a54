"""Unit sanity checks: numbers that are valid but almost certainly written in the wrong unit.

Accuracies are on the 0-100 scale of ``configs/accuracy`` (Open LLM Leaderboard v2 averages);
memory is in GB (1e9 bytes). A task file (resolved against the catalog, whose scale is known)
gets errors; a resolved problem (any scale is legal, spec section 1) gets warnings.
"""
from __future__ import annotations

import logging

from selector.errors import ProblemError

log = logging.getLogger(__name__)


def fraction_on_percent_scale(slo: float, accuracies: list[float]) -> bool:
    """An accuracy SLO strictly between 0 and 1 against accuracies that go above 1."""
    return 0 < slo < 1 and bool(accuracies) and max(accuracies) > 1


def check_task_accuracy(task_name: str, slo: float, accuracies: dict[str, float]) -> None:
    """ProblemError when a task's ``accuracy_slo`` looks like a fraction on the catalog's 0-100
    scale (0.25 admits every model; 25 was meant)."""
    values = list(accuracies.values())
    if fraction_on_percent_scale(slo, values):
        raise ProblemError(f"task {task_name}: accuracy_slo",
                           f"{slo:g} looks like a fraction, but accuracies are on a 0-100 scale (the catalog's: "
                           f"{min(values):.1f}-{max(values):.1f}); write {slo * 100:g} for {slo * 100:g}%, "
                           "or 0 for no accuracy floor")


def _largest_gpu() -> tuple[str, float] | None:
    try:
        from profiler.catalog import CatalogError, load_gpus
        gpus = load_gpus()
    except (CatalogError, OSError):
        return None
    if not gpus:
        return None
    g = max(gpus.values(), key=lambda g: g.mem_gb)
    return g.name, g.mem_gb


def problem_warnings(problem) -> list[str]:
    """Warnings for a resolved :class:`~selector.problem.Problem` (empty when all looks right)."""
    out = []
    acc = [m.accuracy for m in problem.models]
    if fraction_on_percent_scale(problem.task.accuracy_slo, acc):
        out.append(f"task.accuracy_slo {problem.task.accuracy_slo:g} is below 1 while model accuracies go up to "
                   f"{max(acc):g}: on a 0-100 scale it admits every model (did you mean "
                   f"{problem.task.accuracy_slo * 100:g}?)")
    big = _largest_gpu()
    if big is not None:
        name, cap = big
        for i, g in enumerate(problem.cluster.gpus):
            if g.mem_gb > 2 * cap:
                out.append(f"cluster.gpus[{i}].mem_gb {g.mem_gb:g} GB is beyond any catalog GPU (largest: {name}, "
                           f"{cap:g} GB): memory is in GB (1e9 bytes), not MB")
                break
        for i, d in enumerate(problem.deployments):
            if d.mem_gb / (d.tp * d.pp) > 2 * cap:
                out.append(f"deployments[{i}].mem_gb {d.mem_gb:g} GB over {d.tp * d.pp} GPU(s) is beyond any "
                           f"catalog GPU (largest: {name}, {cap:g} GB): memory is in GB, all GPUs together")
                break
    return out


def warn_problem(problem) -> None:
    """Log :func:`problem_warnings` (``warning: ...`` lines on standard error from the CLI)."""
    for w in problem_warnings(problem):
        log.warning(w)
