"""Every pass on hand-built graphs; failures leave the graph unchanged; fixed point; cache."""
from __future__ import annotations

import pytest

from conftest import make_graph
from orchestrator.graph import Graph, GraphError
from orchestrator.passes import (ALL_PASSES, DecodePipelining, DependencyPruning, GraphCache, PrefillSplit,
                                 StageDecomposition, optimize)
from orchestrator.rewrite import Pass, PassContext
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.template import Component, QueryConfig

CTX = PassContext({"emb": 4, "db": 100, "llm": 8})


def inp(field="question", n=1):
    return Node(f"in:{field}", Kind.INPUT, "input", None, {}, {"field": field}, n_items=n)


def test_pruning_drops_edges_without_data_and_keeps_data_edges():
    a, b = inp(), Node("b", Kind.EMBEDDING, "c", "emb", {"texts": Ref("in:question", transform="as_list")})
    c = Node("c", Kind.EMBEDDING, "c2", "emb", {"texts": Ref("in:question", transform="as_list")})
    g = make_graph([a, b, c], extra_edges={("b", "c")}, outputs=("b", "c"))
    g2 = DependencyPruning().apply(g, CTX)
    assert ("b", "c") not in g2.edges and ("in:question", "c") in g2.edges
    assert DependencyPruning().apply(g2, CTX) is g2  # nothing left to prune


def _index_graph(n=10):
    chunks = inp("chunks", n)
    e = Node("e", Kind.EMBEDDING, "idx", "emb", {"texts": Ref("in:chunks")}, n_items=n, batchable=True,
             elementwise=("texts",))
    i = Node("i", Kind.INGESTION, "idx", "db", {"texts": Ref("in:chunks"), "vectors": Ref("e")}, n_items=n,
             batchable=True, elementwise=("texts", "vectors"))
    return make_graph([chunks, e, i])


def test_stage_decomposition_splits_by_max_batch_and_pipelines_consumer():
    g = _index_graph(10)
    g1 = StageDecomposition().apply(g, CTX)
    stages = [n for n in g1.nodes.values() if n.kind == Kind.EMBEDDING]
    assert sorted(n.n_items for n in stages) == [2, 4, 4]
    assert [(n.inputs["texts"].lo, n.inputs["texts"].hi) for n in sorted(stages, key=lambda n: n.id)] == \
        [(0, 4), (4, 8), (8, 10)]
    g2 = optimize(g, [StageDecomposition()], CTX).graph
    ingests = sorted((n for n in g2.nodes.values() if n.kind == Kind.INGESTION), key=lambda n: n.id)
    assert len(ingests) == 3                      # pushed through: ingest stage j reads embed stage j
    assert all(n.inputs["vectors"].node.startswith("e/s") for n in ingests)
    assert g2.nodes[g2.outputs[0]].kind == Kind.AGGREGATE   # sync point for the consumers


def test_stage_decomposition_leaves_small_or_unbatchable_nodes():
    g = _index_graph(4)
    assert StageDecomposition().apply(g, CTX) is g
    g = _index_graph(10)
    assert StageDecomposition().apply(g, PassContext({})) is g   # no profiled limit: no split


def _rag_prompt_graph():
    q, ctx = inp(), Node("s", Kind.SEARCHING, "search", "db", {"queries": Ref("in:question", transform="as_list")},
                         {"top_k": 2})
    p = Node("p", Kind.PREFILLING, "syn", "llm", {"segments": (Lit("instr words"), Ref("in:question"), Ref("s"))},
             {"kv_chain": "d"})
    d = Node("d", Kind.DECODING, "syn", "llm", {"kv": Ref("p")}, {"kv_chain": "d", "fmt": "text", "output_tokens": 4})
    return make_graph([q, ctx, p, d])


def test_prefill_split_keeps_causal_prefix():
    g = _rag_prompt_graph()
    g2 = PrefillSplit().apply(g, CTX)
    pp, fp = g2.nodes["p/partial"], g2.nodes["p/full"]
    assert pp.kind == Kind.PARTIAL_PREFILLING and fp.kind == Kind.FULL_PREFILLING
    assert len(pp.inputs["segments"]) == 2 and fp.inputs["segments"] == (Ref("s"),)
    assert g2.parents["p/partial"] == ["in:question"]          # not waiting on retrieval
    assert g2.nodes["d"].inputs["kv"] == Ref("p/full")


def test_prefill_split_never_splits_a_middle_part():
    q = inp()
    s = Node("s", Kind.SEARCHING, "search", "db", {"queries": Ref("in:question", transform="as_list")}, {"top_k": 2})
    # late segment first: the ready question comes after it, so no prefix is ready
    p = Node("p", Kind.PREFILLING, "syn", "llm", {"segments": (Ref("s"), Ref("in:question"))}, {"kv_chain": "d"})
    d = Node("d", Kind.DECODING, "syn", "llm", {"kv": Ref("p")}, {"kv_chain": "d", "fmt": "text", "output_tokens": 4})
    g = make_graph([q, s, p, d])
    assert PrefillSplit().apply(g, CTX) is g
    # all segments ready: nothing to split either
    p2 = p.evolve(inputs={"segments": (Lit("x"), Ref("in:question"))})
    g = make_graph([q, p2, d])
    assert PrefillSplit().apply(g, CTX) is g


def _expansion_graph():
    q = inp()
    p = Node("p", Kind.PREFILLING, "exp", "llm", {"segments": (Lit("i"), Ref("in:question"))}, {"kv_chain": "d"})
    d = Node("d", Kind.DECODING, "exp", "llm", {"kv": Ref("p")},
             {"kv_chain": "d", "fmt": "json_list", "output_tokens": 12, "n_items": 3}, splittable=True)
    e = Node("e", Kind.EMBEDDING, "qe", "emb", {"texts": Ref("d", transform="json_items")}, n_items=3,
             batchable=True, elementwise=("texts",))
    return make_graph([q, p, d, e])


def test_decode_pipelining_streams_each_item_to_its_own_consumer():
    g = _expansion_graph()
    g2 = DecodePipelining().apply(g, CTX)
    pieces = [n for n in g2.nodes.values() if n.kind == Kind.PARTIAL_DECODING]
    assert sorted(p.piece for p in pieces) == [0, 1, 2] and all(p.stream_of == "d" for p in pieces)
    embeds = [n for n in g2.nodes.values() if n.kind == Kind.EMBEDDING]
    assert len(embeds) == 3 and all(n.n_items == 1 for n in embeds)
    assert g2.nodes[g2.outputs[0]].kind == Kind.AGGREGATE


def test_decode_pipelining_ignores_unsplittable_decodes():
    g = _expansion_graph()
    d = g.nodes["d"].evolve(splittable=False)
    g = make_graph([g.nodes["in:question"], g.nodes["p"], d, g.nodes["e"]])
    assert DecodePipelining().apply(g, CTX) is g


class _Broken(Pass):
    """Rewrites half the graph, then fails."""
    name = "broken"

    def apply(self, g, ctx):
        from orchestrator.graph import GraphEditor
        ed = GraphEditor.of(g)
        ed.remove(next(iter(g.nodes)))
        raise RuntimeError("boom")


class _Invalid(Pass):
    """Produces a graph with a dangling ref (freeze must refuse it)."""
    name = "invalid"

    def apply(self, g, ctx):
        from orchestrator.graph import GraphEditor
        ed = GraphEditor.of(g)
        ed.remove("p")
        return ed.freeze()


@pytest.mark.parametrize("bad", [_Broken(), _Invalid()])
def test_failing_pass_leaves_graph_unchanged(bad):
    g = _rag_prompt_graph()
    before = g.signature()
    res = optimize(g, [bad], CTX)
    assert res.graph is g and g.signature() == before
    assert res.failures and res.failures[0][0] == bad.name
    res2 = optimize(g, [bad, PrefillSplit()], CTX)   # the other passes still run
    assert "p/full" in res2.graph.nodes


def test_graph_validation_rejects_missing_data_edge_and_cycles():
    a = inp()
    b = Node("b", Kind.EMBEDDING, "c", "emb", {"texts": Ref("in:question", transform="as_list")})
    with pytest.raises(GraphError):
        Graph({"in:question": a, "b": b}, frozenset(), ("b",)).validate()
    with pytest.raises(GraphError):
        Graph({"in:question": a, "b": b}, frozenset({("in:question", "b"), ("b", "in:question")}), ("b",)).validate()


def test_optimize_reaches_fixed_point_and_cache_reuses_graphs():
    from orchestrator.apps import load_app
    app = load_app("advanced_rag")
    t, cfg = app.template(), app.query
    res = optimize(__import__("orchestrator").build_pgraph(t, cfg), ALL_PASSES, CTX)
    for p in ALL_PASSES:
        assert p.apply(res.graph, CTX) is res.graph
    cache = GraphCache()
    g1 = cache.get(t, cfg, ALL_PASSES, CTX)
    g2 = cache.get(t, QueryConfig(**cfg.model_dump()), ALL_PASSES, CTX)
    assert g1 is g2 and cache.hits == 1 and cache.misses == 1
    cache.get(t, cfg.model_copy(update={"doc_tokens": 9000}), ALL_PASSES, CTX)
    assert cache.misses == 2


def test_template_declaration_chains_with_rshift_and_rejects_duplicates():
    a = Component("a", op="embed", engine="emb", batchable=True, uses={"texts": "input.question"})
    b = Component("b", op="search", engine="db", uses={"queries": "a.vectors"})
    t = (a >> b).named("t")
    assert [c.name for c in t.components] == ["a", "b"]
    with pytest.raises(ValueError):
        t >> a
