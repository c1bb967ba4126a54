"""Issue 28 item 3: every limit kept. The timing itself is a benchmark
(``python -m experiments.run bench_time_limits`` with ``params.problems: [long-200, instances-24, ...]``); these tests pin
the mechanisms: a block's work no longer grows with stages squared, blocks of a deep workflow are
small, the backend's import happens before the clock starts, and an infeasible answer's reason
never says ``unknown``."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from selector.index import compile_problem
from selector.space import CHUNK_CELLS, DEFAULT_CHUNK, chunks, decode


def _max_util_pairwise(cp, wf, choice):
    """The former stages-squared formula, kept here as the reference."""
    inst = [st.arrays["inst"][choice[:, s]] for s, st in enumerate(wf.stages)]
    util = [st.arrays["util"][choice[:, s]] for s, st in enumerate(wf.stages)]
    out = np.zeros(choice.shape[0])
    base = np.concatenate([cp.base_util, [0.0]])
    for s in range(len(inst)):
        total = base[inst[s]].copy()
        for t in range(len(inst)):
            total += np.where(inst[t] == inst[s], util[t], 0.0)
        np.maximum(out, np.where(inst[s] >= 0, total, 0.0), out=out)
    return out


@pytest.mark.parametrize("n_instances, utilization", [(3, 0.1), (5, 0.3), (12, 0.5)])
def test_max_util_per_instance_equals_the_pairwise_formula(n_instances: int, utilization: float) -> None:
    from selector.stress import many_instances_problem
    cp = compile_problem(many_instances_problem(n_instances=n_instances, n_stages=4, n_models=11,
                                                utilization=utilization))
    wf = cp.workflows[0]
    ch = next(chunks(cp, wf, chunk=4096))
    assert np.array_equal(ch.max_util, _max_util_pairwise(cp, wf, ch.choice))


def test_a_deep_workflow_is_searched_in_small_blocks() -> None:
    """Before: 65,536 variants x 200 stages per block took 1-10 s, and the deadline is checked
    only between blocks (flowmaker-plus, exhaustive, milp, milp-pulp ran 5.5-21 s at 0.5 s)."""
    from selector.stress import long_workflow_problem
    cp = compile_problem(long_workflow_problem(n_stages=200))
    ch = next(chunks(cp, cp.workflows[0]))
    assert ch.flat.size * 200 <= CHUNK_CELLS < DEFAULT_CHUNK * 200
    assert ch.max_util.max() > 0                       # variants that reuse the instance are there
    choice = decode(ch.flat[:64], cp.workflows[0].radices)
    assert np.array_equal(ch.max_util[:64], _max_util_pairwise(cp, cp.workflows[0], choice))


@pytest.mark.parametrize("name, module", [("milp", "ortools.sat.python.cp_model"), ("milp-pulp", "pulp"),
                                          ("bayesian", "optuna")])
def test_prepare_imports_the_backend_before_the_clock(name: str, module: str) -> None:
    """Before: the CLI's milp imported OR-Tools inside the limit (1.2-1.6 s at 0.5 s)."""
    code = (f"import sys; from solvers.registry import get_solver; s = get_solver({name!r}); "
            f"assert {module!r} not in sys.modules; s.prepare(); assert {module!r} in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-500:]


def test_the_cli_prepares_the_solver_before_select(tmp_path, monkeypatch) -> None:
    import json

    from selector import cli
    from solvers.milp import MilpSelector
    from tests.shared import SMALL_PROBLEM
    calls: list[str] = []
    monkeypatch.setattr(MilpSelector, "prepare", lambda self: calls.append("prepare"))
    orig = MilpSelector.select
    monkeypatch.setattr(MilpSelector, "select", lambda self, p, **kw: (calls.append("select"), orig(self, p, **kw))[1])
    p = tmp_path / "p.json"
    p.write_text(json.dumps(SMALL_PROBLEM))
    assert cli.main(["solve", str(p), "--solver", "milp"]) == 0
    assert calls == ["prepare", "select"]


def test_a_diagnosis_cut_short_keeps_the_proof() -> None:
    """Before: milp-pulp answered `infeasible` with the reason "unknown: time limit reached while
    diagnosing infeasibility": a proof and an unknown at once."""
    from selector.diagnose import infeasibility_reason
    from selector.stress import many_instances_problem
    cp = compile_problem(many_instances_problem(n_instances=3, n_stages=3, n_models=11, utilization=0.99))
    reason = infeasibility_reason(cp, deadline=0.0)    # a deadline long past
    assert "unknown" not in reason


def test_milp_pulp_starts_no_model_build_it_cannot_finish_in_time() -> None:
    """Before: milp-pulp built (and PuLP handed HiGHS) a model whatever time was left, and HiGHS's
    limit started only after that: 2 s overran by 0.6 s on a 24-instance problem."""
    import time

    from selector.stress import many_instances_problem
    from solvers._exact import prepare
    from solvers.milp_pulp import PulpBackend
    cp = compile_problem(many_instances_problem(n_instances=3, n_stages=3, n_models=11, utilization=0.1))
    backend = PulpBackend(prepare(cp), threads=1)
    kw = dict(objective="cost", reuse_only=False, cap=None, cuts=[], hint=None, workflows=(0,))
    assert backend.minimise(deadline=time.perf_counter() + 60, **kw).status == "optimal"
    assert backend.build_s > 0
    backend.build_s = 30.0                   # as if one build took 30 s: no time for another
    t0 = time.perf_counter()
    assert backend.minimise(deadline=t0 + 5.0, **kw).status == "unknown"
    assert time.perf_counter() - t0 < 5.0


def test_flowmaker_plus_local_search_stops_inside_a_pass(monkeypatch) -> None:
    """Before: the deadline was checked once per pass over every stage's options (24 instances:
    hundreds of exact evaluations), so 0.5 s overran by 0.4-0.6 s."""
    import time

    import solvers.flowmaker_plus as fp
    from selector.evaluate import evaluate
    from selector.stress import many_instances_problem
    cp = compile_problem(many_instances_problem(n_instances=24, n_stages=3, n_models=11, utilization=0.1))
    start = next(e for e in (evaluate(cp, 0, c) for c in [(0, 0, 0)]) if e is not None)
    calls = []

    def slow(*a):
        calls.append(1)
        time.sleep(0.02)
        return evaluate(*a)
    monkeypatch.setattr(fp, "evaluate", slow)
    options = sum(len(st.options) for st in cp.workflows[0].stages)
    fp._local_search(cp, start, time.perf_counter() + 0.1)
    assert options > 30 and len(calls) < 15


def test_flowmaker_noreuse_counts_its_own_compile_inside_the_limit(monkeypatch) -> None:
    """Before: it gave flowmaker the whole limit and compiled the problem afterwards (2 s overran
    by 0.46 s on a loaded machine with 24 instances)."""
    import time

    import solvers.baselines.noreuse as nr
    from solvers.flowmaker import FlowMakerSelector
    from tests.shared import SMALL_PROBLEM
    from selector.problem import parse_problem
    seen: list[float] = []
    orig_select, orig_compile = FlowMakerSelector.select, nr.compile_problem

    def spy(self, problem, *, time_limit_s):
        seen.append(time_limit_s)
        return orig_select(self, problem, time_limit_s=time_limit_s)

    def slow_compile(p):
        time.sleep(0.3)
        return orig_compile(p)
    monkeypatch.setattr(FlowMakerSelector, "select", spy)
    monkeypatch.setattr(nr, "compile_problem", slow_compile)
    nr.FlowMakerNoReuseSelector().select(parse_problem(SMALL_PROBLEM), time_limit_s=1.0)
    assert seen and seen[0] <= 0.7


def test_bayesian_reads_its_trial_count_without_copying_the_trials(monkeypatch) -> None:
    """Before: three ``study.trials`` after the study deep-copied every trial, 0.2-0.4 s each
    after 200-stage trials (2 s overran by 0.8 s on a loaded machine)."""
    import optuna

    from selector.synthetic import synthetic_problem
    from solvers.bayesian import BayesianSelector

    def copied(self, *a, **kw):
        if kw.get("deepcopy", True):
            raise AssertionError("trials deep-copied")
        return orig(self, *a, **kw)
    orig = optuna.Study.get_trials
    monkeypatch.setattr(optuna.Study, "get_trials", copied)
    plan = BayesianSelector(n_trials=12).select(synthetic_problem(n_stages=2, n_models=3), time_limit_s=30.0)
    assert plan.status == "feasible" and plan.extra["trials"] == 12


def test_bayesian_reserves_more_before_its_first_model_based_trial() -> None:
    """Before: the stop margin was 1.5x the slowest trial, but the first TPE trial over 200 stages
    took 2.6x the random trials before it."""
    import time

    from solvers.bayesian import _Deadline

    class Study:
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    class Trial:
        def __init__(self, number: int) -> None:
            self.number = number

    def stops(number: int, slowest: float, left: float) -> bool:
        d = _Deadline(time.perf_counter() + 3600, n_startup=10)
        d.slowest = slowest                       # the trials so far; the one just ended took ~0
        d.deadline = d.last + left
        study = Study()
        d(study, Trial(number))
        return study.stopped
    # 2 x the slowest random trial left: enough for another random trial, not for the first TPE one
    assert not stops(number=5, slowest=0.1, left=0.2)
    assert stops(number=9, slowest=0.1, left=0.2)
    assert not stops(number=9, slowest=0.1, left=0.5)
    assert not stops(number=12, slowest=0.1, left=0.2)


def _copy_equals_compiled(copy, derived) -> None:
    from selector.index import _compile
    assert derived.problem is copy and compile_problem(copy) is derived   # the solver will not compile it again
    assert derived.workflows == _compile(copy).workflows


@pytest.mark.parametrize("sharing", ["memory", "compute"])
def test_baseline_copies_equal_the_parsed_ones_and_are_not_compiled_again(sharing: str) -> None:
    """Before: murakkab and flowmaker-noreuse dumped the problem, parsed the edited dump and
    compiled it again (0.3-0.5 s of a 0.5 s limit on a loaded machine with 12-24 instances)."""
    from selector.problem import parse_problem
    from selector.stress import many_instances_problem
    from solvers.baselines.common import compiled_copy, only_workflow
    from solvers.baselines.murakkab import _offline
    from solvers.baselines.noreuse import without_reuse
    d = many_instances_problem(n_instances=4, n_stages=3, n_models=5, utilization=0.3).to_dict()
    d["cluster"]["sharing"] = sharing
    d["workflows"].append({"name": "solo", "stages": [{"name": "only"}]})
    first, stage = d["workflows"][0]["name"], d["workflows"][0]["stages"][0]["name"]
    d["perf"] += [dict(r, workflow="solo", stage="only") for r in d["perf"] if r["stage"] == stage]
    problem = parse_problem(d)
    cp = compile_problem(problem)
    # the dump-and-parse copies the solvers made before
    ref = problem.to_dict()
    ref["workflows"], ref["perf"] = ref["workflows"][:1], [r for r in ref["perf"] if r["workflow"] == first]
    assert only_workflow(problem, first) == parse_problem(ref)
    for inst in ref["cluster"]["instances"]:
        inst["utilization"] = min(1.0, inst["utilization"] * 2.0)
    offline = _offline(problem, cp, 0, 2.0)
    assert offline == parse_problem(ref)
    _copy_equals_compiled(offline, compile_problem(offline))
    noreuse = without_reuse(problem)
    ref = problem.to_dict()
    if sharing == "memory":
        ref["cluster"]["instances"] = []
    else:
        ref["models"].append({"name": "(deployed)", "accuracy": 0.0, "active_params_b": 1.0})
        for inst in ref["cluster"]["instances"]:
            inst["model"] = "(deployed)"
    assert noreuse == parse_problem(ref)
    _copy_equals_compiled(noreuse, compiled_copy(cp, noreuse, range(len(cp.workflows)), reuse=False))


def test_milp_evaluates_the_tie_window_only_until_the_deadline() -> None:
    """Before: after an enumeration that ran to the deadline, the driver evaluated every variant
    of the tie window (7,467 on instances-24-low, 0.2-0.3 s) past a 2 s limit."""
    import time

    from selector.stress import many_instances_problem
    from solvers._exact import _evaluate_until, _State
    cp = compile_problem(many_instances_problem(n_instances=3, n_stages=3, n_models=11, utilization=0.1))
    variants = [(0, (0, 0, 0)), (0, (0, 0, 1)), (0, (1, 0, 0))]
    st = _State()
    evs, complete = _evaluate_until(cp, st, variants, time.perf_counter() + 60)
    assert complete and [(e.workflow, e.choice) for e in evs] == variants
    assert st.evaluated == 3 and 0 < st.reserve_s() == st.eval_min_s and _State().reserve_s() == 0.0
    assert _evaluate_until(cp, _State(), variants, time.perf_counter() - 1.0) == ([], False)


def test_milp_enumeration_keeps_time_to_evaluate_what_it_found() -> None:
    """The CP-SAT enumeration stops once ``len(found) * reserve_s`` would end past the deadline,
    so the driver can still evaluate (and choose among) the variants before it."""
    import time

    from selector.synthetic import synthetic_problem
    from solvers._exact import prepare
    from solvers.milp import CpSatBackend
    cp = compile_problem(synthetic_problem(n_stages=2, n_models=4))
    backend = CpSatBackend(prepare(cp), workers=1, seed=0)
    kw = dict(objective="latency", reuse_only=False, cap=cp.problem.task.latency_slo_s, cuts=[], workflows=(0,))
    every, complete = backend.enumerate(deadline=time.perf_counter() + 60, **kw)
    assert complete and len(every) > 1
    t0 = time.perf_counter()
    some, complete = backend.enumerate(deadline=t0 + 60, reserve_s=59.0 / 1.5, **kw)   # room for one
    assert not complete and len(some) in (1, 2) and set(some) < set(every)
    assert time.perf_counter() - t0 < 30
