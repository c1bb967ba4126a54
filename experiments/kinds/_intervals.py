"""Intervals of the experiment reports: the mean and 95% t half-width over seeds (:func:`ci95`),
the interval clipped to what the metric can be (a share stays in [0, 1]), printed (:func:`fmt`)
and drawn (:func:`error_bars`); paired bootstrap intervals of a ratio of means
(:func:`ratio_ci95_paired`) and of a median (:func:`median_ci95_paired`)."""
from __future__ import annotations

import math

import numpy as np


def ci95(values) -> tuple[float, float]:
    """Mean and half-width of its 95% t interval (NaN half-width for fewer than 2 values)."""
    from scipy import stats
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if not len(x):
        return float("nan"), float("nan")
    if len(x) < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


#: metrics that are shares (a rate of requests): their intervals are clipped to what a share can be
BOUNDS = {"goodput": (0.0, 1.0), "accuracy_ok_share": (0.0, 1.0)}


def clipped(m: float, h: float, bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """The interval ``[m - h, m + h]``, its ends clipped to ``bounds`` (a share stays in [0, 1])."""
    return (max(m - h, bounds[0]), min(m + h, bounds[1])) if bounds else (m - h, m + h)


def fmt(m: float, h: float, digits: int = 2, unit: str = "", bounds: tuple[float, float] | None = None) -> str:
    """``m [m - h, m + h]``; ``bounds``: the interval's ends clipped to them (:func:`clipped`)."""
    if not np.isfinite(m):
        return "n/a"
    if not np.isfinite(h):
        return f"{m:.{digits}f}{unit}"
    lo, hi = clipped(m, h, bounds)
    return f"{m:.{digits}f}{unit} [{lo:.{digits}f}, {hi:.{digits}f}]"


def error_bars(stats: list[tuple[float, float]], bounds: tuple[float, float] | None = None) -> np.ndarray:
    """Matplotlib's ``yerr`` (2 x n: below, above) for ``ci95`` pairs, the ends :func:`clipped` (no
    bar where the half-width is NaN)."""
    ends = np.array([clipped(m, np.nan_to_num(h), bounds) for m, h in stats], dtype=float).reshape(-1, 2)
    m = np.array([s[0] for s in stats], dtype=float)
    return np.vstack([m - ends[:, 0], ends[:, 1] - m])


def ratio_ci95_paired(num: np.ndarray, den: np.ndarray, strata: np.ndarray | None = None,
                      n_boot: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of ``num.mean() / den.mean()`` over paired units (unit ``i``
    measured ``num[i]`` and ``den[i]``), the units resampled within each stratum (``strata[i]``; e.g.
    the repeat that ran them), with a fixed seed so a report re-runs to the same interval. NaN for
    fewer than 2 units."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(num) < 2:
        return float("nan"), float("nan")
    idx = _resampled(len(num), strata, n_boot, seed)
    ratios = num[idx].mean(axis=1) / den[idx].mean(axis=1)
    return float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def median_ci95_paired(x: np.ndarray, strata: np.ndarray | None = None, n_boot: int = 4000,
                       seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of ``median(x)`` over units (e.g. a pair's log ratio),
    resampled within each stratum as :func:`ratio_ci95_paired` does. NaN for fewer than 2 units."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float("nan"), float("nan")
    med = np.median(x[_resampled(len(x), strata, n_boot, seed)], axis=1)
    return float(np.quantile(med, 0.025)), float(np.quantile(med, 0.975))


def _resampled(n: int, strata: np.ndarray | None, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` x ``n`` bootstrap indices, each stratum's units drawn with replacement from that
    stratum alone (fixed seed)."""
    strata = np.zeros(n, dtype=int) if strata is None else np.asarray(strata)
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.choice(np.flatnonzero(strata == s), size=(n_boot, int((strata == s).sum())))
                           for s in np.unique(strata)], axis=1)
