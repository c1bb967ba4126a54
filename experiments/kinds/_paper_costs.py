"""Cost four ways and the overload cells of ``paper_goodput_cost`` (issue 25 items 2 and 4).

Every cost is reported in four units side by side, each over the same fixed window (arrival
window + capped drain, docs/metrics.md):

- ``reserved GB x s``: reserved GPU memory x seconds, the paper's unit (``reserved_window_gb_s``;
  the paper's dollars are this x a price per GB-second, so their ratios are the same);
- ``GPU-s held``: whole GPUs any instance occupies x seconds (``gpu_s_held_window``,
  ``harness.billing.gpu_bill``: a GPU shared by several instances counts once);
- ``busy GPU-s``: seconds each GPU runs an iteration, summed over GPUs (``busy_gpu_s``);
- ``USD``: GPU-hours held x the GPU type's price (``usd_window``, configs/prices.yaml).

A claim is stated per unit as the data has it: in how many (trace, load) cells FlowMaker is
cheaper, and its band ratios, whether or not FlowMaker wins. Overload cells (loads above 100%)
are reported apart: tasks placed and the work served, never in the headline.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.kinds._intervals import ci95, fmt

from experiments.kinds._paper_report import band, paired

UNITS = (("reserved_window_gb_s", "reserved GB x s"), ("gpu_s_held_window", "GPU-s held"),
         ("busy_gpu_s", "busy GPU-s"), ("usd_window", "USD"))
HEADLINE_BANDS = (("low", (25, 50)), ("high", (75, 100)))
MAX_HEADLINE_LOAD = 100.0


def units(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The units the table has (a run published before a column existed lacks it)."""
    return [(c, n) for c, n in UNITS if c in df and df[c].notna().any()]


def bands(df: pd.DataFrame) -> list[tuple[str, tuple]]:
    present = set(df.load_pct)
    out = [(n, tuple(x for x in ls if x in present)) for n, ls in HEADLINE_BANDS]
    return [(f"{n} ({'/'.join(f'{x:g}' for x in ls)}%)", ls) for n, ls in out if ls]


def cell_ratios(sub: pd.DataFrame, ref: str, base: str, metric: str) -> pd.Series:
    """Mean over seeds per (trace, load) of the paired cost ratio baseline / FlowMaker, at 25-100%."""
    r = paired(sub[sub.load_pct <= MAX_HEADLINE_LOAD], ref, base, metric, cost=True)
    return r[np.isfinite(r)].groupby(level=["trace", "load_pct"]).mean()


def units_ratio_table(sub: pd.DataFrame, ref: str) -> list[str]:
    """Per baseline and load band: the cost ratio baseline / FlowMaker in every unit."""
    us = units(sub)
    lines = ["| baseline | load band | " + " | ".join(f"{n} ratio" for _, n in us) + " |",
             "|---|---|" + "---|" * len(us)]
    for base in [s for s in sub.selector.unique() if s != ref]:
        ratios = [paired(sub, ref, base, c, cost=True) for c, _ in us]
        for name, loads in bands(sub):
            cells = [fmt(*band(r, loads)[:2]) + "x" for r in ratios]
            lines.append(f"| {base} | {name} | " + " | ".join(cells) + " |")
    return lines


def units_by_load(sub: pd.DataFrame) -> list[str]:
    """Per selector and load (mean over traces and seeds): every unit's absolute figure."""
    us = units(sub)
    lines = ["| selector | load | " + " | ".join(n for _, n in us) + " |", "|---|---|" + "---|" * len(us)]
    for (sel, ld), g in sub.groupby(["selector", "load_pct"], sort=False):
        vals = [fmt(*ci95(g[c]), digits=4 if c == "usd_window" else 0) for c, _ in us]
        lines.append(f"| {sel} | {ld:g}% | " + " | ".join(vals) + " |")
    return lines


def claim(sub: pd.DataFrame, ref: str, base: str, metric: str) -> tuple[int, int, float, float]:
    """(cells where FlowMaker is cheaper, cells, smallest and largest cell ratio) at 25-100%."""
    cells = cell_ratios(sub, ref, base, metric)
    if cells.empty:
        return 0, 0, float("nan"), float("nan")
    return int((cells > 1.0).sum()), len(cells), float(cells.min()), float(cells.max())


def _verdict(won: int, n: int) -> str:
    if n == 0:
        return "not measured"
    if won == n:
        return "cheaper in every cell"
    return "dearer or equal in every cell" if won == 0 else f"cheaper in {won} of {n} cells"


def claims_md(sub: pd.DataFrame, ref: str) -> list[str]:
    """One line per unit: against each baseline, where FlowMaker is cheaper (25-100%), as it is."""
    lines = []
    for c, name in units(sub):
        parts = []
        for base in [s for s in sub.selector.unique() if s != ref]:
            won, n, lo, hi = claim(sub, ref, base, c)
            parts.append(f"{base} {_verdict(won, n)} ({lo:.2f}-{hi:.2f}x)" if n else f"{base} n/a")
        lines.append(f"- In **{name}** FlowMaker is, per (trace, load) cell at 25-100% (cost ratio baseline / "
                     "FlowMaker, min-max over cells): " + "; ".join(parts) + ".")
    if "usd_window" in sub and "gpu_s_held_window" in sub:
        price = (sub.usd_window / sub.gpu_s_held_window * 3600).dropna().unique()
        if len(price) == 1:
            lines.append(f"- One GPU type at {price[0]:.2f} USD per GPU-hour: dollars are GPU-seconds held x "
                         "that price, so the USD claims are the GPU-s-held claims.")
    return lines


def overload_md(sub: pd.DataFrame, deps: pd.DataFrame, sc) -> list[str]:
    """Overload cells apart: per selector and load, the tasks its plan placed and the work served."""
    lines = [f"## Overload (scenario `{sc.name}`: loads above 100%, reported apart from the headline)", "",
             "Under compute sharing a plan never puts a GPU above utilisation 1, so at overload a selector "
             "places what fits; the unplaced tasks' requests fail. Work served: requests completed, and "
             "requests that met both SLOs (good), per second of the arrival window (mean over traces and seeds).", "",
             "| selector | load | tasks placed | requests | completed / s | good / s | goodput |",
             "|---|---|---|---|---|---|---|"]
    d = deps[(deps.sharing == sc.sharing) & (deps.slo_set == sc.slo_set)]
    for (sel, ld), g in sub.groupby(["selector", "load_pct"], sort=False):
        p = d[(d.selector == sel) & (d.plan_load_pct == ld) & (d.placement == g.placement.iloc[0])
              & (d.objective == g.objective.iloc[0])].drop_duplicates("task")
        win = g.window_s.iloc[0]
        lines.append(f"| {sel} | {ld:g}% | {int(p.placed.sum())}/{len(p)} | {g.requests.mean():.0f} | "
                     f"{(g.completed / win).mean():.2f} | {(g.goodput * g.requests / win).mean():.2f} | "
                     f"{fmt(*ci95(g.goodput), digits=3)} |")
    return lines + [""]
