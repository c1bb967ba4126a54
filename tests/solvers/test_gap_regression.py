"""Optimality-gap regression on the CI benchmark subset (configs/benchmarks/selector_gap_ci.yaml).

Fails when an exact solver disagrees with exhaustive's optimum anywhere, or when a heuristic's
match rate or mean gap gets worse than results/baselines/selector_gap.json, over the whole suite
or in either sharing mode of spec section 9. The full suite runs through
``python -m experiments.run configs/experiments/selector_gap.yaml``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from experiments.kinds.selector_gap import Params, baseline_figures, load_suite, solve_problem, summarise

ROOT = Path(__file__).resolve().parents[2]
BASELINE = json.loads((ROOT / "results" / "baselines" / "selector_gap.json").read_text())
SOLVERS = ["flowmaker", "flowmaker-plus", "milp", "milp-pulp"]


@pytest.fixture(scope="module")
def gap() -> pd.DataFrame:
    params = Params(suite=str(ROOT / "configs" / "benchmarks" / "selector_gap_ci.yaml"), solvers=SOLVERS,
                    time_limit_s=60)
    members = load_suite(params.suite)
    assert len(members) == BASELINE["ci"]["problems"]
    return pd.concat([solve_problem(pid, fam, p, params) for pid, fam, p in members], ignore_index=True)


@pytest.mark.parametrize("solver", ["milp", "milp-pulp"])
def test_exact_solvers_agree_with_the_optimum_everywhere(gap, solver):
    rows = gap[gap["solver"] == solver]
    wrong = rows[~rows["same_variant"] | ~rows["match"]]
    assert wrong.empty, wrong[["problem", "status", "cost_gb_s", "opt_cost_gb_s"]].to_string()
    assert (rows[rows["feasible"]]["status"] == "optimal").all()


@pytest.mark.parametrize("sharing", [None, "memory", "compute"])
@pytest.mark.parametrize("solver", ["flowmaker", "flowmaker-plus"])
def test_heuristic_no_worse_than_baseline(gap, solver, sharing):
    rows = gap if sharing is None else gap[gap["sharing"] == sharing]
    base = BASELINE["ci"] if sharing is None else BASELINE["ci"]["by_sharing"][sharing]
    assert rows["problem"].nunique() == base["problems"]
    now = baseline_figures(summarise(rows))[solver]
    assert now["match_pct"] >= base["solvers"][solver]["match_pct"] - 1e-6, (now, base["solvers"][solver])
    assert now["mean_gap_pct"] <= base["solvers"][solver]["mean_gap_pct"] + 1e-6, (now, base["solvers"][solver])


def test_both_sharing_modes_are_covered(gap):
    assert set(gap["sharing"]) == {"memory", "compute"}
    assert gap[gap["sharing"] == "compute"]["problem"].str.contains("-compute").all()
    assert not gap[gap["sharing"] == "memory"]["problem"].str.contains("compute").any()


def test_heuristics_never_beat_the_optimum(gap):
    h = gap[gap["solver"].isin(["flowmaker", "flowmaker-plus"]) & gap["feasible"]]
    assert (h["gap_pct"].dropna() >= -1e-6).all()
