"""Real vs simulated critical paths of the real CPU run (issue 26): where real naive/advanced RAG
spends the time that ``teola_real_cpu_sim`` does not charge.

Reads a published ``teola_real_cpu`` run (``results/teola_real_cpu/calls.parquet``: every engine
call's ready, dispatch, start, end, done times and batch CPU) and prints, per (app, scheme):

1. the real critical path per part (component:primitive family), mean over the run's queries: from the
   call that completed last back through the call that completed last at or before its ready time
   (calls.parquet has no graph edges; a node is ready when its last parent completes), each span
   ``done - previous done``, as ``experiments/kinds/_teola_critical.py`` does for the simulation;
2. the simulation's path for the same scheme and app (``teola_real_cpu_sim``'s config, one query,
   seeds 0-2);
3. batch wall / batch CPU of every LLM, embedder and reranker batch against the fraction of its run
   that other batches of the same block overlap (the engines share one Python process and 2 cores);
4. the embedder's batch wall and CPU per set of invocations batched together (naive RAG).

    PYTHONPATH=. python experiments/scripts/real_vs_sim_paths.py [RESULTS_DIR]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

FAMILY = {"PREFILLING": "prefill", "PARTIAL_PREFILLING": "prefill", "FULL_PREFILLING": "prefill",
          "DECODING": "decode", "PARTIAL_DECODING": "decode"}
CELLS = {"naive_rag": ["teola", "llamadist-open-to", "llamadistpc-open-to"],
         "advanced_rag": ["teola", "llamadistpc-open-to"]}


def _part(node_id: str, kind: str) -> str:
    return f"{node_id.split('/')[0]}:{FAMILY.get(kind, kind.lower())}"


def real_path(q: pd.DataFrame, arrival_s: float) -> list[tuple[str, float]]:
    """One query's calls (one row per invocation) -> (part, span_s) from arrival to the last done."""
    q = q.sort_values("done_s")
    cur, path = q.iloc[-1], []
    while True:
        before = q[q.done_s <= cur.ready_s + 1e-6]
        prev = before.done_s.max() if len(before) else arrival_s
        path.append((_part(cur.node_id, cur.kind), cur.done_s - prev))
        if not len(before):
            return path[::-1]
        cur = before.iloc[-1]


def real_parts(calls: pd.DataFrame, queries: pd.DataFrame, app: str, scheme: str) -> pd.Series:
    key = ["rate_rps", "repeat", "qid"]
    c = calls[(calls.app == app) & (calls.scheme == scheme)]
    # arrival on the calls' clock (an interleaved run's calls count from their segment's start):
    # the query's last call completes it
    lat = queries[(queries.app == app) & (queries.scheme == scheme)].set_index(key).latency_s
    arr = c.groupby(key).done_s.max() - lat
    rows = [dict(part=p, span_s=s) for k, q in c.groupby(key) for p, s in real_path(q, float(arr.loc[k]))]
    n = c.groupby(["rate_rps", "repeat", "qid"]).ngroups
    return pd.DataFrame(rows).groupby("part", sort=False).span_s.sum() / n


def sim_parts(app: str, scheme: str) -> pd.Series:
    import yaml
    from experiments.kinds import _teola_critical as critical, teola_apps as ta
    cfg = yaml.safe_load(Path("configs/experiments/teola_real_cpu_sim.yaml").read_text())
    p, rows = ta.Params(**cfg["params"]), []
    for seed in (0, 1, 2):
        traces: dict = {}
        ta._simulate(p, app, p.rates_rps[app][0], scheme, 1, seed, traces=traces)
        for q in traces.values():
            rows += [dict(part=f"{n.split('/')[0]}:{critical.FAMILY.get(q.graph.nodes[n].kind, q.graph.nodes[n].kind.value)}",
                          span_s=s) for n, s in critical.critical_path(q)]
    return pd.DataFrame(rows).groupby("part", sort=False).span_s.sum() / 3


def batches(calls: pd.DataFrame) -> pd.DataFrame:
    key = ["app", "scheme", "rate_rps", "repeat", "engine", "instance", "start_s", "end_s"]
    return calls.groupby(key).agg(cpu_s=("cpu_s", "first"), nodes=("node_id", lambda s: "+".join(sorted(s))),
                                  kind=("kind", "first")).reset_index()


def overlap(b: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, g in b.groupby(["app", "scheme", "rate_rps", "repeat"]):
        s, e = g.start_s.to_numpy(), g.end_s.to_numpy()
        for i in range(len(g)):
            ov = np.clip(np.minimum(e, e[i]) - np.maximum(s, s[i]), 0, None)
            ov[i] = 0
            rows.append(dict(engine=g.engine.iat[i], frac=ov.sum() / (e[i] - s[i]),
                             ratio=(e[i] - s[i]) / max(g.cpu_s.iat[i], 1e-6)))
    o = pd.DataFrame(rows)
    o = o[o.engine != "vectordb"]          # pgvector's CPU is the client's only
    o["overlapped"] = pd.cut(o.frac, [-0.01, 0.001, 0.5, 1.0, 9.0], labels=["none", "<50%", "50-100%", ">100%"])
    return o.groupby(["engine", "overlapped"], observed=True).ratio.agg(["size", "median"]).round(3)


def main(root: str = "results/teola_real_cpu") -> None:
    calls, queries = (pd.read_parquet(Path(root) / f"{t}.parquet") for t in ("calls", "queries"))
    for app, schemes in CELLS.items():
        for scheme in schemes:
            t = pd.DataFrame({"real_s": real_parts(calls, queries, app, scheme), "sim_s": sim_parts(app, scheme)}).fillna(0)
            t.loc["total"] = t.sum()
            print(f"\n{app} {scheme}: critical path per part (s, mean per query)\n{t.round(4).to_string()}")
    b = batches(calls)
    print("\nbatch wall / batch CPU by the fraction of its run other batches overlap\n" + overlap(b).to_string())
    e = b[(b.engine == "embedder") & (b.app == "naive_rag")].assign(
        wall_ms=lambda d: (d.end_s - d.start_s) * 1e3, cpu_ms=lambda d: d.cpu_s * 1e3,
        teola=lambda d: d.scheme == "teola")
    print("\nnaive RAG embedder batches (ms, median)\n" + e.groupby(["teola", "nodes"]).agg(
        n=("wall_ms", "size"), wall_ms=("wall_ms", "median"), cpu_ms=("cpu_ms", "median")).round(1).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
