"""teola_real_cpu's typical-query statistic (``_teola_real_typical``): paired log ratios, the
signed-rank tests with Holm's correction, the median's interval and the verdict against the simulation."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.kinds import _teola_real_typical as typical
from experiments.kinds._intervals import median_ci95_paired


def _queries(gain: float, n: int = 30, noise: float = 0.05, seed: int = 0) -> pd.DataFrame:
    """Two runs x one repeat x n queries; the baseline takes ``gain`` times Teola's latency, times noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in ("r1", "r2"):
        for q in range(n):
            t = 0.5 + 0.3 * rng.random()
            rows += [{"run": run, "repeat": 0, "qid": q, "app": "naive_rag", "rate_rps": 0.2, "scheme": "teola",
                      "latency_s": t, "failed": False},
                     {"run": run, "repeat": 0, "qid": q, "app": "naive_rag", "rate_rps": 0.2, "scheme": "b",
                      "latency_s": t * gain * np.exp(noise * rng.standard_normal()), "failed": False}]
    return pd.DataFrame(rows)


def _sim(ratio: float) -> pd.DataFrame:
    return pd.DataFrame([{"app": "naive_rag", "rate_rps": 0.2, "scheme": s, "seed": 0, "qid": q,
                          "latency_s": 0.3 * (ratio if s == "b" else 1.0)} for s in ("teola", "b") for q in range(4)])


def test_pairs_are_matched_per_run_and_repeat_and_failed_queries_dropped():
    df = _queries(1.1, n=5)
    df.loc[(df.run == "r2") & (df.qid == 3) & (df.scheme == "b"), "failed"] = True
    pr = typical.paired_log_ratios(df, "naive_rag", 0.2, "b", "teola")
    assert len(pr) == 9 and set(pr.repeat) == {"r1/0", "r2/0"}
    assert typical.paired_log_ratios(df, "naive_rag", 0.2, "missing", "teola").empty


def test_holm_adjusts_step_down_and_keeps_the_order_given():
    adj = typical.holm([0.01, 0.04, 0.03, float("nan")])
    assert adj[:3] == pytest.approx([0.03, 0.06, 0.06]) and np.isnan(adj[3])


def test_a_consistent_gain_is_resolved_and_agrees_with_a_simulation_that_points_the_same_way():
    tab = typical.table(_queries(1.05), {("naive_rag", 0.2): "b"}, "teola", _sim(1.03)).iloc[0]
    assert tab.pairs == 60 and tab.verdict == "agrees" and tab.p_faster_holm < 0.05
    assert tab.median_lo < tab.median_ratio < tab.median_hi and tab.median_ratio == pytest.approx(1.05, abs=0.03)
    assert tab.sim_median_ratio == pytest.approx(1.03)
    assert typical.table(_queries(1.05), {("naive_rag", 0.2): "b"}, "teola", _sim(0.97)).verdict.iloc[0] == "disagrees"


def test_no_effect_in_noise_stays_unresolved_and_a_loss_is_slower():
    cells = {("naive_rag", 0.2): "b"}
    assert typical.table(_queries(1.0, noise=0.3), cells, "teola", _sim(1.03)).verdict.iloc[0] == "unresolved"
    assert typical.table(_queries(0.9), cells, "teola").verdict.iloc[0] == "slower"     # no simulation given
    md = "\n".join(typical.markdown(typical.table(_queries(0.9), cells, "teola")))
    assert "| naive_rag | 0.2 | b | 60 | 0% |" in md and md.rstrip().endswith("| slower |")


def test_the_median_interval_resamples_within_strata_and_needs_two_units():
    x = np.r_[np.zeros(20), np.ones(20)]
    lo, hi = median_ci95_paired(x, np.r_[np.zeros(20), np.ones(20)])
    assert 0.0 <= lo <= hi <= 1.0
    assert np.isnan(median_ci95_paired(np.array([1.0]))[0])


def test_a_stricter_level_leaves_a_marginal_gain_unresolved():
    cells = {("naive_rag", 0.2): "b"}
    df = _queries(1.02, noise=0.05, seed=3)
    loose = typical.table(df, cells, "teola", _sim(1.03)).iloc[0]
    strict = typical.table(df, cells, "teola", _sim(1.03), alpha=loose.p_faster_holm / 2).iloc[0]
    assert loose.verdict == "agrees" and strict.verdict == "unresolved" and strict.alpha < loose.alpha == 0.05
    assert f"family-wise {strict.alpha:g};" in "\n".join(typical.markdown(typical.table(df, cells, "teola", None,
                                                                                         strict.alpha)))
