"""Reranking pipelining (outputs identical to one reranking), the cost-model rule of prefill
splitting, the JSON list's closing point, and the contextual baseline's worker limit."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from conftest import make_graph
from orchestrator import build_pgraph, load_app, ops
from orchestrator.engines import LinearLLMProfile, load_engine_spec
from orchestrator.jsonstream import stream_pieces
from orchestrator.passes import ALL_PASSES, PrefillSplit, RerankPipelining, optimize, passes_named
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.rewrite import PassContext, worthwhile_prefix_tokens
from orchestrator.runtime import pass_context
from orchestrator.schemes import get_scheme


def test_merging_partial_rerankings_equals_one_reranking():
    rng = np.random.default_rng(1)
    pool = [f"t{i}" for i in range(40)]
    for _ in range(50):
        parts = [list(rng.choice(pool, size=int(rng.integers(1, 12)), replace=False)) for _ in range(3)]
        parts[2] += parts[0][:2]                                  # duplicates across parts
        top_n = int(rng.integers(1, 6))
        scored = [ops.rerank("q", [p], top_n, scored=True) for p in parts]
        assert ops.aggregate(scored, "topk", top_n=top_n) == ops.rerank("q", parts, top_n)


def test_a_simulated_reranking_is_priced_by_the_distinct_candidates_it_scores():
    from orchestrator.engines import build_instances
    from orchestrator.engines.base import Invocation
    rr = build_instances(load_engine_spec("cross-encoder-minilm_cpu"))[0]
    a, b = [f"a{i} x y" for i in range(6)], [f"b{i} x y" for i in range(6)]
    inv = lambda cands: Invocation("r", Kind.RERANKING, {"query": "q w", "candidates": cands}, {"top_n": 3}, None, 18)
    # three searches that found the same six chunks: six pairs scored, as the real reranker scores them
    assert rr.estimate_s([inv([a, a, a])]) == pytest.approx(rr.estimate_s([inv([a])]))
    assert rr.estimate_s([inv([a, b, a])]) == pytest.approx(rr.estimate_s([inv([a + b])]))
    assert rr.estimate_s([inv([a, b])]) > rr.estimate_s([inv([a])])


def test_rerank_pipelining_reranks_each_expanded_query_and_merges_top_k():
    app = load_app("advanced_rag")
    ctx = pass_context(app.build_engines())
    g = optimize(build_pgraph(app.template(), app.query), ALL_PASSES, ctx).graph
    parts = [n for n in g.nodes.values() if n.kind == Kind.RERANKING]
    assert len(parts) == app.query.n_expanded_queries
    assert all(n.params["scored"] and n.n_items == app.query.fetch_k for n in parts)
    merge = [n for n in g.nodes.values() if n.kind == Kind.AGGREGATE and n.params.get("mode") == "topk"]
    assert len(merge) == 1 and merge[0].params["top_n"] == app.query.top_k
    # each part reads only its own expanded query's search
    srcs = {p.inputs["candidates"].node for p in parts}
    assert len(srcs) == len(parts) and all(g.nodes[s].kind == Kind.SEARCHING for s in srcs)
    assert RerankPipelining().apply(g, ctx) is g                  # fixed point


def test_rerank_pipelining_leaves_a_single_search_alone():
    app = load_app("contextual_rag")
    ctx = pass_context(app.build_engines())
    g = optimize(build_pgraph(app.template(), app.query), ALL_PASSES, ctx).graph
    assert g.count(Kind.RERANKING) == 1


def _prompt_graph(prefix_words: int):
    q = Node("in:question", Kind.INPUT, "input", None, {}, {"field": "question", "tokens": 24})
    s = Node("s", Kind.SEARCHING, "search", "db", {"queries": Ref("in:question", transform="as_list")}, {"top_k": 2})
    p = Node("p", Kind.PREFILLING, "syn", "llm",
             {"segments": (Lit(" ".join(["w"] * prefix_words)), Ref("in:question"), Ref("s"))}, {"kv_chain": "d"})
    d = Node("d", Kind.DECODING, "syn", "llm", {"kv": Ref("p")}, {"kv_chain": "d", "fmt": "text", "output_tokens": 4})
    return make_graph([q, s, p, d])


def test_prefill_split_only_where_the_cost_model_says_the_prefix_pays():
    ctx = PassContext({}, {"llm": 181})
    assert PrefillSplit().apply(_prompt_graph(64), ctx).count(Kind.PARTIAL_PREFILLING) == 0   # 64 + 24 < 181
    assert PrefillSplit().apply(_prompt_graph(160), ctx).count(Kind.PARTIAL_PREFILLING) == 1  # 160 + 24 >= 181
    assert PrefillSplit().apply(_prompt_graph(1), PassContext()).count(Kind.PARTIAL_PREFILLING) == 1  # no model


def test_worthwhile_prefix_is_where_the_saved_compute_reaches_a_pass_fixed_cost():
    prof = LinearLLMProfile(prefill_base_ms=40.0, prefill_per_token_ms=0.2, prefill_attn_ms=0.0,
                            decode_base_ms=10, decode_per_seq_ms=0, decode_per_kctx_ms=0)
    assert worthwhile_prefix_tokens(prof) == 200                    # 0.2 ms x 200 = 40 ms
    llama = load_engine_spec("llama-2-7b_rtx3090").profile.build()
    assert 175 <= worthwhile_prefix_tokens(llama) <= 185             # the paper's 200-token prefix pays
    # background partials never add a pass anyone waits for: one KV block is enough
    assert worthwhile_prefix_tokens(llama, background=True, block_tokens=16) == 16


def test_which_prefixes_are_split_depends_on_how_the_engine_runs_partials():
    for name, foreground, background in [("advanced_rag", 0, 3), ("naive_rag", 0, 4), ("naive_rag_ayo", 1, 1),
                                         ("advanced_rag_ayo", 1, 1)]:
        app = load_app(name)
        engines = app.build_engines()
        g = optimize(build_pgraph(app.template(), app.query), ALL_PASSES, pass_context(engines)).graph
        assert g.count(Kind.PARTIAL_PREFILLING) == background, name       # the simulated core: background
        for e in engines["llm"]:
            e.background_partials = False                                    # a runtime that runs them as work
        g = optimize(build_pgraph(app.template(), app.query), ALL_PASSES, pass_context(engines)).graph
        assert g.count(Kind.PARTIAL_PREFILLING) == foreground, name


def test_json_list_closes_early_and_the_rest_is_ignored():
    text = ops.generate(("kv",), fmt="json_list", n_tokens_out=200, n_items=3, close_tokens=76)
    items = ops.json_prefix(text)
    assert len(items) == 3 and len(text.split()) > 3 * 24        # free text after the list
    steps = [st for st, _ in stream_pieces(text, 200, 76)]
    assert steps[-1] == 76 and steps == sorted(steps) and steps[0] < 30
    assert [el for _, el in stream_pieces(text, 200, 76)] == items
    whole = ops.generate(("kv",), fmt="json_list", n_tokens_out=72, n_items=3)
    assert json.loads(whole) == ops.json_prefix(whole)               # no close: the list is the output
    assert stream_pieces(whole, 72)[-1][0] == 72


def test_expansion_decode_stops_at_the_closing_point_unless_told_to_run_on():
    app = load_app("advanced_rag")
    g = build_pgraph(app.template(), app.query)
    d = g.nodes["expansion/decode"]
    assert (d.params["output_tokens"], d.params["close_tokens"]) == (76, 76)        # decode_stop: structure
    comps = tuple(replace(c, params={**c.params, "decode_stop": "max_tokens"})
                  if c.name == "expansion" else c for c in app.components)
    g2 = build_pgraph(app.model_copy(update={"components": comps}).template(), app.query)
    d2 = g2.nodes["expansion/decode"]
    assert (d2.params["output_tokens"], d2.params["close_tokens"]) == (200, 76)


def test_contextual_baseline_keeps_llamaindex_workers_in_flight():
    app = load_app("contextual_rag")
    ctx = pass_context(app.build_engines())
    sch = get_scheme("llamadistpc-to")
    g = optimize(build_pgraph(app.template(), app.query), passes_named(sch.passes), ctx).graph
    n = app.query.n_chunks
    assert n > 4
    for i in range(n):
        parents = set(g.parents[f"contextualize/c{i}_prefill"])
        assert (f"contextualize/c{i - 4}_decode" in parents) == (i >= 4)
        assert f"contextualize/c{i - 1}_decode" not in parents          # 4 in flight, not 1
    teola = optimize(build_pgraph(app.template(), app.query), ALL_PASSES, ctx).graph
    assert not any(p.endswith("_decode") for p in teola.parents["contextualize/c5_prefill"])


def test_prefix_cache_scheme_is_teola_with_the_baselines_prefix_caching():
    a, b = get_scheme("teola"), get_scheme("teola+prefix-cache")
    assert a.passes == b.passes and b.prefix_caching and not a.prefix_caching


@pytest.mark.parametrize("name", ["teola", "teola+prefix-cache"])
def test_teola_passes_include_rerank_pipelining(name):
    assert "rerank_pipeline" in get_scheme(name).passes


def test_non_llm_profiles_are_published_or_measured_figures():
    from orchestrator.engines.factory import build_instances
    for name in ["bge-large-en-v1.5", "bge-reranker-large", "pgvector"]:
        spec = load_engine_spec(name)
        assert "PUBLISHED MEASUREMENTS" in spec.provenance and "NetX-lab/Ayo" in spec.provenance
    emb = build_instances(load_engine_spec("bge-large-en-v1.5"))[0]
    assert emb.max_batch_size() == 128                       # Ayo's own stage size (Embedding-sub-i of 128)
    for name in ["all-minilm-l6-v2_cpu", "embedding-reranker-minilm_cpu", "pgvector_cpu"]:
        spec = load_engine_spec(name)
        assert "MEASURED" in spec.provenance and "bench_nonllm" in spec.provenance
