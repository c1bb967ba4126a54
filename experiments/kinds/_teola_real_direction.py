"""teola_real_cpu's direction statement (issue 26, item 6): does the real run point the way the
simulation of the same deployment does?

The simulation is not copied into the config as numbers: :func:`simulate` runs it here, from its own
config (``params.simulation``: a ``teola_apps`` config, the real deployment's engines on shared CPU
cores), for the real run's apps, rates and schemes, in a few seconds. Every (app, rate, baseline)
gets a verdict, not only the best baseline: a small predicted effect can be checked only where the
run resolves it, and the large ones (Teola against LlamaIndex's defaults) say whether the simulation
orders the schemes as the real engines do.

A real speedup is *resolved* when every repeat's ratio lies on one side of 1 (``faster`` / ``slower``);
otherwise the repeats straddle 1 and the run cannot tell the direction (``mixed``), whatever its mean.
Beside the direction, the magnitude: the 95% paired bootstrap interval of the real speedup (queries
paired by repeat and arrival, ``teola_real_cpu.summarise``) and whether the simulated speedup lies
inside it (``consistent``): where the simulation predicts a few percent, below what the repeats can
resolve, a real interval around the simulated value is the evidence the run can give.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.kinds import _teola_real_typical as typical
from flowmaker.entry import UserError
from flowmaker.inputs import load_data

#: the columns of :func:`simulate`'s frame, one row per simulated query
SIM_COLUMNS = ["app", "rate_rps", "scheme", "seed", "qid", "latency_s"]


def simulate(config: str | Path, rates_rps: Mapping[str, Sequence[float]], schemes: Sequence[str]) -> pd.DataFrame:
    """The simulation of ``config`` (a ``teola_apps`` experiment config, by name or path) at every (app, rate) of
    ``rates_rps`` that it lists too, for ``schemes``: one row per simulated query (app, rate_rps, scheme,
    seed, qid, latency_s) over the config's seeds (:func:`sim_means` gives the per-cell means)."""
    from experiments.kinds import teola_apps
    from profiler.catalog import CatalogError, config_path
    try:
        path = config_path(config, "experiments", "experiment config")
    except CatalogError as exc:
        raise UserError(f"field 'params.simulation': {exc}") from None
    if not path.is_file():
        raise UserError(f"field 'params.simulation': no such file: {path}")
    raw = load_data(path)
    if not isinstance(raw, dict) or raw.get("kind") != "teola_apps":
        raise UserError(f"field 'params.simulation': {path} is not a teola_apps experiment config")
    p = teola_apps.Params(**(raw.get("params") or {}))
    frames = []
    for app, rates in rates_rps.items():
        sim_rates = p.rates_rps.get(app, []) if app in p.apps else []
        for rate in (r for r in rates if any(abs(r - s) < 1e-9 for s in sim_rates)):
            frames += [teola_apps.cell_frame(p, app, rate, s, p.n_queries, seed).assign(rate_rps=rate)[SIM_COLUMNS]
                       for s in schemes for seed in p.seeds]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SIM_COLUMNS)


def sim_means(sim_q: pd.DataFrame) -> pd.DataFrame:
    """Per (app, rate, scheme) of :func:`simulate`'s queries: the mean over seeds of each seed's mean
    latency (the real run's statistic over repeats), as ``sim_mean_latency_s``."""
    per_seed = sim_q.groupby(["app", "rate_rps", "scheme", "seed"], sort=False).latency_s.mean()
    return (per_seed.groupby(["app", "rate_rps", "scheme"], sort=False).mean()
            .rename("sim_mean_latency_s").reset_index())


def side(x: float, lo: float, hi: float) -> str:
    """Which way a speedup points over the repeats: ``faster`` / ``slower`` when every repeat agrees."""
    return "faster" if lo > 1 else "slower" if hi < 1 else ("mixed, mean faster" if x >= 1 else "mixed, mean slower")


def verdict(real: str, sim: float) -> str:
    """The real direction (:func:`side`) against the simulated speedup ``sim``."""
    want = "faster" if sim >= 1 else "slower"
    if not real.startswith("mixed"):
        return "agrees" if real == want else "disagrees"
    return "unresolved, the mean agrees" if real.endswith(want) else "unresolved, the mean disagrees"


def table(summary: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """Per unsaturated (app, rate) and baseline: the real speedup with its per-repeat range, its
    side, the simulated speedup and the verdict (rows without a simulated cell get none)."""
    teola = summary.groupby(["app", "rate_rps"], sort=False).scheme.first()
    lat = {(r.app, r.rate_rps, r.scheme): r.sim_mean_latency_s for r in sim.itertuples()}
    rows = []
    for r in summary.itertuples():
        t = teola[(r.app, r.rate_rps)]
        if r.saturated or r.scheme == t:
            continue
        s = lat.get((r.app, r.rate_rps, r.scheme)), lat.get((r.app, r.rate_rps, t))
        sim_x = s[0] / s[1] if None not in s else float("nan")
        real = side(r.speedup_mean_latency, r.speedup_min, r.speedup_max)
        rows.append({"app": r.app, "rate_rps": r.rate_rps, "baseline": r.scheme, "best": r.scheme == r.best_baseline,
                     "real": r.speedup_mean_latency, "real_min": r.speedup_min, "real_max": r.speedup_max,
                     "real_side": real, "simulated": sim_x, "ci_lo": r.speedup_ci_lo, "ci_hi": r.speedup_ci_hi,
                     "verdict": "" if np.isnan(sim_x) else verdict(real, sim_x),
                     "consistent": bool(r.speedup_ci_lo <= sim_x <= r.speedup_ci_hi)})
    return pd.DataFrame(rows)


def markdown(summary: pd.DataFrame, sim_q: pd.DataFrame, source: str, queries: pd.DataFrame | None = None,
             baselines: Mapping[tuple[str, float], str] | None = None, alpha: float = typical.ALPHA) -> list[str]:
    """The direction section of summary.md: the best baseline per (app, rate), then every baseline
    (``sim_q``: :func:`simulate`'s queries), then, given the real ``queries``, the typical query
    (``_teola_real_typical``, at the family-wise level ``alpha``) against ``baselines`` per (app, rate)
    (default: each unsaturated cell's best)."""
    tab = table(summary, sim_means(sim_q))
    out = ["", f"## Direction: the real run against the simulation of this deployment ({source}, run now)", ""]
    if tab.empty:
        return out + ["No unsaturated (app, rate): no direction to compare."]
    out += ["Best baseline per unsaturated (app, rate) (resolved: every repeat on one side of 1):", ""]
    for r in tab[tab.best].itertuples():
        out.append(f"- {r.app} at {r.rate_rps:g} req/s: {r.real:.2f}x [{r.real_min:.2f}-{r.real_max:.2f}] against "
                   f"{r.baseline}, {r.real_side}; 95% paired interval {_ci(r)}"
                   + (f"; simulation {r.simulated:.2f}x: {r.verdict}, {_inside(r)}" if r.verdict else ""))
    judged = tab[tab.verdict != ""]
    n = judged.verdict.value_counts()
    inside = judged[judged.best].consistent
    out += ["", f"Every baseline: of {len(judged)} (app, rate, baseline) pairs with a simulated cell, the run "
                f"resolves {int(n.get('agrees', 0) + n.get('disagrees', 0))}: the direction agrees in "
                f"{int(n.get('agrees', 0))} and disagrees in {int(n.get('disagrees', 0))}; "
                f"{int(n.get('unresolved, the mean agrees', 0) + n.get('unresolved, the mean disagrees', 0))} are "
                f"unresolved (their mean agrees in {int(n.get('unresolved, the mean agrees', 0))}). Simulated "
                f"speedups of the unresolved pairs: "
                + (", ".join(f"{x:.2f}x" for x in judged[judged.verdict.str.startswith('unresolved')].simulated)
                   or "none") + f". The simulated speedup lies inside the real 95% paired interval in "
                f"{int(judged.consistent.sum())} of {len(judged)} pairs ({int(inside.sum())} of {len(inside)} against "
                f"the best baseline).", "",
            "| app | rate (req/s) | baseline | real speedup [per-repeat range] | 95% paired interval | real | "
            "simulated | verdict | simulated inside the interval |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in tab.itertuples():
        sim_x = "-" if np.isnan(r.simulated) else f"{r.simulated:.2f}x"
        out.append(f"| {r.app} | {r.rate_rps:g} | {r.baseline}{' (best)' if r.best else ''} | {r.real:.2f}x "
                   f"[{r.real_min:.2f}-{r.real_max:.2f}] | {_ci(r)} | {r.real_side} | {sim_x} | {r.verdict or '-'} | "
                   f"{('yes' if r.consistent else 'no') if r.verdict else '-'} |")
    if queries is not None:
        cells = baselines if baselines is not None else {
            (r.app, r.rate_rps): r.best_baseline for r in summary.drop_duplicates(["app", "rate_rps"]).itertuples()
            if not r.saturated}
        out += typical.markdown(typical.table(queries, cells, summary.scheme.iloc[0], sim_q, alpha))
    return out


def _ci(r) -> str:
    return f"[{r.ci_lo:.2f}-{r.ci_hi:.2f}]" if np.isfinite(r.ci_lo) else "n/a"


def _inside(r) -> str:
    return "inside the real interval" if r.consistent else "outside the real interval"
