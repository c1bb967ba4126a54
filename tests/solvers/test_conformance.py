"""Every registered selector, tested without new test code (STYLE.md rule 11), in both sharing
modes of spec section 9 (section 9's worked examples: test_compute_examples.py)."""
from __future__ import annotations

import json

import pytest

from selector.problem import load_problem, parse_problem
from selector.verify import verify_plan
from solvers.registry import get_solver, names
from tests.brute import brute_force, plan_descr
from tests.randprob import random_problem, with_sharing
from tests.shared import spec_example, typed_stages

SELECTORS = names()
SEEDS = range(30)
SHARING = ["memory", "compute"]


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("elapsed_s", "variants_evaluated")}



@pytest.mark.parametrize("name", SELECTORS)
@pytest.mark.parametrize("example", ["small", "reuse-and-replicas", "infeasible"])
def test_spec_examples(name: str, example: str) -> None:
    solver = get_solver(name)
    plan = solver.select(load_problem(spec_example(example)), time_limit_s=30)
    expected = json.loads(spec_example(example, ".expected.json").read_text())
    assert plan.variant_space == expected["variant_space"]
    if expected["status"] == "infeasible":
        assert plan.status == "infeasible" and plan.reason
        return
    if not solver.exact and not plan.solved:   # a heuristic or fixed rule may miss; it must say why
        assert plan.status == "infeasible" and plan.reason
        return
    assert plan.solved and not verify_plan(load_problem(spec_example(example)), plan)
    if solver.exact:
        got = plan.to_dict()
        assert got["status"] == "optimal"
        assert got["workflow"] == expected["workflow"] and got["stages"] == typed_stages(expected["stages"])
        assert got["usd_per_hour"] is None
        for k in ("cost_gb_s", "latency_s", "new_mem_gb", "accuracy"):
            assert got[k] == pytest.approx(expected[k], rel=1e-6)
        assert got["new_gpus"] == expected["new_gpus"]
    else:
        assert plan.cost_gb_s >= expected["cost_gb_s"] * (1 - 1e-6)


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("name", SELECTORS)
def test_random_problems_against_brute_force(name: str, sharing: str) -> None:
    solver = get_solver(name)
    for seed in SEEDS:
        problem = with_sharing(random_problem(seed), sharing)
        plan = solver.select(problem, time_limit_s=30)
        ref = brute_force(problem)
        assert not verify_plan(problem, plan), (seed, verify_plan(problem, plan))
        if ref is None:
            assert plan.status == "infeasible" and plan.reason, seed
            continue
        if solver.exact:
            assert plan.status == "optimal", seed
            assert (plan.workflow, plan_descr(plan)) == (ref[0], ref[1]), seed
            assert plan.cost_gb_s == pytest.approx(ref[2], rel=1e-6)
        elif plan.solved:
            assert plan.cost_gb_s >= ref[2] * (1 - 1e-6) - 1e-9, seed


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("name", SELECTORS)
def test_deterministic(name: str, sharing: str) -> None:
    for seed in (1, 7, 11):
        problem = with_sharing(random_problem(seed), sharing)
        a = get_solver(name).select(problem, time_limit_s=30).to_dict()
        b = get_solver(name).select(problem, time_limit_s=30).to_dict()
        assert _strip(a) == _strip(b)


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("name", SELECTORS)
def test_impossible_slo_is_an_answer(name: str, sharing: str) -> None:
    data = with_sharing(random_problem(3), sharing).to_dict()
    data["task"]["accuracy_slo"] = 99.0
    plan = get_solver(name).select(parse_problem(data), time_limit_s=30)
    assert plan.status == "infeasible"
    d = plan.to_dict()
    assert {"status", "solver", "task", "reason", "variant_space", "elapsed_s"} <= set(d)
    if get_solver(name).exact:
        assert d["reason"].startswith("accuracy:")
