"""With deterministic engines the e-graph computes exactly what the p-graph computes, for every
app, configuration and scheme."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator import build_pgraph, known_apps, load_app, simulate
from orchestrator.passes import ALL_PASSES, optimize
from orchestrator.runtime import make_payload, pass_context
from orchestrator.schemes import SCHEMES
from orchestrator.primitives import Kind

VARIANTS = [
    {},
    {"synthesis_mode": "one_shot"},
    {"synthesis_mode": "tree"},
    {"synthesis_mode": "refine", "top_k": 4},
    {"n_expanded_queries": 5, "fetch_k": 4},
    {"doc_tokens": 1500, "chunk_size_tokens": 128, "chunk_overlap_tokens": 16},
]


def _configs(app):
    out = []
    for v in VARIANTS:
        if "doc_tokens" in v and app.query.doc_tokens == 0:
            continue
        out.append(app.query.model_copy(update=v))
    return out


@pytest.mark.parametrize("app_name", known_apps())
def test_egraph_outputs_equal_pgraph_outputs(app_name):
    app = load_app(app_name)
    t = app.template()
    cfgs = _configs(app)
    rng = np.random.default_rng(7)
    payloads = [make_payload(c, rng) for c in cfgs]
    arrivals = [0.3 * i for i in range(len(cfgs))]
    ref = simulate(t, cfgs, arrivals, app.build_engines(), scheme="llamadist-to", payloads=payloads)
    for name, sch in SCHEMES.items():
        got = simulate(t, cfgs, arrivals, app.build_engines(prefix_caching=sch.prefix_caching),
                       scheme=sch, payloads=payloads)
        assert [r.outputs for r in got] == [r.outputs for r in ref], name


@pytest.mark.parametrize("app_name", known_apps())
def test_passes_rewrite_every_app(app_name):
    app = load_app(app_name)
    ctx = pass_context(app.build_engines())
    g = build_pgraph(app.template(), app.query)
    e = optimize(g, ALL_PASSES, ctx)
    assert not e.failures and "prune" in e.applied
    assert len(e.graph.edges - g.edges) or len(e.graph.edges) < len(g.edges)
    if app_name == "advanced_rag":
        assert e.graph.count(Kind.PARTIAL_DECODING) == app.query.n_expanded_queries
        # background partial prefills (the simulated core) make every ready prefix worth a split:
        # one per refine step, whose instruction + question are ready before its context
        assert e.graph.count(Kind.PARTIAL_PREFILLING) == app.query.top_k
        assert e.graph.count(Kind.RERANKING) == app.query.n_expanded_queries    # one per expanded query
    if app_name.endswith("_ayo"):
        assert e.graph.count(Kind.PARTIAL_PREFILLING) == 1     # Ayo's 678-token prefix is worth it
    if app_name == "naive_rag_ayo":
        # 666 passages in stages of the embedder's max efficient batch (128), as Ayo's own log
        # shows (Embedding-sub-0..5 of 128 texts), plus the question's embedding
        assert e.graph.count(Kind.EMBEDDING) == 6 + 1
