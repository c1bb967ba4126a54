"""Spec section 11's worked examples (tests/solvers/examples/joint-*.yaml): every exact joint
solver returns the expected joint answer, the sequential greedy its own (worse) one, and the
independent brute force (tests/joint_brute.py) agrees. Regenerate an expected file with
``python -m tests.solvers.test_joint_examples`` only after checking the hand calculation in the
example's comment."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.joint import load_task_set
from solvers.joint_registry import get_joint_solver, names
from tests.joint_brute import joint_brute_force

EXAMPLES = Path(__file__).resolve().parent / "examples"
CASES = ["joint-greedy-skips", "joint-same-tasks-for-less"]
VOLATILE = {"elapsed_s", "solver", "variants_evaluated", "nodes", "solves", "cuts", "selector"}


def normalised(d: dict) -> dict:
    """The answer without what differs between solvers and runs (times, names, counters)."""
    out = {k: v for k, v in d.items() if k not in VOLATILE}
    out["plans"] = [{k: v for k, v in p.items() if k not in VOLATILE} for p in d["plans"]]
    return out


def expected(case: str, which: str) -> dict:
    return json.loads((EXAMPLES / f"{case}.{which}.expected.json").read_text())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("solver", [n for n in names() if get_joint_solver(n).exact])
def test_exact_solvers_return_the_expected_joint_answer(case: str, solver: str) -> None:
    plan = get_joint_solver(solver).select(load_task_set(EXAMPLES / f"{case}.yaml"))
    assert plan.status == "optimal"
    assert normalised(plan.to_dict()) == expected(case, "joint")


@pytest.mark.parametrize("case", CASES)
def test_sequential_returns_the_greedy_answer(case: str) -> None:
    plan = get_joint_solver("sequential").select(load_task_set(EXAMPLES / f"{case}.yaml"))
    assert plan.status == "feasible"
    assert normalised(plan.to_dict()) == expected(case, "sequential")


def test_the_examples_show_what_they_claim() -> None:
    skips = expected("joint-greedy-skips", "sequential"), expected("joint-greedy-skips", "joint")
    assert (skips[0]["served"], skips[1]["served"]) == (1, 2)
    assert skips[0]["plans"][1]["status"] == "skipped" and skips[0]["plans"][1]["reason"].startswith("placement")
    less = expected("joint-same-tasks-for-less", "sequential"), expected("joint-same-tasks-for-less", "joint")
    assert less[0]["served"] == less[1]["served"] == 2
    assert less[1]["total_cost"] == pytest.approx(30.0) and less[0]["total_cost"] == pytest.approx(40.0)
    assert less[1]["plans"][1]["stages"][0]["reuse"] == "a/gen/0"


@pytest.mark.parametrize("case", CASES)
def test_brute_force_agrees(case: str) -> None:
    served, cost, latency, _ = joint_brute_force(load_task_set(EXAMPLES / f"{case}.yaml"))
    exp = expected(case, "joint")
    assert (served, cost, latency) == (exp["served"], pytest.approx(exp["total_cost"]),
                                       pytest.approx(exp["total_latency_s"]))


if __name__ == "__main__":
    for case in CASES:
        ts = load_task_set(EXAMPLES / f"{case}.yaml")
        for which, solver in (("joint", "exhaustive"), ("sequential", "sequential")):
            data = normalised(get_joint_solver(solver).select(ts).to_dict())
            (EXAMPLES / f"{case}.{which}.expected.json").write_text(json.dumps(data, indent=1) + "\n")
