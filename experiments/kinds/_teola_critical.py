"""Where Teola loses to the best baseline, read off the critical paths (``teola_apps``).

A query's critical path runs back from the output that finished last, through the parent that
finished last, to its arrival (a streamed piece of a decode counts from when its decode became
ready). Each node on it holds the path for ``done - ready``: queueing, dispatch and execution
together, so the spans add up to the query's latency exactly. Spans are grouped by *part*, the
component and the primitive's family (``expansion:decode``, ``synthesis:prefill``, ...), and
averaged over a cell's queries (one seed). For every (app, rate) where Teola is slower than the
best baseline, :func:`markdown` compares the two schemes' paths, one query alone and at the rate,
and says from the graph why no pass shortens the parts that bind: the text is generated from these
numbers, not written by hand.
"""
from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from orchestrator.primitives import Kind
from orchestrator.runtime.sim import QueryRun

FAMILY = {Kind.PREFILLING: "prefill", Kind.PARTIAL_PREFILLING: "prefill", Kind.FULL_PREFILLING: "prefill",
          Kind.DECODING: "decode", Kind.PARTIAL_DECODING: "decode"}
#: spans below this on both paths are left out of the text
MIN_S = 0.005


def critical_path(q: QueryRun) -> list[tuple[str, float]]:
    """``(node id, span_s)`` from arrival to the last output; the spans sum to the latency."""
    g, done = q.graph, q.done_s

    def parents(n: str) -> list[str]:
        s = g.nodes[n].stream_of
        return [p for p in g.parents[n] if p != s] + (parents(s) if s else [])

    n: str | None = max(g.outputs, key=done.__getitem__)
    path = []
    while n is not None:
        ps = [p for p in parents(n) if p in done]
        path.append((n, done[n] - max((done[p] for p in ps), default=q.arrival_s)))
        n = max(ps, key=done.__getitem__) if ps else None
    return path[::-1]


def path_rows(traces: Mapping[int, QueryRun], max_batch: Mapping[str, int]) -> list[dict[str, Any]]:
    """One row per node on each query's critical path."""
    rows = []
    for qid, q in traces.items():
        for nid, span in critical_path(q):
            node = q.graph.nodes[nid]
            rows.append({"qid": qid, "part": f"{nid.split('/')[0]}:{FAMILY.get(node.kind, node.kind.value)}",
                         "kind": node.kind.value, "engine": node.engine or "", "n_items": node.n_items,
                         "max_batch": max_batch.get(node.engine or "", 0), "span_s": span})
    return rows


def parts(df: pd.DataFrame) -> pd.DataFrame:
    """Per (app, rate, scheme, setting) and part: mean span per query, and the engine calls on the path."""
    n = df.groupby(["app", "rate_rps", "scheme", "setting"]).qid.nunique().rename("n_q")
    calls = df[(df.engine != "") & (df.kind != Kind.DECODING.value)]
    per = df.groupby(["app", "rate_rps", "scheme", "setting", "part"], sort=False).agg(
        span_s=("span_s", "sum"), n_items=("n_items", "max"), max_batch=("max_batch", "max")).reset_index()
    per = per.join(n, on=["app", "rate_rps", "scheme", "setting"])
    per["span_s"] /= per.n_q
    c = calls.groupby(["app", "rate_rps", "scheme", "setting"]).size().rename("calls").reset_index()
    per = per.merge(c, on=["app", "rate_rps", "scheme", "setting"], how="left")
    per["calls"] = per.calls.fillna(0) / per.n_q
    return per.drop(columns="n_q")


def _why(part: str, row: pd.Series) -> str:
    fam = part.split(":")[1]
    if fam == "decode":
        return ("a token chain (each step reads the previous token): no pass shortens a decode; decode pipelining "
                "only hands finished list items on early, and a decode also stalls for every prefill pass its "
                "instance runs")
    if fam == "prefill":
        return ("a prompt that needs the previous module's output; prefill splitting already takes the ready "
                "prefix off the path where the cost model says it pays, the rest waits for its input")
    if row.max_batch and row.n_items <= row.max_batch:
        return (f"{int(row.n_items)} items in one call, within the engine's max efficient batch of {int(row.max_batch)}:"
                " stage decomposition splits only above it")
    return "one engine call on its input"


def _fmt(per: pd.DataFrame) -> dict[str, float]:
    return dict(zip(per.part, per.span_s))


def explain(sp_row: Any, per: pd.DataFrame, dispatch_s: float, teola: str = "teola") -> list[str]:
    """Generated paragraph and table for one (app, rate) where Teola (scheme ``teola``) is slower
    than the best baseline."""
    app, rate, best = sp_row.app, sp_row.rate_rps, sp_row.best_baseline
    sel = per[(per.app == app) & (per.rate_rps == rate)]
    get = {(s, st): sel[(sel.scheme == s) & (sel.setting == st)] for s in (teola, best) for st in ("one_query", "load")}
    spans = {k: _fmt(v) for k, v in get.items()}
    names = [p for p in dict.fromkeys([*spans[(teola, "load")], *spans[(best, "load")]])
             if max(spans[(teola, "load")].get(p, 0), spans[(best, "load")].get(p, 0)) >= MIN_S]
    t_load, b_load = (sum(spans[(s, "load")].values()) for s in (teola, best))
    t_one, b_one = (sum(spans[(s, "one_query")].values()) for s in (teola, best))
    calls = {s: float(get[(s, "load")].calls.iloc[0]) if len(get[(s, "load")]) else 0.0 for s in (teola, best)}
    out = [f"### {app} at {rate:g} req/s ({sp_row.regime}): Teola {sp_row.speedup_mean:.2f}x against {best}", "",
           f"Mean critical path per query (seed 0): Teola {t_load:.3f} s, {best} {b_load:.3f} s at {rate:g} req/s; "
           f"one query alone {t_one:.3f} s and {b_one:.3f} s. Queueing and contention add "
           f"{t_load - t_one:+.3f} s to Teola's path and {b_load - b_one:+.3f} s to the baseline's. Engine calls on the "
           f"path (decodes excluded): {calls[teola]:.1f} and {calls[best]:.1f}, {dispatch_s * 1000:g} ms dispatch "
           f"each.", "",
           f"| part | Teola, one query (s) | Teola at {rate:g} req/s (s) | {best}, one query (s) | "
           f"{best} at {rate:g} req/s (s) | difference at the rate (s) |", "|---|---|---|---|---|---|"]
    for p in names:
        v = [spans[k].get(p, 0.0) for k in [(teola, "one_query"), (teola, "load"), (best, "one_query"), (best, "load")]]
        out.append(f"| {p} | {v[0]:.3f} | {v[1]:.3f} | {v[2]:.3f} | {v[3]:.3f} | {v[1] - v[3]:+.3f} |")
    tl = spans[(teola, "load")]
    bind = sorted(tl, key=tl.get, reverse=True)[:3]
    trow = get[(teola, "load")].set_index("part")
    out += ["", "Binding parts of Teola's path, and why no pass shortens them: " + "; ".join(
        f"`{p}` {tl[p]:.3f} s ({100 * tl[p] / t_load:.0f}%): {_why(p, trow.loc[p])}" for p in bind) + "."]
    worse = [(p, tl.get(p, 0.0) - spans[(best, "load")].get(p, 0.0)) for p in names]
    worse = sorted([w for w in worse if w[1] >= MIN_S], key=lambda w: -w[1])
    out += ["", _verdict(sp_row, best, teola, bool(worse))]
    better = sorted([w for w in [(p, spans[(best, "load")].get(p, 0.0) - tl.get(p, 0.0)) for p in names]
                     if w[1] >= MIN_S], key=lambda w: -w[1])
    chains = sum(v for k, v in tl.items() if k.split(":")[1] in ("decode", "prefill"))
    paper = _paper(str(getattr(sp_row, "paper_speedup", "")), sp_row.regime)
    if paper:
        out += ["", f"Against the paper's {paper:.2f}x: {best} would need {paper * t_load:.3f} s for this Teola path of "
                f"{t_load:.3f} s, {paper * t_load - b_load:.3f} s more than its own path; the LLM prefills and decodes, "
                f"which every scheme runs as the same chains, already take {chains:.3f} s ({100 * chains / t_load:.0f}%) "
                "of Teola's path, so no graph pass has that much to hide."]
    if worse:
        out += ["", "Where Teola's path is longer than the baseline's: " + "; ".join(
            f"`{p}` +{d:.3f} s" for p, d in worse) + ". Where it is shorter (the passes' gain): " +
            ("; ".join(f"`{p}` -{d:.3f} s" for p, d in better) or "nowhere") + "."]
    return out + [""]


def _verdict(sp_row: Any, best: str, teola: str, longer: bool) -> str:
    """The graph's reason, from the cell's numbers: which passes the optimiser applied, and what the
    baseline's prefix cache is worth (Teola runs with the baseline's engine features)."""
    applied = getattr(sp_row, "passes", "") or ""
    head = f"Passes applied at this rate: {applied.replace('+', ', ')}. " if applied else ""
    nc, nc_s = getattr(sp_row, "no_cache_speedup", float("nan")), getattr(sp_row, "no_cache_scheme", "")
    cache = (f"Both run LLM engines with a prefix cache (`{teola}` against {best}); on the paper's engines, "
             f"without it (`{nc_s}`), Teola is {nc:.2f}x. " if nc == nc and nc_s != teola else
             "Both run the same LLM engines (no prefix cache). ")
    if sp_row.speedup_mean >= 1.0:
        return head + cache + f"Teola is ahead of {best} here ({sp_row.speedup_mean:.2f}x); the table says by which parts."
    if longer:
        return head + cache + "The gap is in the parts below where Teola's path is longer."
    return (head + cache + f"No part of Teola's path is {1000 * MIN_S:.0f} ms or more longer than the baseline's: "
            f"on this graph the two run the same chains, and Teola's mean is {100 * (1 - sp_row.speedup_mean):.2f}% "
            f"above the baseline's, inside the per-seed range [{sp_row.speedup_min:.3f}-{sp_row.speedup_max:.3f}]x.")


def _paper(text: str, regime: str) -> float | None:
    """The paper's speedup for a regime from ``"2.09x (low) / 2.03x (high)"`` (a range: its low end)."""
    import re
    xs = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)(?:-\d+(?:\.\d+)?)?x", text)]
    if not xs:
        xs = [float(x) for x in re.findall(r"\d+\.\d+", text)][:1]
    return (xs[1] if regime == "high" and len(xs) > 1 else xs[0]) if xs else None


def explained(speedup: float, saturated: bool, regime: str) -> bool:
    """The cells whose critical paths are compared: every unsaturated one where Teola is slower than
    the best baseline, and each app's high rate (where the paper states its figure)."""
    return not saturated and (speedup < 1.0 or regime == "high")


def markdown(sp: pd.DataFrame, per: pd.DataFrame, dispatch_s: float) -> list[str]:
    rows = [r for r in sp.itertuples() if explained(r.speedup_mean, r.saturated, r.regime)]
    if not rows or per.empty:
        return []
    out = ["## Why Teola is slower where it is (critical paths, generated)", "",
           "For each unsaturated (app, rate) where Teola's mean is above the best baseline's, and at each app's "
           "high rate (the paper's figure): both schemes' "
           "critical paths (from the output that finished last back through the parent that finished last; "
           "each node's span is its ready-to-done time, queueing and dispatch included, so the spans sum to the "
           "latency), per part (component:primitive family), mean over the cell's queries, seed 0. "
           "Teola is the headline one of each cell, with the best baseline's engine features. "
           "(`experiments/kinds/_teola_critical.py`)", ""]
    for r in rows:
        out += explain(r, per, dispatch_s, r.teola_scheme)
    return out
