"""Per-call costs of the real CPU run (``teola_real_cpu``'s ``calls.parquet``): for every engine
invocation of its blocks, where its time went between becoming ready and being completed by the
graph scheduler (``orchestrator.runtime.realtime.RealtimeReport.calls``)."""
from __future__ import annotations

import pandas as pd

#: (column, label, definition) of the per-call table, medians in ms
PHASES = (("wait", "queue", "ready -> batch dispatched (instance busy)"),
          ("hop_in", "dispatch", "dispatched -> batch starts on its worker thread"),
          ("wall", "batch wall", "the batch on the instance"),
          ("cpu", "batch CPU", "the batch thread's CPU time (pgvector: the client's only)"),
          ("hop_out", "hand-back", "batch ended -> the graph scheduler completed the node"))


def phases(calls: pd.DataFrame) -> pd.DataFrame:
    """``calls`` with each phase's duration (seconds) added."""
    return calls.assign(wait=calls.dispatch_s - calls.ready_s, hop_in=calls.start_s - calls.dispatch_s,
                        wall=calls.end_s - calls.start_s, cpu=calls.cpu_s, hop_out=calls.done_s - calls.end_s)


def per_kind(calls: pd.DataFrame, schemes: dict[str, list[str]]) -> pd.DataFrame:
    """Per (app, scheme, primitive kind) for the schemes listed per app: calls per query, mean
    invocations per batch, and each phase's median in ms."""
    c = phases(calls)
    c = c[[s in schemes.get(a, ()) for a, s in zip(c.app, c.scheme)]]
    per_q = c.groupby(["app", "scheme"]).apply(lambda g: len(g[["repeat", "rate_rps", "qid"]].drop_duplicates()),
                                               include_groups=False)
    g = c.groupby(["app", "scheme", "kind"], sort=False)
    out = g.size().rename("calls").to_frame().join(g.batch.mean())
    out["calls_per_query"] = out.calls / per_q.reindex(out.index.droplevel("kind")).to_numpy()
    for col, _, _ in PHASES:
        out[col + "_ms"] = g[col].median() * 1e3
    return out.reset_index()


def markdown(calls: pd.DataFrame, summary: pd.DataFrame) -> list[str]:
    """The per-call table for Teola and each app's best baselines (summary.md's section)."""
    teola = summary.scheme.iloc[0]
    schemes = {a: [teola, *dict.fromkeys(g.best_baseline)] for a, g in summary.groupby("app", sort=False)}
    t = per_kind(calls, schemes)
    lines = ["", "Per-call costs (`calls.parquet`, every block): per primitive kind, calls per query and "
             "invocations per batch, then medians (ms) of " + "; ".join(f"{lab}: {d}" for _, lab, d in PHASES) + ".",
             "", "| app | scheme | kind | calls / query | per batch | " + " | ".join(lab for _, lab, _ in PHASES) + " |",
             "|---|---|---|---|---|" + "---|" * len(PHASES)]
    for r in t.itertuples():
        vals = " | ".join(f"{getattr(r, col + '_ms'):.1f}" for col, _, _ in PHASES)
        lines.append(f"| {r.app} | {r.scheme} | {r.kind} | {r.calls_per_query:.1f} | {r.batch:.1f} | {vals} |")
    return lines
