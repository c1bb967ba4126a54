"""teola_real_cpu's second direction statistic (stop 40): the typical query, beside the mean.

The ratio of mean latencies (``_teola_real_report.summarise``) is pulled by the few queries that
overlap: one query of 1.4 s moves a 16-query mean by as much as a 3% gain on every other query. Here
each pair (the same question on the same arrivals, one repeat of one run) gives the log of
(baseline latency / Teola latency); a one-sided Wilcoxon signed-rank test asks whether Teola finishes
the same query faster (and, alike, slower), Holm-corrected over the (app, rate) cells judged together,
and the median ratio gets a 95% bootstrap interval (pairs resampled within each repeat), set beside
the simulation's median per-query ratio over its seeds' pairs (seed, query).

This statistic was chosen after the exploratory runs ``r39a``-``r39d``; ``docs/orchestrator.md``
("Stop 40") fixes it, with the baselines it is judged against, before the confirmatory runs' data.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from experiments.kinds._intervals import median_ci95_paired

#: family-wise level of the Holm-corrected signed-rank tests
ALPHA = 0.05


def paired_log_ratios(df: pd.DataFrame, app: str, rate: float, baseline: str, teola: str) -> pd.DataFrame:
    """One row per pair (``repeat``, ``qid``; ``run`` too where the frame pools runs) of ``app`` at
    ``rate`` where both schemes answered: ``repeat`` and ``log_ratio`` = log(baseline / Teola)."""
    key = [k for k in ("run", "repeat", "qid") if k in df]
    g = df[(df.app == app) & (np.isclose(df.rate_rps, rate)) & ~df.failed]
    wide = g.pivot_table(index=key, columns="scheme", values="latency_s")
    if not {baseline, teola} <= set(wide.columns):
        return pd.DataFrame(columns=["repeat", "log_ratio"])
    w = wide[[baseline, teola]].dropna()
    strata = w.index.to_frame(index=False)[[k for k in key if k != "qid"]].astype(str).agg("/".join, axis=1)
    return pd.DataFrame({"repeat": strata.to_numpy(), "log_ratio": np.log(w[baseline] / w[teola]).to_numpy()})


def signed_rank(x: np.ndarray) -> tuple[float, float]:
    """One-sided Wilcoxon signed-rank p-values of ``x`` (log ratios): (Teola faster, Teola slower)."""
    from scipy import stats
    x = np.asarray(x, dtype=float)
    if np.count_nonzero(x) < 2:
        return float("nan"), float("nan")
    return (float(stats.wilcoxon(x, alternative="greater").pvalue),
            float(stats.wilcoxon(x, alternative="less").pvalue))


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given; NaN stays NaN."""
    p = np.asarray(p, dtype=float)
    ok = np.flatnonzero(np.isfinite(p))
    out = np.full(len(p), np.nan)
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (len(ok) - rank) * p[i]))
        out[i] = running
    return out.tolist()


def sim_median_ratio(sim_q: pd.DataFrame, app: str, rate: float, baseline: str, teola: str) -> float:
    """The simulation's median per-query ratio baseline / Teola over its pairs (seed, qid)."""
    g = sim_q[(sim_q.app == app) & np.isclose(sim_q.rate_rps, rate)]
    w = g.pivot_table(index=["seed", "qid"], columns="scheme", values="latency_s")
    if not {baseline, teola} <= set(w.columns):
        return float("nan")
    return float(np.median(w[baseline] / w[teola]))


def table(df: pd.DataFrame, baselines: Mapping[tuple[str, float], str], teola: str,
          sim_q: pd.DataFrame | None = None, alpha: float = ALPHA) -> pd.DataFrame:
    """Per (app, rate) of ``baselines`` (its baseline): pairs, share of pairs Teola wins, median ratio
    and its interval, the simulation's median ratio, the Holm-adjusted one-sided p-values and the verdict
    at the family-wise level ``alpha`` (column ``alpha``)."""
    rows = []
    for (app, rate), base in baselines.items():
        pr = paired_log_ratios(df, app, rate, base, teola)
        x = pr.log_ratio.to_numpy(dtype=float)
        lo, hi = median_ci95_paired(x, pr.repeat.to_numpy())
        p_fast, p_slow = signed_rank(x)
        rows.append({"app": app, "rate_rps": rate, "baseline": base, "pairs": len(x),
                     "teola_faster_share": float((x > 0).mean()) if len(x) else float("nan"),
                     "median_ratio": float(np.exp(np.median(x))) if len(x) else float("nan"),
                     "median_lo": float(np.exp(lo)), "median_hi": float(np.exp(hi)),
                     "p_faster": p_fast, "p_slower": p_slow,
                     "sim_median_ratio": float("nan") if sim_q is None or sim_q.empty
                     else sim_median_ratio(sim_q, app, rate, base, teola)})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_faster_holm"], out["p_slower_holm"] = holm(out.p_faster), holm(out.p_slower)
    out["alpha"] = alpha
    out["verdict"] = [_verdict(r) for r in out.itertuples()]
    return out


def _verdict(r) -> str:
    real = "faster" if r.p_faster_holm < r.alpha else "slower" if r.p_slower_holm < r.alpha else "unresolved"
    if real == "unresolved" or not np.isfinite(r.sim_median_ratio):
        return real
    return "agrees" if real == ("faster" if r.sim_median_ratio >= 1 else "slower") else "disagrees"


def markdown(tab: pd.DataFrame) -> list[str]:
    """The typical-query section of a summary (``tab``: :func:`table`)."""
    if tab.empty:
        return []
    out = ["", "### The typical query (stop 40): paired signed-rank test and median ratio", "",
           (f"Per pair (same question, same arrivals) log(baseline / Teola); one-sided Wilcoxon signed-rank tests, "
           f"Holm-corrected over the {len(tab)} cells below at a family-wise {tab.alpha.iloc[0]:g}; the median ratio with a 95% "
           f"bootstrap interval (pairs resampled within each repeat); the simulation's median per-query ratio over its "
           f"(seed, query) pairs. `agrees`: the test resolves Teola faster (or slower) and the simulation's median "
           f"ratio points the same way."), "",
           ("| app | rate (req/s) | baseline | pairs | Teola faster in | median ratio [95%] | simulated median | "
            "p (faster), Holm | p (slower), Holm | verdict |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for r in tab.itertuples():
        sim = f"{r.sim_median_ratio:.2f}x" if np.isfinite(r.sim_median_ratio) else "-"
        out.append(f"| {r.app} | {r.rate_rps:g} | {r.baseline} | {r.pairs} | {r.teola_faster_share:.0%} | "
                   f"{r.median_ratio:.3f}x [{r.median_lo:.3f}-{r.median_hi:.3f}] | {sim} | {r.p_faster_holm:.2g} | "
                   f"{r.p_slower_holm:.2g} | {r.verdict} |")
    return out
