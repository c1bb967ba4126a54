"""Conformance and property tests of the joint selectors (spec section 11), in both sharing modes
and both objectives: every registered joint selector answers with a choice that section 8's
semantics re-evaluates as reported; the exact ones equal the independent brute force
(tests/joint_brute.py); the greedy is never better than the optimum."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.joint_eval import choice_from_plan, run_choice
from solvers.joint_registry import get_joint_solver, names
from tests.joint_brute import joint_brute_force
from tests.randjoint import random_task_set

MODES = [(s, o) for s in ("memory", "compute") for o in ("gb_s", "usd_per_hour")]
EXACT = [n for n in names() if get_joint_solver(n).exact]


def descriptor(plan: dict) -> tuple:
    """Per task None (skipped) or (workflow, ((kind, instance id or (tp, pp), model) per stage))."""
    return tuple(None if p["status"] == "skipped" else
                 (p["workflow"], tuple(("reuse", s["reuse"], s["model"]) if s["reuse"] else
                                       ("new", (s["tp"], s["pp"]), s["model"]) for s in p["stages"]))
                 for p in plan["plans"])


def check_consistent(ts, plan) -> None:
    """The answer's numbers and final cluster are those of its own choice re-evaluated."""
    run = run_choice(ts, choice_from_plan(ts, plan))
    assert run.feasible
    assert run.served == plan.served
    assert run.total_cost == pytest.approx(plan.total_cost, rel=1e-9, abs=1e-9)
    assert run.cluster == plan.cluster
    for p in plan.plans:
        assert (p.status == "skipped") == (p.reason is not None)
        if p.solved:
            assert p.status == plan.status


@pytest.mark.parametrize("solver", names())
@pytest.mark.parametrize("sharing,objective", MODES)
def test_every_joint_solver_answers_consistently(solver: str, sharing: str, objective: str) -> None:
    for seed in range(6):
        ts = random_task_set(seed, sharing=sharing, objective=objective)
        plan = get_joint_solver(solver).select(ts, time_limit_s=30)
        check_consistent(ts, plan)
        assert plan.objective == objective and len(plan.plans) == len(ts.tasks)
        assert [p.task for p in plan.plans] == list(ts.names)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), mode=st.sampled_from(MODES), solver=st.sampled_from(EXACT))
def test_exact_joint_solvers_equal_brute_force(seed: int, mode: tuple[str, str], solver: str) -> None:
    ts = random_task_set(seed, sharing=mode[0], objective=mode[1])
    served, cost, latency, descr = joint_brute_force(ts)
    plan = get_joint_solver(solver).select(ts, time_limit_s=60)
    assert plan.status == "optimal"
    assert plan.served == served
    assert plan.total_cost == pytest.approx(cost, rel=1e-6, abs=1e-9)
    assert plan.total_latency_s == pytest.approx(latency, rel=1e-6, abs=1e-9)
    assert descriptor(plan.to_dict()) == descr


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), mode=st.sampled_from(MODES))
def test_greedy_never_beats_the_joint_optimum(seed: int, mode: tuple[str, str]) -> None:
    ts = random_task_set(seed, sharing=mode[0], objective=mode[1])
    greedy = get_joint_solver("sequential").select(ts)
    best = get_joint_solver("exhaustive").select(ts)
    assert greedy.served <= best.served
    if greedy.served == best.served:
        assert greedy.total_cost >= best.total_cost * (1 - 1e-9) - 1e-9


def test_skipped_task_reasons() -> None:
    """A skipped task names section 6's reason against the cluster it saw, or ``not chosen``."""
    from selector.joint import parse_task_set
    from tests.solvers.test_joint_examples import EXAMPLES
    from selector.yamlio import load_mapping
    data = load_mapping(EXAMPLES / "joint-greedy-skips.yaml")
    data["tasks"][1]["task"]["accuracy_slo"] = 99.0          # b can never be served
    plan = get_joint_solver("milp").select(parse_task_set(data))
    assert plan.status == "optimal" and plan.served == 1
    assert plan.plans[1].status == "skipped" and plan.plans[1].reason.startswith("accuracy")
    # serving `z` (two 30 GB shards) leaves 18 GB per GPU, too little for `b` and `c` (30 GB each):
    # the optimum skips `z`, which alone would be feasible: "not chosen"
    gpus = [{"id": g, "mem_gb": 48.0, "used_gb": 0.0} for g in (0, 1)]
    ts = parse_task_set({"cluster": {"gpus": gpus}, "tasks": [one_stage("z", 2, 60.0), one_stage("b", 1, 30.0),
                                                               one_stage("c", 1, 30.0)]})
    plan = get_joint_solver("exhaustive").select(ts)
    assert plan.served == 2 and plan.plans[0].reason == "not chosen"
    assert get_joint_solver("sequential").select(ts).served == 1


def one_stage(name: str, tp: int, mem_gb: float) -> dict:
    """A one-stage task of its own model ``name-m`` on ``tp`` GPUs, 1 req/s against 2 per instance."""
    m = f"{name}-m"
    return {"task": {"name": name, "accuracy_slo": 10.0, "latency_slo_s": 5.0, "arrival_rate_rps": 1.0},
            "models": [{"name": m, "accuracy": 20.0, "active_params_b": 7.0}], "configs": [{"tp": tp, "pp": 1}],
            "workflows": [{"name": "direct", "stages": [{"name": "gen"}]}],
            "deployments": [{"model": m, "tp": tp, "pp": 1, "mem_gb": mem_gb}],
            "perf": [{"workflow": "direct", "stage": "gen", "model": m, "tp": tp, "pp": 1, "latency_s": 1.0,
                      "capacity_rps": 2.0}]}


def test_all_skipped_is_optimal_only_when_proved() -> None:
    from selector.joint import parse_task_set
    from selector.yamlio import load_mapping
    from tests.solvers.test_joint_examples import EXAMPLES
    data = load_mapping(EXAMPLES / "joint-greedy-skips.yaml")
    for t in data["tasks"]:
        t["task"]["accuracy_slo"] = 99.0
    ts = parse_task_set(data)
    for solver in names():
        plan = get_joint_solver(solver).select(ts)
        assert plan.served == 0 and plan.status == "optimal", solver
    greedy = get_joint_solver("sequential", selector="flowmaker").select(ts)
    assert greedy.status == "unknown"                       # a heuristic proves nothing


def test_time_limit_is_checked() -> None:
    ts = random_task_set(1)
    for solver in names():
        with pytest.raises(ValueError):
            get_joint_solver(solver).select(ts, time_limit_s=float("nan"))


def test_registry_fails_loudly() -> None:
    with pytest.raises(KeyError, match="known: sequential, exhaustive, milp, local"):
        get_joint_solver("mlip")


@pytest.mark.parametrize("mode", MODES)
@given(seed=st.integers(0, 10_000))
@settings(max_examples=8, deadline=None)
def test_task_cost_bounds_hold_at_the_optimum(seed: int, mode: tuple[str, str]) -> None:
    """The milp's gap bound (solvers/_joint_bound.py): each served task of the joint optimum
    costs at least its task bound, and the total at least the sum of the smallest bounds."""
    from solvers._joint_bound import served_bound
    from solvers._joint_data import prepare_joint
    from solvers._joint_model import JointModel
    ts = random_task_set(seed, sharing=mode[0], objective=mode[1])
    best = get_joint_solver("exhaustive").select(ts)          # equal to the brute force (tests above)
    lb = JointModel(prepare_joint(ts), workers=1, seed=0).task_lb
    for k, plan in enumerate(best.plans):
        if plan.solved:
            cost = plan.cost_gb_s if mode[1] == "gb_s" else plan.usd_per_hour
            assert cost >= lb[k] - 1e-9 * max(1.0, cost), (k, cost, lb[k])
    assert best.total_cost >= served_bound(lb, best.served) - 1e-9 * max(1.0, best.total_cost)


@pytest.mark.parametrize("mode", MODES)
@given(seed=st.integers(0, 10_000))
@settings(max_examples=6, deadline=None)
def test_local_search_lies_between_greedy_and_optimum(seed: int, mode: tuple[str, str]) -> None:
    """``local`` (a heuristic from the greedy answer): never worse than ``sequential``, never better
    than the exact optimum, and never claims a proof while it serves a task."""
    ts = random_task_set(seed, sharing=mode[0], objective=mode[1])
    local = get_joint_solver("local").select(ts)
    greedy = get_joint_solver("sequential").select(ts)
    best = get_joint_solver("exhaustive").select(ts)
    tol = 1e-9 * max(1.0, greedy.total_cost)
    assert (local.served, -local.total_cost) >= (greedy.served, -greedy.total_cost - tol)
    assert (local.served, -local.total_cost) <= (best.served, -best.total_cost + tol)
    assert local.status == ("feasible" if local.served else local.status)


@pytest.mark.parametrize("case", ["joint-greedy-skips", "joint-same-tasks-for-less"])
def test_local_search_finds_the_worked_examples_optimum(case: str) -> None:
    """Both worked examples are one move from the greedy answer: ``local`` makes it."""
    from selector.joint import load_task_set
    from tests.solvers.test_joint_examples import EXAMPLES
    ts = load_task_set(EXAMPLES / f"{case}.yaml")
    local = get_joint_solver("local").select(ts)
    best = get_joint_solver("exhaustive").select(ts)
    assert local.status == "feasible" and local.extra["moves"] >= 1
    assert local.served == best.served and abs(local.total_cost - best.total_cost) <= 1e-9 * max(1.0, best.total_cost)


@pytest.mark.parametrize("mode", MODES)
def test_milp_answer_does_not_depend_on_its_quick_start(mode: tuple[str, str]) -> None:
    """The restricted first solve (solvers/_joint_quick.py) is a heuristic: with or without it the
    milp returns the same proved answer (the same choice, so the same plans and cluster)."""
    from solvers.joint_milp import MilpJoint
    for seed in range(6):
        ts = random_task_set(seed, sharing=mode[0], objective=mode[1], max_tasks=4)
        a = MilpJoint(quick=True).select(ts, time_limit_s=60)
        b = MilpJoint(quick=False).select(ts, time_limit_s=60)
        assert a.status == b.status == "optimal"
        assert choice_from_plan(ts, a) == choice_from_plan(ts, b)


def test_run_choice_memo_changes_nothing() -> None:
    """``run_choice`` with a shared memo of prefixes returns the same runs as without, including
    runs that fail part-way (their prefixes are shared with feasible ones)."""
    import itertools
    from solvers.joint_exhaustive import feasible_variants
    from selector.joint_eval import choice_of
    from selector.index import compile_problem
    for seed in range(4):
        ts = random_task_set(seed, max_tasks=3)
        per_task = []
        for k in range(len(ts.tasks)):          # a few variants per task on the input cluster, and skip
            cp = compile_problem(ts.on(k, ts.cluster))
            per_task.append([choice_of(cp, ev) for ev in feasible_variants(cp, ts.objective)[:3]] + [None])
        memo: dict = {}
        for choice in itertools.product(*per_task):
            with_memo, without = run_choice(ts, choice, memo), run_choice(ts, choice)
            assert (with_memo.failed, with_memo.violated, with_memo.choice, with_memo.cluster) == \
                   (without.failed, without.violated, without.choice, without.cluster)
            if with_memo.feasible:
                assert with_memo.total_cost == without.total_cost
