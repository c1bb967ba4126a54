"""The exact selectors (milp on CP-SAT, milp-pulp on HiGHS) return exhaustive's unique optimum,
in both sharing modes of spec section 9 and, on typed problems, both objectives of section 10."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from selector.generate import Shape, random_problem
from selector.problem import load_problem, parse_problem
from solvers.registry import get_solver
from tests.randprob import with_sharing
from tests.shared import spec_example, typed_stages

EXACT = ["milp", "milp-pulp"]
KEYS = ("status", "workflow", "stages", "cost_gb_s", "usd_per_hour", "latency_s", "new_mem_gb", "new_gpus", "accuracy",
        "reason", "variant_space")


def same(a, b) -> dict:
    da, db = a.to_dict(), b.to_dict()
    return {k: (da.get(k), db.get(k)) for k in KEYS if da.get(k) != db.get(k)}


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("example", ["small", "reuse-and-replicas", "infeasible"])
def test_spec_examples(solver, example):
    plan = get_solver(solver).select(load_problem(spec_example(example))).to_dict()
    expected = json.loads(spec_example(example, ".expected.json").read_text())
    if "stages" in expected:      # spec section 10: an untyped plan's stages carry gpu_type "gpu"
        expected = {**expected, "stages": typed_stages(expected["stages"]), "usd_per_hour": None}
    for k, v in expected.items():
        if k not in ("elapsed_s", "solver", "variants_evaluated"):
            assert plan.get(k) == v, (k, plan.get(k), v)


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("sharing", ["memory", "compute"])
@pytest.mark.parametrize("seed", range(0, 300, 7))
def test_matches_exhaustive_on_random_problems(solver, sharing, seed):
    p = with_sharing(random_problem(seed), sharing)
    assert same(get_solver("exhaustive").select(p), get_solver(solver).select(p)) == {}


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("sharing, seed", [("memory", 9), ("memory", 38), ("memory", 215),
                                           ("compute", 9), ("compute", 95), ("compute", 215)])
def test_lazy_placement_cuts(solver, sharing, seed):
    """The optimum of the relaxation cannot be placed (under compute sharing: section 9's cuts)."""
    p = with_sharing(random_problem(seed), sharing)
    plan = get_solver(solver).select(p)
    assert plan.extra["cuts"] > 0
    assert same(get_solver("exhaustive").select(p), plan) == {}


def _twins(util: float, stage0_reuse: bool) -> dict:
    """Two identical deployed instances (twins): every tie-break below cost decides."""
    perf = []
    for s in ("a", "b"):
        for tp in (1, 2):
            if s == "a" and tp == 2 and not stage0_reuse:
                continue
            perf.append({"workflow": "w", "stage": s, "model": "m", "tp": tp, "pp": 1,
                         "latency_s": 1.0 if tp == 1 else 0.7, "capacity_rps": 2.0})
    return {"task": {"name": "twins", "accuracy_slo": 0.0, "latency_slo_s": 10.0, "arrival_rate_rps": 0.5},
            "models": [{"name": "m", "accuracy": 30.0, "active_params_b": 7.0}],
            "configs": [{"tp": 1, "pp": 1}],
            "workflows": [{"name": "w", "stages": [{"name": "a"}, {"name": "b"}]}],
            "deployments": [{"model": "m", "tp": 1, "pp": 1, "mem_gb": 16.0}],
            "perf": perf,
            "cluster": {"gpus": [{"id": 0, "mem_gb": 48.0, "used_gb": 16.0}, {"id": 1, "mem_gb": 48.0, "used_gb": 16.0}],
                        "instances": [{"id": "i0", "model": "m", "tp": 2, "pp": 1, "gpus": [0, 1], "utilization": util},
                                      {"id": "i1", "model": "m", "tp": 2, "pp": 1, "gpus": [1, 0],
                                       "utilization": util}]}}


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("util", [0.1, 0.6, 0.8])
@pytest.mark.parametrize("stage0_reuse", [True, False])
def test_ties_between_twin_instances(solver, util, stage0_reuse):
    p = parse_problem(_twins(util, stage0_reuse))
    ref = get_solver("exhaustive").select(p)
    assert same(ref, get_solver(solver).select(p)) == {}


@pytest.mark.parametrize("solver", EXACT)
def test_paper_sized_and_quickstart_problems(solver):
    root = Path(__file__).resolve().parents[2] / "configs" / "benchmarks" / "problems"
    for f in ["paper-sized.json", "quickstart-2-chat.json", "quickstart-7-text-to-sql.json"]:
        p = load_problem(root / f)
        assert same(get_solver("exhaustive").select(p), get_solver(solver).select(p)) == {}, f


@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_milp_without_warm_start_agrees(sharing):
    for seed in range(0, 60, 6):
        p = with_sharing(random_problem(seed), sharing)
        assert same(get_solver("milp", warm_start=False).select(p), get_solver("milp").select(p)) == {}


@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_deep_multi_workflow_space_is_proved_with_workflows_pruned(sharing):
    """Three workflows of 7, 5 and 3 stages (11 models, 10 configs, ~9e13 variants): the driver's
    lower bounds leave one workflow to search; both models prove the same optimum as
    exhaustive restricted to that workflow (the other two are proved out by their bounds)."""
    from selector.synthetic import synthetic_problem
    from solvers.baselines.common import only_workflow
    p = with_sharing(synthetic_problem(depths=(7, 5, 3), seed=0), sharing)
    milp, pulp = get_solver("milp").select(p, time_limit_s=60), get_solver("milp-pulp").select(p, time_limit_s=60)
    assert milp.status == "optimal" and milp.extra["workflows_pruned"] >= 1
    assert same(milp, pulp) == {}
    ref = get_solver("exhaustive").select(only_workflow(p, milp.workflow))
    assert (ref.stages, ref.cost_gb_s) == (milp.stages, milp.cost_gb_s)


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("seed", range(0, 120, 8))
def test_busy_problems_under_compute_sharing(solver, seed):
    """Three times the load: section 9's packing rows and cuts decide; still exhaustive's optimum."""
    d = random_problem(seed).to_dict()
    d["cluster"]["sharing"] = "compute"
    d["task"]["arrival_rate_rps"] *= 3.0
    p = parse_problem(d)
    assert same(get_solver("exhaustive").select(p), get_solver(solver).select(p)) == {}


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_deep_infeasible_space_gets_its_reason(solver, sharing):
    """~9e13 variants, none placeable: the reason comes from a Pareto sweep, not from counting
    variants until the time limit (which once left 'unknown: time limit reached while diagnosing')."""
    from selector.synthetic import synthetic_problem
    d = synthetic_problem(depths=(7, 5, 3), seed=0, arrival_rate_rps=12.0).to_dict()
    d["cluster"]["sharing"] = sharing
    plan = get_solver(solver).select(parse_problem(d), time_limit_s=30)
    assert plan.status == "infeasible"
    assert plan.reason.startswith("placement: ") and "none of the variants (not counted" in plan.reason, plan.reason


@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_workflow_lower_bound_is_a_bound(sharing):
    """lower_bound never exceeds the cost of a feasible variant of its workflow, and with that
    cost as the cap it does not prune the workflow."""
    import itertools

    from selector.evaluate import evaluate
    from selector.index import compile_problem
    from solvers._exact import lower_bound, prepare
    from tests.randprob import random_problem as small_problem
    checked = 0
    for seed in range(40):
        cp = compile_problem(with_sharing(small_problem(seed), sharing))
        data = prepare(cp)
        for w, wf in enumerate(cp.workflows):
            for choice in itertools.product(*(range(len(st.options)) for st in wf.stages)):
                ev = evaluate(cp, w, choice)
                if ev.feasible:
                    checked += 1
                    c = ev.cost_gb_s
                    assert lower_bound(data, w, None) <= c * (1 + 1e-9) + 1e-12
                    assert lower_bound(data, w, c + 1e-9 * max(1.0, c)) <= c * (1 + 1e-9) + 1e-12
    assert checked > 50


@pytest.mark.parametrize("solver", EXACT)
def test_time_limit_is_honoured(solver):
    from selector.synthetic import synthetic_problem
    p = synthetic_problem(n_stages=6, n_models=25)
    t0 = time.perf_counter()
    plan = get_solver(solver).select(p, time_limit_s=0.05)
    assert time.perf_counter() - t0 < 5.0
    assert plan.status in ("optimal", "feasible", "unknown")   # the problem is feasible: never "infeasible"
    if plan.status == "unknown":
        assert "time limit" in plan.reason


@pytest.mark.parametrize("heuristic", ["flowmaker", "flowmaker-plus"])
@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_heuristics_never_beat_the_optimum(heuristic, sharing):
    for seed in range(0, 120, 4):
        p = with_sharing(random_problem(seed, shape=Shape(stages=(1, 4), max_space=20_000)), sharing)
        opt, h = get_solver("milp").select(p), get_solver(heuristic).select(p)
        if h.solved:
            assert opt.status == "optimal"
            assert h.cost_gb_s >= opt.cost_gb_s * (1 - 1e-9)


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("objective", ["gb_s", "usd_per_hour"])
@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_typed_problems_match_exhaustive(solver, objective, sharing):
    """Spec section 10: random problems (selector.generate) spread over three priced GPU types."""
    from selector.typed import spread_over_types
    for seed in range(0, 60, 4):
        p = spread_over_types(with_sharing(random_problem(seed), sharing), seed=seed, objective=objective)
        assert same(get_solver("exhaustive").select(p), get_solver(solver).select(p)) == {}, seed


@pytest.mark.parametrize("objective", ["gb_s", "usd_per_hour"])
def test_typed_paper_sized_space(objective):
    """The paper-sized space over three GPU types (about 218,000 variants): all three agree."""
    from selector.synthetic import paper_problem
    from selector.typed import spread_over_types
    p = spread_over_types(paper_problem(1), seed=1, objective=objective)
    ref = get_solver("exhaustive").select(p)
    assert ref.status == "optimal"
    for solver in EXACT:
        assert same(ref, get_solver(solver).select(p)) == {}, solver
