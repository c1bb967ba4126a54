"""Property tests, in both sharing modes of spec section 9 and, on typed problems (section 10),
both objectives: exhaustive equals an independent brute force; flowmaker and flowmaker-plus are
never cheaper than the optimum and always feasible when they answer."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.verify import verify_plan
from solvers.registry import get_solver
from tests.brute import brute_force, plan_descr
from tests.randprob import random_problem, random_typed_problem, with_sharing

SHARING = st.sampled_from(["memory", "compute"])


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), sharing=SHARING)
def test_exhaustive_equals_brute_force(seed: int, sharing: str) -> None:
    problem = with_sharing(random_problem(seed), sharing)
    plan = get_solver("exhaustive").select(problem)
    ref = brute_force(problem)
    if ref is None:
        assert plan.status == "infeasible"
        return
    assert plan.status == "optimal"
    assert plan.workflow == ref[0]
    assert plan_descr(plan) == ref[1]
    assert plan.cost_gb_s == pytest.approx(ref[2], rel=1e-6)
    assert plan.latency_s == pytest.approx(ref[3], rel=1e-6)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), sharing=SHARING,
       heuristic=st.sampled_from(["flowmaker", "flowmaker-plus"]))
def test_heuristics_never_beat_optimum(seed: int, sharing: str, heuristic: str) -> None:
    problem = with_sharing(random_problem(seed), sharing)
    plan = get_solver(heuristic).select(problem)
    ref = brute_force(problem)
    if plan.solved:
        assert not verify_plan(problem, plan)
        assert ref is not None and plan.cost_gb_s >= ref[2] * (1 - 1e-6) - 1e-9
    if ref is None:
        assert plan.status == "infeasible"


OBJECTIVE = st.sampled_from(["gb_s", "usd_per_hour"])


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), sharing=SHARING, objective=OBJECTIVE)
def test_exhaustive_equals_brute_force_on_typed_problems(seed: int, sharing: str, objective: str) -> None:
    problem = with_sharing(random_typed_problem(seed, objective), sharing)
    plan = get_solver("exhaustive").select(problem)
    ref = brute_force(problem)
    if ref is None:
        assert plan.status == "infeasible"
        return
    assert plan.status == "optimal" and (plan.workflow, plan_descr(plan)) == (ref[0], ref[1])
    assert plan.value(objective) == pytest.approx(ref[2], rel=1e-6)
    assert plan.latency_s == pytest.approx(ref[3], rel=1e-6)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), sharing=SHARING, objective=OBJECTIVE,
       heuristic=st.sampled_from(["flowmaker", "flowmaker-plus"]))
def test_heuristics_never_beat_optimum_on_typed_problems(seed: int, sharing: str, objective: str,
                                                          heuristic: str) -> None:
    problem = with_sharing(random_typed_problem(seed, objective), sharing)
    plan = get_solver(heuristic).select(problem)
    ref = brute_force(problem)
    if plan.solved:
        assert not verify_plan(problem, plan)
        assert ref is not None and plan.value(objective) >= ref[2] * (1 - 1e-6) - 1e-9
    if ref is None:
        assert plan.status == "infeasible"


@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_chunked_enumeration_matches_single_chunk(sharing: str) -> None:
    for seed in range(20):
        problem = with_sharing(random_problem(seed, max_models=3, max_stages=3), sharing)
        whole = get_solver("exhaustive").select(problem).to_dict()
        from solvers.exhaustive import ExhaustiveSelector
        small = ExhaustiveSelector(chunk=3).select(problem).to_dict()
        for d in (whole, small):
            d.pop("elapsed_s")
        assert whole == small, seed
