"""The registry fails loudly; exhaustive honours its time limit on spaces too big to finish."""
from __future__ import annotations

import time

import pytest

from selector.problem import parse_problem
from solvers import registry
from solvers.exhaustive import ExhaustiveSelector


def test_unknown_name_lists_known() -> None:
    with pytest.raises(KeyError, match="unknown solver 'mlip'; known: exhaustive, flowmaker"):
        registry.get_solver("mlip")


def test_duplicate_name_raises() -> None:
    with pytest.raises(ValueError, match="duplicate solver name 'x'"):
        registry._build([("x", "a:B"), ("x", "c:D")])


def test_every_entry_imports_and_names_itself() -> None:
    for name in registry.names():
        assert registry.get_solver(name).name == name


def _huge(stages: int = 6, models: int = 12) -> dict:
    cfgs = [{"tp": 1, "pp": 1}, {"tp": 2, "pp": 1}]
    ms = [{"name": f"m{i}", "accuracy": 20 + i, "active_params_b": 1 + i} for i in range(models)]
    wf = {"name": "w", "stages": [{"name": f"s{k}"} for k in range(stages)]}
    return {
        "task": {"name": "huge", "accuracy_slo": 0, "latency_slo_s": 1e6, "arrival_rate_rps": 1},
        "models": ms, "configs": cfgs, "workflows": [wf],
        "deployments": [{"model": m["name"], **c, "mem_gb": 1.0 + i} for i, m in enumerate(ms) for c in cfgs],
        "perf": [{"workflow": "w", "stage": f"s{k}", "model": m["name"], **c, "latency_s": 1.0 + k + i / 10,
                  "capacity_rps": 5.0} for k in range(stages) for i, m in enumerate(ms) for c in cfgs],
        "cluster": {"gpus": [{"id": g, "mem_gb": 80.0, "used_gb": 0.0} for g in range(8)]},
    }


def test_exhaustive_stops_at_time_limit_with_best_so_far() -> None:
    problem = parse_problem(_huge())          # 24^6 = 191 million variants
    t0 = time.perf_counter()
    plan = ExhaustiveSelector(chunk=1 << 14).select(problem, time_limit_s=0.3)
    assert time.perf_counter() - t0 < 5.0
    assert plan.variant_space == 24 ** 6 and plan.variants_evaluated < plan.variant_space
    assert plan.status == "feasible" and plan.cost_gb_s is not None
