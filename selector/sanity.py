"""Unit sanity checks: numbers that are valid but almost certainly written in the wrong unit, or
not what the author meant (a latency SLO above an hour, an arrival rate above what the whole
cluster could serve: warnings, :func:`warn_unlikely`).

Accuracies are on the 0-100 scale of ``configs/accuracy`` (Open LLM Leaderboard v2 averages);
memory is in GB (1e9 bytes). A task file (resolved against the catalog, whose scale is known)
gets errors; a resolved problem (any scale is legal, spec section 1) gets warnings.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

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
    return out + task_warnings(problem)


def warn_problem(problem) -> None:
    """Log :func:`problem_warnings` (``warning: ...`` lines on standard error from the CLI)."""
    for w in problem_warnings(problem):
        log.warning(w)


#: a latency SLO above this many seconds is warned about (an SLO in ms or minutes, mistyped)
LONG_SLO_S = 3600.0


def cluster_max_rps(problem: Any) -> float:
    """An upper bound on the arrival rate the cluster could serve: per workflow, the least over its
    stages of the best (model, tp, pp) row's ``capacity_rps`` x the replicas its type's GPUs hold
    (``n_gpus // (tp * pp)``) / calls per request; the best workflow. Accuracy is not asked for."""
    n_gpus: dict[str, int] = defaultdict(int)
    for g in problem.cluster.gpus:
        n_gpus[g.type] += 1
    best: dict[tuple[str, str], float] = defaultdict(float)
    for r in problem.perf:
        best[(r.workflow, r.stage)] = max(best[(r.workflow, r.stage)],
                                          r.capacity_rps * (n_gpus[r.gpu_type] // (r.tp * r.pp)))
    rates = [min(best[(w.name, s.name)] / s.calls for s in w.stages) for w in problem.workflows if w.stages]
    return max(rates, default=0.0)


def task_warnings(problem: Any) -> list[str]:
    """A latency SLO above :data:`LONG_SLO_S`, an arrival rate above :func:`cluster_max_rps`."""
    t, out = problem.task, []
    if t.latency_slo_s > LONG_SLO_S:
        out.append(f"task.latency_slo_s {t.latency_slo_s:g} is above an hour ({LONG_SLO_S:g} s): it is in "
                   "seconds")
    cap = cluster_max_rps(problem)
    if problem.perf and t.arrival_rate_rps > cap:
        out.append(f"task.arrival_rate_rps {t.arrival_rate_rps:g} is above what the whole cluster could serve "
                   f"(at most {cap:.4g} requests/s with every GPU given to this task)")
    return out
