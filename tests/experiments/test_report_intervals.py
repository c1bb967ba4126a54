"""A share's interval stays within what a share can be (issue 27 item 5): three seeds of goodput
0.1 / 0.5 / 0.94 give a t interval of about +-1.05, printed clipped to [0, 1] and drawn so."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.kinds._intervals import ci95, error_bars, fmt

from experiments.kinds._paper_report import COST, by_load_table, plots


def test_goodput_intervals_are_clipped_to_zero_and_one():
    m, h = ci95([0.1, 0.5, 0.94])
    assert m - h < 0 and m + h > 1                       # the raw t interval leaves [0, 1]
    assert fmt(m, h, 3, bounds=(0.0, 1.0)) == f"{m:.3f} [0.000, 1.000]"
    assert fmt(m, h, 3) == f"{m:.3f} [{m - h:.3f}, {m + h:.3f}]"     # a ratio keeps its interval
    df = pd.DataFrame({"selector": "flowmaker", "trace": "code", "load_pct": 100, "seed": [0, 1, 2],
                       "goodput": [0.1, 0.5, 0.94]})
    row = by_load_table(df, "goodput")[2]
    assert "[0.000, 1.000]" in row and "-0." not in row


def test_error_bars_are_clipped_like_the_tables():
    stats = [ci95([0.1, 0.5, 0.94]), ci95([0.9, 0.95, 1.0]), (0.7, float("nan"))]
    yerr = error_bars(stats, (0.0, 1.0))
    means = np.array([s[0] for s in stats])
    assert np.allclose(means - yerr[0], [0.0, stats[1][0] - stats[1][1], 0.7])     # below: down to 0 at most
    assert np.allclose(means + yerr[1], [1.0, 1.0, 0.7])                            # above: up to 1; NaN: none
    raw = error_bars(stats)                                                          # unbounded: symmetric
    assert np.allclose(raw[0], raw[1]) and raw[0][0] == pytest.approx(stats[0][1])


def test_the_goodput_plot_draws_its_bars_within_zero_and_one(tmp_path, monkeypatch):
    import matplotlib.axes
    drawn = []
    real = matplotlib.axes.Axes.errorbar
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar",
                        lambda self, x, y, yerr=None, **kw: drawn.append((np.asarray(y), np.asarray(yerr)))
                        or real(self, x, y, yerr=yerr, **kw))
    df = pd.DataFrame({"selector": "flowmaker", "trace": "code", "load_pct": [50] * 3 + [100] * 3,
                       "seed": [0, 1, 2] * 2, "goodput": [0.1, 0.5, 0.94, 0.9, 0.95, 1.0], COST: [1.0, 5.0, 9.0] * 2})
    plots(df, tmp_path)
    (y, yerr), (cy, cerr) = drawn                                                   # goodput, then cost
    assert (y - yerr[0]).min() >= 0 and (y + yerr[1]).max() <= 1 + 1e-12
    assert np.allclose(cerr[0], cerr[1]) and (cy - cerr[0]).min() < 0                # a cost keeps its interval
    assert (tmp_path / "goodput.png").exists()


def test_paired_ratio_interval_covers_the_ratio_and_narrows_with_pairing():
    from experiments.kinds._intervals import ratio_ci95_paired
    rng = np.random.default_rng(1)
    shared = rng.lognormal(0, 0.3, 60)                  # what both schemes of a pair share (the machine's phase)
    den = shared * rng.lognormal(0, 0.05, 60)
    num = 1.1 * shared * rng.lognormal(0, 0.05, 60)
    lo, hi = ratio_ci95_paired(num, den, np.repeat([0, 1, 2], 20))
    assert lo < num.mean() / den.mean() < hi and lo > 1.0 and hi - lo < 0.1
    shuffled = ratio_ci95_paired(num, rng.permutation(den))   # the pairing broken: a wider interval
    assert shuffled[1] - shuffled[0] > 2 * (hi - lo)
    assert ratio_ci95_paired(num, den) == ratio_ci95_paired(num, den)
    assert np.isnan(ratio_ci95_paired(num[:1], den[:1])[0])
