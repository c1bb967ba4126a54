"""Spec section 9's worked examples (tests/solvers/examples): every exact solver returns the
expected optimum in both sharing modes; no selector answers with a cheaper or invalid plan."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.problem import load_problem, parse_problem
from selector.verify import verify_plan
from solvers.registry import get_solver, names

EXAMPLES = Path(__file__).resolve().parent / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("compute-*.yaml"))   # typed-*: test_types.py
EXACT = ["exhaustive", "milp", "milp-pulp"]
NUMBERS = ("cost_gb_s", "latency_s", "new_mem_gb", "accuracy")


def _problem(name: str, sharing: str):
    d = load_problem(EXAMPLES / f"{name}.yaml").to_dict()
    d["cluster"]["sharing"] = sharing
    return parse_problem(d)


def _expected(name: str, sharing: str) -> dict:
    suffix = ".expected.json" if sharing == "compute" else ".memory.expected.json"
    return json.loads((EXAMPLES / f"{name}{suffix}").read_text())


def test_examples_exist_and_opt_into_compute_sharing() -> None:
    assert len(NAMES) >= 3
    for name in NAMES:
        assert load_problem(EXAMPLES / f"{name}.yaml").cluster.sharing == "compute"
        assert _expected(name, "compute") != _expected(name, "memory"), name   # the mode matters


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("sharing", ["compute", "memory"])
@pytest.mark.parametrize("name", NAMES)
def test_exact_solvers_return_the_expected_optimum(solver: str, sharing: str, name: str) -> None:
    got = get_solver(solver).select(_problem(name, sharing), time_limit_s=30).to_dict()
    want = _expected(name, sharing)
    assert got["status"] == want["status"] and got["variant_space"] == want["variant_space"]
    if want["status"] == "infeasible":
        assert got["reason"].startswith("placement:") and "compute-aware" in got["reason"]
        return
    assert (got["workflow"], got["stages"], got["new_gpus"]) == (want["workflow"], want["stages"], want["new_gpus"])
    for k in NUMBERS:
        assert got[k] == pytest.approx(want[k], rel=1e-6), k


@pytest.mark.parametrize("solver", names())
@pytest.mark.parametrize("name", NAMES)
def test_no_selector_beats_the_optimum_or_breaks_section_9(solver: str, name: str) -> None:
    problem = _problem(name, "compute")
    plan = get_solver(solver).select(problem, time_limit_s=30)
    want = _expected(name, "compute")
    assert not verify_plan(problem, plan), verify_plan(problem, plan)
    if want["status"] == "infeasible":
        assert not plan.solved and plan.reason
    elif plan.solved:
        assert plan.cost_gb_s >= want["cost_gb_s"] * (1 - 1e-9)


def test_cli_solves_an_example(capsys) -> None:
    from selector.cli import main
    assert main(["solve", str(EXAMPLES / "compute-reuse-first.yaml"), "--solver", "exhaustive", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["stages"] == _expected("compute-reuse-first", "compute")["stages"]
