"""teola_real_cpu's direction statement (``_teola_real_direction``): the real run against the
simulation of the same deployment, run from its config, per (app, rate, baseline)."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.kinds import _teola_real_direction as direction
from flowmaker.entry import UserError


def _summary() -> pd.DataFrame:
    """Two cells; per baseline (mean, min, max) of Teola's speedup over it; b is the best."""
    cells = {("naive_rag", 0.2, False): {"a": (1.30, 1.20, 1.40), "b": (0.95, 0.88, 1.05)},
             ("advanced_rag", 0.1, False): {"a": (0.80, 0.70, 0.90), "b": (1.02, 1.01, 1.04)},
             ("advanced_rag", 0.2, True): {"a": (0.50, 0.40, 0.60), "b": (0.40, 0.30, 0.50)}}
    rows = []
    for (app, rate, sat), by in cells.items():
        rows.append({"app": app, "rate_rps": rate, "scheme": "teola", "speedup_mean_latency": 1.0, "speedup_min": 1.0,
                     "speedup_max": 1.0, "speedup_ci_lo": 1.0, "speedup_ci_hi": 1.0, "best_baseline": "b",
                     "saturated": sat})
        rows += [{"app": app, "rate_rps": rate, "scheme": s, "speedup_mean_latency": x, "speedup_min": lo,
                  "speedup_max": hi, "speedup_ci_lo": lo - 0.02, "speedup_ci_hi": hi + 0.02, "best_baseline": "b",
                  "saturated": sat} for s, (x, lo, hi) in by.items()]
    return pd.DataFrame(rows)


def _sim(lat: dict[tuple[str, float], dict[str, float]]) -> pd.DataFrame:
    """Simulated queries: two seeds of one query per cell and scheme, their latencies v -/+ 0.01 (mean v)."""
    return pd.DataFrame([{"app": a, "rate_rps": r, "scheme": s, "seed": seed, "qid": 0, "latency_s": v + d}
                         for (a, r), by in lat.items() for s, v in by.items() for seed, d in ((0, -0.01), (1, 0.01))])


def test_every_baseline_gets_a_verdict_and_saturated_cells_none():
    sim = _sim({("naive_rag", 0.2): {"teola": 1.0, "a": 1.5, "b": 1.02},
                ("advanced_rag", 0.1): {"teola": 1.0, "a": 1.1, "b": 0.9}})
    tab = direction.table(_summary(), direction.sim_means(sim)).set_index(["app", "baseline"])
    assert len(tab) == 4 and not (tab.rate_rps == 0.2).loc["advanced_rag"].any()
    assert tab.loc[("naive_rag", "a"), "verdict"] == "agrees"                     # 1.20-1.40 vs 1.5
    assert tab.loc[("naive_rag", "b"), "verdict"] == "unresolved, the mean disagrees"   # straddles 1, mean 0.95
    assert tab.loc[("advanced_rag", "a"), "verdict"] == "disagrees"               # 0.70-0.90 vs 1.1
    assert tab.loc[("advanced_rag", "b"), "verdict"] == "disagrees"               # 1.01-1.04 vs 0.9
    assert tab.loc[("advanced_rag", "b"), "simulated"] == pytest.approx(0.9)
    assert bool(tab.loc[("naive_rag", "b"), "best"]) and not bool(tab.loc[("naive_rag", "a"), "best"])
    # the magnitude: is the simulated speedup inside the real interval (per-repeat range widened by 0.02 here)?
    assert tab.consistent.to_dict() == {("naive_rag", "a"): False, ("naive_rag", "b"): True,
                                        ("advanced_rag", "a"): False, ("advanced_rag", "b"): False}


def test_a_cell_the_simulation_did_not_run_gets_no_verdict_and_the_counts_say_so():
    sim = _sim({("naive_rag", 0.2): {"teola": 1.0, "a": 1.5, "b": 1.02}})
    md = "\n".join(direction.markdown(_summary(), sim, "`sim`"))
    assert "of 2 (app, rate, baseline) pairs with a simulated cell, the run resolves 1: the direction agrees in 1 " \
           "and disagrees in 0; 1 are unresolved (their mean agrees in 0)" in md
    assert "| advanced_rag | 0.1 | a | 0.80x [0.70-0.90] | [0.68-0.92] | slower | - | - | - |" in md
    assert "- naive_rag at 0.2 req/s: 0.95x [0.88-1.05] against b, mixed, mean slower; 95% paired interval " \
           "[0.86-1.07]; simulation 1.02x: unresolved, the mean disagrees, inside the real interval" in md
    assert "inside the real 95% paired interval in 1 of 2 pairs (1 of 1 against the best baseline)" in md


def test_the_shipped_simulation_runs_for_the_real_run_s_cells_only():
    sim = direction.simulate("teola_real_cpu_sim", {"naive_rag": [0.2, 0.3]}, ["teola", "llamadistpc-open-to"])
    assert list(sim.rate_rps.unique()) == [0.2] and set(sim.scheme) == {"teola", "llamadistpc-open-to"}
    assert sim.groupby(["scheme", "seed"]).qid.nunique().eq(16).all() and (sim.latency_s > 0).all()
    means = direction.sim_means(sim)
    assert len(means) == 2 and (means.sim_mean_latency_s > 0).all()


def test_a_simulation_that_is_not_a_teola_apps_config_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="params.simulation"):
        direction.simulate(str(tmp_path / "missing.yaml"), {}, ["teola"])
    other = tmp_path / "other.yaml"
    other.write_text("experiment: x\nkind: paper_goodput_cost\nparams: {}\n")
    with pytest.raises(UserError, match="not a teola_apps experiment config"):
        direction.simulate(str(other), {}, ["teola"])
