"""Each pass's share of Teola's speedup (``teola_apps``, per app): which pass subsets to run and
the decomposition.

Every subset ``S`` of Teola's passes is a scheme (``teola-only-<p>+<q>...``, Teola's scheduler);
subsets whose optimised graphs are identical for every query configuration of the app (a pass that
rewrites nothing there) run once, since the simulation is deterministic given the graph, the seed
and the policy. ``L(S)`` is the mean latency over seeds.

Decomposition: with ``v(S) = ln(L(none) / L(S))``, each pass's share is its Shapley value
``phi_p`` (the mean of its marginal gain ``v(S + p) - v(S)`` over the orders in which passes
can be switched on), so ``sum_p phi_p = ln(L(none) / L(all))`` exactly, and the speedup over the
best baseline ``B`` factors as ``B / L(all) = (B / L(none)) * prod_p exp(phi_p)``: what the
runtime without passes does against the baseline, times each pass's factor. "Off alone"
(``L(all - p) / L(all)``) and "only on" (``L(none) / L({p})``) are reported beside it; their
log-shares need not sum to the total (interactions), and the table says by how much they miss.
"""
from __future__ import annotations

from itertools import combinations
from math import exp, factorial, log
from typing import Any, Callable, Sequence

import pandas as pd

from orchestrator.schemes import ALL, only_scheme


def subsets() -> list[tuple[str, ...]]:
    return [tuple(c) for k in range(len(ALL) + 1) for c in combinations(ALL, k)]


def scheme_of(s: Sequence[str], prefix_caching: bool = False) -> str:
    """Teola with passes ``s`` (on engines with a prefix cache with ``prefix_caching``)."""
    if set(s) == set(ALL):
        return "teola+prefix-cache" if prefix_caching else "teola"
    return only_scheme(tuple(s), prefix_caching)


def classes(graphs_of: Callable[[tuple[str, ...]], list[Any]]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each subset -> the subset whose graphs it shares (the representative that runs): the full
    set first, then subsets by size, so the representative is the largest such subset."""
    reps: list[tuple[tuple[str, ...], list[Any]]] = []
    out = {}
    for s in sorted(subsets(), key=lambda s: -len(s)):
        g = graphs_of(s)
        rep = next((r for r, rg in reps if rg == g), None)
        if rep is None:
            reps.append((s, g))
            rep = s
        out[s] = rep
    return out


def shapley(lat: dict[tuple[str, ...], float], players: Sequence[str] = ALL) -> dict[str, float]:
    """``phi_p`` of ``v(S) = ln(L(none) / L(S))`` over the passes in ``players`` (subsets of them)."""
    n = len(players)
    key = {frozenset(s): v for s, v in lat.items()}
    phi = {}
    for p in players:
        rest = [q for q in players if q != p]
        tot = 0.0
        for k in range(n):
            w = factorial(k) * factorial(n - k - 1) / factorial(n)
            for s in combinations(rest, k):
                tot += w * log(key[frozenset(s)] / key[frozenset(s) | {p}])
        phi[p] = tot
    return phi


def decompose(app: str, rate: float, setting: str, lat: dict[tuple[str, ...], float],
              baseline: str, baseline_s: float, applied: Sequence[str] = ALL) -> pd.DataFrame:
    """One row per pass, plus ``baseline->unoptimised`` and ``total`` rows (factors; a pass's share
    in percent of the passes' joint gain ``ln(L(none) / L(applied))``, the share of the total being
    meaningless where the total is near 1x). ``applied``: the passes Teola applies (the guided
    optimiser's choice); the Shapley values are over them, a pass left out has factor 1 and the
    total is ``baseline_s / L(applied)``."""
    applied = tuple(p for p in ALL if p in applied)
    none, full = lat[()], lat[applied]
    total = baseline_s / full
    phi = {p: 0.0 for p in ALL} | shapley(lat, applied)
    gain = log(none / full)

    def pct(x: float) -> float:
        return 100 * x / gain if abs(gain) > 1e-12 else float("nan")

    rows = [{"part": f"{baseline} -> unoptimised graph", "factor": baseline_s / none,
             "share_pct": float("nan"), "off_alone": float("nan"), "only_on": float("nan")}]
    for p in ALL:
        rows.append({"part": p, "factor": exp(phi[p]), "share_pct": pct(phi[p]),
                     "off_alone": lat[tuple(q for q in applied if q != p)] / full if p in applied else 1.0,
                     "only_on": none / lat[(p,)], "applied": p in applied})
    off_sum = log(baseline_s / none) + sum(log(r["off_alone"]) for r in rows[1:])
    only_sum = log(baseline_s / none) + sum(log(r["only_on"]) for r in rows[1:])
    rows.append({"part": "total (product of the factors above)", "factor": total,
                 "share_pct": pct(sum(phi.values())),
                 "off_alone": exp(off_sum), "only_on": exp(only_sum)})
    return pd.DataFrame(rows).assign(app=app, rate_rps=rate, setting=setting, baseline=baseline,
                                     baseline_s=baseline_s, teola_s=full, unoptimised_s=none,
                                     passes="+".join(applied) or "none")


def markdown(dec: pd.DataFrame) -> list[str]:
    out = ["", "## Each pass's share of the speedup (per app, each app's low rate and one query)", "",
           "Factor: Shapley value of each pass on ln(latency), as a factor; the factors multiply to "
           "the total exactly (`experiments/kinds/_teola_passes.py`). Teola has the best baseline's engine "
           "features (a prefix cache where it has one: the unoptimised graph and every pass subset then run on "
           "such engines too) and applies the passes its optimiser chooses "
           "there (`orchestrator/guided.py`; every pass where no guided scheme is run): the Shapley values are over "
           "them, a pass not applied has factor 1.000x (its only-on factor says what it would do alone). Share: "
           "percent of the passes' joint gain ln(L(no pass) / L(applied)). "
           "Off alone: L(applied but p) / L(applied); only on: L(no pass) / L(p alone); in the total row, the "
           "product of the off-alone (only-on) factors with the baseline's, which misses the total by "
           "the passes' interactions.", ""]
    for (app, setting), g in dec.groupby(["app", "setting"], sort=False):
        r0 = g.iloc[0]
        rate = "one query" if setting == "one_query" else f"{r0.rate_rps:g} req/s"
        t = getattr(r0, "teola_scheme", "teola")
        out += [f"### {app}, {rate}: best baseline {r0.baseline} {r0.baseline_s:.3f} s, unoptimised graph "
                f"{r0.unoptimised_s:.3f} s, Teola (`{t}`) {r0.teola_s:.3f} s (passes applied: "
                f"{getattr(r0, 'passes', '+'.join(ALL)).replace('+', ', ')})", "",
                "| part | factor | share of the passes' gain | off alone | only on |", "|---|---|---|---|---|"]
        for r in g.itertuples():
            off, on, sh = ("-" if pd.isna(v) else f"{v:.3f}x" for v in (r.off_alone, r.only_on, r.factor))
            share = "-" if pd.isna(r.share_pct) else f"{r.share_pct:.1f}%"
            part = r.part if getattr(r, "applied", True) is not False else f"{r.part} (not applied)"
            out.append(f"| {part} | {sh} | {share} | {off} | {on} |")
        out.append("")
    return out
