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
