"""Critical paths read off a simulation (``experiments/kinds/_teola_critical.py``): the spans of a
query's path add up to its latency, and the path ends at its last output."""
from __future__ import annotations

import numpy as np

from experiments.kinds import _teola_critical as critical
from orchestrator import load_app, simulate


def test_path_spans_sum_to_latency_and_end_at_the_last_output():
    app = load_app("advanced_rag")
    cfgs = app.query_configs(4, np.random.default_rng(0))
    for scheme in ("teola", "llamadistpc-open-to"):
        traces: dict = {}
        res = simulate(app.template(), cfgs, [0.0, 0.3, 0.6, 0.9], app.build_engines(), scheme=scheme, seed=1,
                       dispatch_overhead_s=0.002, traces=traces)
        for r in res:
            path = critical.critical_path(traces[r.qid])
            assert abs(sum(s for _, s in path) - r.latency_s) < 1e-9
            assert all(s >= -1e-12 for _, s in path)
            assert path[-1][0] in traces[r.qid].graph.outputs
            assert any("expansion/decode" in n for n, _ in path)     # the 76-token expansion decode binds


def test_parts_average_per_query():
    import pandas as pd
    df = pd.DataFrame([{"qid": q, "part": "a:decode", "kind": "decoding", "engine": "llm", "n_items": 1,
                        "max_batch": 8, "span_s": 1.0 + q} for q in range(2)]).assign(
        app="x", rate_rps=1.0, scheme="teola", setting="load")
    per = critical.parts(df)
    assert len(per) == 1 and abs(per.span_s.iloc[0] - 1.5) < 1e-12 and per.calls.iloc[0] == 0
