"""``## What each headline depends on`` of ``paper_goodput_cost``'s ``summary.md`` (issue 25 item 6):
for each headline figure, which modelling choice it rests on and how far it moves when that choice
changes, computed from the run's tables (nothing here is written by hand after a run).

Headlines, on the headline scenario at 25-100% load (mean over the low and high bands' seeds):

- the goodput ratio FlowMaker / each baseline;
- the cost ratio LangChain / FlowMaker (reserved GB x s, the paper's unit);
- the reuse saving FlowMakerNoReuse / FlowMaker (reserved GB x s).

Choices: the cost unit (the four of ``_paper_costs.UNITS``, same cells); every other scenario
that differs from the headline scenario in one field (placement of the baselines, colocation
penalty, sharing mode, SLO set, arrivals, objective, re-planning, FlowMaker's fair-share check), at the loads both ran; and the
paper's sizing of a baseline (``SIZED_AS_PAPER``: the same baseline sized as the paper had it).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.kinds._paper_costs import MAX_HEADLINE_LOAD, UNITS
from experiments.kinds._intervals import ci95, fmt
from experiments.kinds._paper_report import paired

#: a baseline sized as the paper had it -> the baseline it re-sizes (docs/baselines.md)
SIZED_AS_PAPER = {"routellm-paper": "routellm-max-quality", "langchain-paper": "langchain"}
FIELDS = {"placement": "baselines' placement", "colocation": "colocation penalty", "sharing": "sharing mode",
          "slo_set": "accuracy SLO set", "arrivals": "arrival process", "objective": "selection objective",
          "replan": "re-planning per load", "fair_share": "FlowMaker's fair-share check"}
REF = "flowmaker"


def _value(sub: pd.DataFrame, base: str, metric: str, *, cost: bool, loads) -> tuple[float, float]:
    """Mean [95% CI] over seeds of the per-seed mean ratio over ``loads`` (<= 100%)."""
    if sub is None or base not in set(sub.selector) or REF not in set(sub.selector):
        return float("nan"), float("nan")
    r = paired(sub[sub.load_pct.isin(loads)], REF, base, metric, cost=cost)
    r = r[np.isfinite(r)]
    return ci95(r.groupby(level="seed").mean()) if len(r) else (float("nan"), float("nan"))


def _changed(sc, main, params) -> tuple[str, str, str] | None:
    """(choice, headline setting, this scenario's) when ``sc`` differs from ``main`` in one field
    (a field a scenario leaves unset takes the experiment's)."""
    def eff(s, f):
        v = getattr(s, f)
        return getattr(params, f) if v is None else v
    diff = [(FIELDS[f], eff(main, f), eff(sc, f)) for f in FIELDS if eff(sc, f) != eff(main, f)]
    return (diff[0][0], str(diff[0][1]), str(diff[0][2])) if len(diff) == 1 else None


def _headlines(main_sub: pd.DataFrame) -> list[tuple[str, str, str, bool]]:
    """(name, baseline, metric, cost?) of each headline the headline scenario ran."""
    bases = [b for b in main_sub.selector.unique() if b != REF]
    out = [(f"goodput ratio FlowMaker / {b}", b, "goodput", False) for b in bases]
    if "langchain" in bases:
        out.append(("cost ratio LangChain / FlowMaker (reserved GB x s)", "langchain", "reserved_window_gb_s", True))
    if "flowmaker-noreuse" in bases:
        out.append(("reuse saving FlowMakerNoReuse / FlowMaker (reserved GB x s)", "flowmaker-noreuse",
                    "reserved_window_gb_s", True))
    return out


def _rows(df, params, main, head) -> list[tuple[str, str, tuple, tuple]]:
    """(choice, alternative, headline value at the shared loads, alternative's value)."""
    name, base, metric, cost = head
    msub = df[df.scenario == main.name]
    rows = []
    if cost:
        for col, unit in UNITS[1:]:
            if col in msub and msub[col].notna().any():
                loads = sorted(x for x in set(msub.load_pct) if x <= MAX_HEADLINE_LOAD)
                rows.append(("cost unit", unit, _value(msub, base, metric, cost=cost, loads=loads),
                             _value(msub, base, col, cost=cost, loads=loads)))
    for sc in params.scenarios:
        sub = df[df.scenario == sc.name]
        loads = sorted(x for x in set(sub.load_pct) & set(msub.load_pct) if x <= MAX_HEADLINE_LOAD)
        if sc.name == main.name or not loads:
            continue
        ch = _changed(sc, main, params)
        if ch is not None and base in set(sub.selector):
            rows.append((ch[0], f"{ch[2]} (`{sc.name}`; headline: {ch[1]})",
                         _value(msub, base, metric, cost=cost, loads=loads),
                         _value(sub, base, metric, cost=cost, loads=loads)))
        for paper, own in SIZED_AS_PAPER.items():
            if own == base and paper in set(sub.selector) and ch is None and sc.sharing == main.sharing:
                rows.append((f"{own} sizing", f"as the paper (`{paper}` in `{sc.name}`)",
                             _value(msub, base, metric, cost=cost, loads=loads),
                             _value(sub, paper, metric, cost=cost, loads=loads)))
    return rows


def _move(a: float, b: float) -> str:
    return f"{(b / a - 1) * 100:+.0f}%" if np.isfinite(a) and np.isfinite(b) and a else "n/a"


def dependence_md(df: pd.DataFrame, params, main) -> list[str]:
    """The section: per headline a table of choices, and one generated sentence naming the choice
    that moves it most (and whether any change reverses it, i.e. crosses 1)."""
    if main is None:
        return []
    msub = df[(df.scenario == main.name) & (df.load_pct <= MAX_HEADLINE_LOAD)]
    lines = ["## What each headline depends on (generated from this run's tables)", "",
             f"Headline scenario `{main.name}`, loads 25-100%. Each row changes one modelling choice; "
             "both values are at the loads the two scenarios share (mean [95% CI] over seeds of the "
             "per-seed mean ratio).", ""]
    for head in _headlines(msub):
        rows = _rows(df, params, main, head)
        full = _value(msub, head[1], head[2], cost=head[3], loads=sorted(set(msub.load_pct)))
        lines += [f"**{head[0]}: {fmt(*full)}x** at 25-100%."]
        if not rows:
            lines += ["No sensitivity row changes a choice it depends on in this run.", ""]
            continue
        moves = [(abs(b[0] / a[0] - 1) if np.isfinite(a[0]) and np.isfinite(b[0]) and a[0] else -1, c, alt, a, b)
                 for c, alt, a, b in rows]
        big = max(moves, key=lambda m: m[0])
        flips = [f"{c} ({alt})" for _, c, alt, a, b in moves if np.isfinite(a[0]) and np.isfinite(b[0])
                 and (a[0] - 1) * (b[0] - 1) < 0]
        lines.append(f"It depends most on the {big[1]}: {fmt(*big[3])}x becomes {fmt(*big[4])}x under "
                     f"{big[2]} ({_move(big[3][0], big[4][0])}). "
                     + (f"It changes side (crosses 1) under: {'; '.join(flips)}." if flips
                        else "No change here makes it cross 1."))
        lines += ["", "| choice | alternative | headline | alternative's | change |", "|---|---|---|---|---|"]
        lines += [f"| {c} | {alt} | {fmt(*a)}x | {fmt(*b)}x | {_move(a[0], b[0])} |" for _, c, alt, a, b in moves]
        lines.append("")
    return lines
