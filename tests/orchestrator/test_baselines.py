"""The baselines run each module as LlamaIndex does (black boxes), LlamaDistPC parallelises only
independent modules; each rule on the apps' graphs."""
from __future__ import annotations

import pytest

from orchestrator import build_pgraph, load_app, simulate
from orchestrator.baselines import LLAMAINDEX_EMBED_BATCH, LlamaIndexModules, ModulePruning
from orchestrator.graph import Graph
from orchestrator.passes import optimize, passes_named
from orchestrator.primitives import Kind
from orchestrator.runtime import pass_context
from orchestrator.schemes import get_scheme


def _graph(app_name: str, scheme: str, **cfg) -> Graph:
    app = load_app(app_name)
    q = app.query.model_copy(update=cfg)
    ctx = pass_context(app.build_engines())
    return optimize(build_pgraph(app.template(), q), passes_named(get_scheme(scheme).passes), ctx).graph


def _reaches(g: Graph, a: str, b: str) -> bool:
    seen, todo = set(), [a]
    while todo:
        n = todo.pop()
        if n == b:
            return True
        if n not in seen:
            seen.add(n)
            todo += g.children[n]
    return False


@pytest.mark.parametrize("scheme", ["llamadist-to", "llamadistpc-po"])
def test_tree_synthesis_leaves_run_one_after_another(scheme):
    g = _graph("naive_rag", scheme)
    for i in range(2):
        assert (f"synthesis/leaf{i}_decode", f"synthesis/leaf{i + 1}_prefill") in g.edges
    e = _graph("naive_rag", "teola")
    leaves = [n for n in e.nodes if n.startswith("synthesis/leaf1_")]
    assert not any(_reaches(e, "synthesis/leaf0_decode", n) for n in leaves)   # Teola: in parallel


def test_document_embedding_in_sequential_batches_of_ten_then_one_ingestion():
    g = _graph("naive_rag", "llamadist-to", doc_tokens=6000)          # 27 chunks
    stages = sorted((n for n in g.nodes.values() if n.kind == Kind.EMBEDDING and n.component == "indexing"),
                    key=lambda n: n.id)
    assert [n.n_items for n in stages] == [10, 10, 7] and LLAMAINDEX_EMBED_BATCH == 10
    for a, b in zip(stages, stages[1:]):
        assert (a.id, b.id) in g.edges
    ingest = [n for n in g.nodes.values() if n.kind == Kind.INGESTION]
    assert len(ingest) == 1 and ingest[0].n_items == 27


def test_expanded_queries_wait_for_whole_json_and_are_retrieved_one_call_each():
    g = _graph("advanced_rag", "llamadist-to")
    assert g.count(Kind.PARTIAL_DECODING) == 0
    qemb = [n for n in g.nodes.values() if n.component == "query_embedding" and n.kind == Kind.EMBEDDING]
    search = [n for n in g.nodes.values() if n.kind == Kind.SEARCHING]
    assert len(qemb) == len(search) == 3 and all(n.n_items == 1 for n in qemb + search)
    assert all("expansion/decode" in g.parents[n.id] for n in qemb)
    # concurrent retriever calls (QueryFusionRetriever, use_async=True): no order among them
    assert not any(_reaches(g, a.id, b.id) for a in search for b in search if a is not b)


def test_llamadistpc_parallelises_independent_modules_only():
    pc, chain = _graph("search_gen", "llamadistpc-to"), _graph("search_gen", "llamadist-to")
    assert not _reaches(pc, "proxy/decode", "judge/prefill")           # judge reads only the question
    assert _reaches(chain, "proxy/decode", "judge/prefill")            # LlamaDist: template order
    assert _reaches(pc, "proxy/decode", "web/search") and _reaches(pc, "judge/decode", "web/search")
    ad = _graph("advanced_rag", "llamadistpc-to")
    assert not _reaches(ad, "indexing/ingest", "expansion/prefill")    # indexing || expansion
    # a module starts only when every module it reads from has finished (black box)
    for s in (n for n in ad.nodes.values() if n.kind == Kind.SEARCHING):
        for e in (n for n in ad.nodes.values() if n.component == "query_embedding"):
            assert _reaches(ad, e.id, s.id)
    # no primitive-level pruning inside a module: the tree leaves stay sequential
    nv = _graph("naive_rag", "llamadistpc-to")
    assert ("synthesis/leaf0_decode", "synthesis/leaf1_prefill") in nv.edges


def test_baseline_rewrites_reach_a_fixed_point_and_keep_outputs():
    app = load_app("advanced_rag")
    g = build_pgraph(app.template(), app.query)
    ctx = pass_context(app.build_engines())
    res = optimize(g, (LlamaIndexModules(), ModulePruning()), ctx)
    assert not res.failures
    for p in (LlamaIndexModules(), ModulePruning()):
        assert p.apply(res.graph, ctx) is res.graph
    cfgs, arr = [app.query] * 2, [0.0, 0.5]
    ref = simulate(app.template(), cfgs, arr, app.build_engines(), scheme="teola-no-par-pipe")
    got = simulate(app.template(), cfgs, arr, app.build_engines(prefix_caching=True), scheme="llamadistpc-to")
    assert [r.outputs for r in got] == [r.outputs for r in ref]


def test_sequential_leaves_make_the_chain_slower_on_one_query():
    app = load_app("naive_rag")
    lat = {s: simulate(app.template(), [app.query], [0.0], app.build_engines(prefix_caching=get_scheme(s).prefix_caching),
                       scheme=s)[0].latency_s for s in ["llamadistpc-to", "teola-no-par-pipe", "teola"]}
    assert lat["teola"] < lat["teola-no-par-pipe"] < lat["llamadistpc-to"]


@pytest.mark.parametrize("scheme", ["llamadist-open-to", "llamadistpc-open-po"])
def test_opened_baselines_run_leaves_and_contexts_at_once_and_embed_in_one_call(scheme):
    g = _graph("naive_rag", scheme, doc_tokens=6000)                   # 27 chunks
    leaves = [n for n in g.nodes if n.startswith("synthesis/leaf1_")]
    assert not any(_reaches(g, "synthesis/leaf0_decode", n) for n in leaves)   # TreeSummarize(use_async=True)
    emb = [n for n in g.nodes.values() if n.kind == Kind.EMBEDDING and n.component == "indexing"]
    assert [n.n_items for n in emb] == [27]                                    # embed_batch_size >= chunks
    c = _graph("contextual_rag", scheme)
    assert not any(_reaches(c, "contextualize/c0_decode", n) for n in c.nodes if n.startswith("contextualize/c4_"))
    d = _graph("contextual_rag", scheme.replace("-open", ""))               # the default: 4 in flight
    assert _reaches(d, "contextualize/c0_decode", "contextualize/c4_prefill")
    a = _graph("advanced_rag", scheme)                                          # still no decode pipelining
    assert a.count(Kind.PARTIAL_DECODING) == 0


def test_only_schemes_name_any_pass_subset():
    from orchestrator.schemes import ALL, only_scheme
    assert only_scheme(()) == "teola-no-par-pipe" and get_scheme(only_scheme(("prune",))).passes == ("prune",)
    name = only_scheme(("rerank_pipeline", "prune"))                          # written in ALL's order
    assert name == "teola-only-prune+rerank_pipeline" and get_scheme(name).passes == ("prune", "rerank_pipeline")
    with pytest.raises(KeyError):
        get_scheme("teola-only-rerank_pipeline+prune")
    with pytest.raises(KeyError):
        only_scheme(("nope",))
    assert set(get_scheme(only_scheme(ALL)).passes) == set(get_scheme("teola").passes)


def test_expansion_decode_stops_where_its_list_closes():
    g = _graph("advanced_rag", "llamadist-to")
    d = g.nodes["expansion/decode"]
    assert d.params["output_tokens"] == d.params["close_tokens"] == 76        # not max_tokens = 200
    ayo = load_app("advanced_rag_ayo")                                          # Ayo's logged run: decode_stop max_tokens
    ga = optimize(build_pgraph(ayo.template(), ayo.query), (), pass_context(ayo.build_engines())).graph
    assert ga.nodes["expansion/decode"].params["output_tokens"] == 200
