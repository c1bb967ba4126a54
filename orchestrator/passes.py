"""The rule-based passes (the paper's four plus reranking pipelining), applied to a fixed point,
and the optimised-graph cache.

Each pass is an object with ``apply(graph, ctx) -> graph``: it returns the same object when its
rule matches nothing, otherwise a new validated graph. A pass edits a copy, so if it raises (or
produces an invalid graph) the optimiser keeps the graph it had: never half-rewritten.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from orchestrator.baselines import BASELINE_PASSES
from orchestrator.construct import build_pgraph
from orchestrator.graph import Graph, GraphEditor
from orchestrator.ops import n_tokens
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.rewrite import Pass, PassContext, decompose, push_through, slice_ref, split_with_aggregate
from orchestrator.template import QueryConfig, Template


class DependencyPruning(Pass):
    """Pass 1: drop edges that carry no data (conservative template-order edges)."""
    name = "prune"

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        keep = frozenset((s, d) for s, d in g.edges if s in g.nodes[d].sources())
        if keep == g.edges:
            return g
        ed = GraphEditor.of(g)
        ed.edges = set(keep)
        return ed.freeze()


class StageDecomposition(Pass):
    """Pass 2: split a batchable primitive larger than its engine's max efficient batch into
    micro-batch stages (an Aggregate syncs them), and push a stage split through an element-wise
    batchable consumer so the stages pipeline (embed stage i feeds ingest stage i)."""
    name = "stage"

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        for nid in g.order:
            n = g.nodes[nid]
            if not (n.batchable and n.elementwise) or n.kind in (Kind.AGGREGATE, Kind.INPUT):
                continue
            agg = self._split_source(g, n)
            if agg is not None:
                return push_through(g, n, agg)
            cap = ctx.cap(n.engine)
            if cap is not None and n.n_items > cap:
                return decompose(g, n, cap)
        return g

    @staticmethod
    def _split_source(g: Graph, n: Node) -> Node | None:
        for port in n.elementwise:
            v = n.inputs[port]
            if isinstance(v, Ref) and v.lo is None and v.index is None and v.transform is None:
                src = g.nodes[v.node]
                if src.kind == Kind.AGGREGATE and src.params.get("split") \
                        and sum(src.params["part_sizes"]) == n.n_items:
                    return src
        return None


def _early(seg: object, g: Graph) -> bool:
    return isinstance(seg, Lit) or (isinstance(seg, Ref) and g.nodes[seg.node].kind == Kind.INPUT)


def _seg_tokens(seg: object, g: Graph) -> int:
    """Tokens of a ready prompt segment: a literal's text, or the part of a query input it names
    (the input's ``params['tokens']`` per item, set by construction; unknown: 0)."""
    if isinstance(seg, Lit):
        return n_tokens(seg.value)
    if not isinstance(seg, Ref):
        return 0
    src = g.nodes[seg.node]
    per = int(src.params.get("tokens", 0))
    if seg.index is not None:
        return per
    lo, hi = seg.lo or 0, src.n_items if seg.hi is None else seg.hi
    return per * max(0, hi - lo)


class PrefillSplit(Pass):
    """Pass 3: prefill the ready prefix of a prompt (PartialPrefilling) while the rest is still
    being produced; FullPrefilling continues the same KV cache. Only a prefix: causal order.
    Only where the engine's cost model says the prefix is worth a pass of its own
    (``ctx.split_min_tokens``, :func:`~orchestrator.rewrite.worthwhile_prefix_tokens`)."""
    name = "prefill_split"

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        for nid in g.order:
            n = g.nodes[nid]
            if n.kind != Kind.PREFILLING:
                continue
            segs = n.inputs["segments"]
            k = 0
            while k < len(segs) and _early(segs[k], g):
                k += 1
            if 0 < k < len(segs) and self._worth_it(g, n, segs[:k], ctx):
                return self._split(g, n, segs, k)
        return g

    @staticmethod
    def _worth_it(g: Graph, n: Node, prefix: tuple, ctx: PassContext) -> bool:
        need = ctx.split_min_tokens.get(n.engine) if n.engine is not None else None
        return need is None or sum(_seg_tokens(s, g) for s in prefix) >= need

    @staticmethod
    def _split(g: Graph, n: Node, segs: tuple, k: int) -> Graph:
        ed = GraphEditor.of(g)
        pp = Node(f"{n.id}/partial", Kind.PARTIAL_PREFILLING, n.component, n.engine,
                  {"segments": segs[:k]}, dict(n.params))
        fp = Node(f"{n.id}/full", Kind.FULL_PREFILLING, n.component, n.engine,
                  {"kv": Ref(pp.id), "segments": segs[k:]}, dict(n.params))
        ed.add(pp)
        ed.add(fp, extra_parents=ed.parents(n.id))
        ed.replace_consumers(n.id, fp.id, skip=[fp.id, pp.id])
        ed.remove(n.id)
        return ed.freeze()


class DecodePipelining(Pass):
    """Pass 4: a splittable decode with a JSON-list output streams each completed item
    (PartialDecoding, found by the incremental JSON parser) to a per-item copy of its
    element-wise consumer, so downstream work starts while decoding goes on."""
    name = "decode_pipeline"

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        for nid in g.order:
            d = g.nodes[nid]
            if d.kind != Kind.DECODING or not d.splittable or d.params.get("fmt") != "json_list":
                continue
            for cid in g.children[nid]:
                c = g.nodes[cid]
                port = self._stream_port(c, nid, d.params["n_items"])
                if port is not None:
                    return self._pipeline(g, d, c, port)
        return g

    @staticmethod
    def _stream_port(c: Node, did: str, n: int) -> str | None:
        if not (c.batchable and c.n_items == n):
            return None
        for port in c.elementwise:
            v = c.inputs[port]
            if isinstance(v, Ref) and v.node == did and v.transform == "json_items" \
                    and v.index is None and v.lo is None:
                return port
        return None

    @staticmethod
    def _pipeline(g: Graph, d: Node, c: Node, port: str) -> Graph:
        ed = GraphEditor.of(g)
        n = d.params["n_items"]
        pieces = []
        for i in range(n):
            pid = f"{d.id}/piece{i}"
            if pid not in ed.nodes:
                ed.add(Node(pid, Kind.PARTIAL_DECODING, d.component, None, {}, {"fmt": "json_list"},
                            stream_of=d.id, piece=i))
            pieces.append(pid)
        parts = []
        for i, pid in enumerate(pieces):
            inputs = dict(c.inputs)
            for p in c.elementwise:
                inputs[p] = Ref(pid) if p == port else slice_ref(c.inputs[p], i, i + 1)
            parts.append(c.evolve(id=f"{c.id}/i{i}", inputs=inputs, n_items=1))
        split_with_aggregate(ed, c, parts, [1] * n)
        return ed.freeze()


class RerankPipelining(Pass):
    """Reranking per part of a split retrieval (beyond the paper's four passes, as Ayo's decode
    pipelining continues through reranking: ``Ayo/opt_pass/decoding_pipeling.py``,
    ``_split_pipeline``, ``Reranking-sub-i`` and an ``AggMode.TOP_K`` aggregator). A reranker
    scores each (query, candidate) pair alone, so the overall top-n is the top-n of the parts'
    scored top-n lists (``ops.merge_top``): each part is reranked as soon as its candidates
    arrive (one per expanded query), outputs identical to one reranking of them all.

    Beyond Ayo (whose ``Reranking-sub-i`` re-score what an earlier part scored): the parts share
    ``params['score_once']`` (the reranking they replace), and the graph scheduler sends each part
    only the candidates no earlier part of the same query was sent (``ops.unscored``,
    ``SimState.ready``), so together they score each distinct candidate once, as the one reranking
    does. Same output: a skipped candidate has the score the earlier part gave it (same query,
    pointwise scores), and if it missed that part's top-n it misses the overall top-n."""
    name = "rerank_pipeline"

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        for nid in g.order:
            r = g.nodes[nid]
            if r.kind != Kind.RERANKING or r.params.get("scored"):
                continue
            c = r.inputs["candidates"]
            if not (isinstance(c, Ref) and c.lo is None and c.index is None and c.transform is None):
                continue
            src = g.nodes[c.node]
            if src.kind == Kind.AGGREGATE and src.params.get("split") and len(src.inputs["parts"]) > 1:
                return self._split(g, r, src)
        return g

    @staticmethod
    def _split(g: Graph, r: Node, agg: Node) -> Graph:
        ed = GraphEditor.of(g)
        sizes = list(agg.params["part_sizes"])
        per_item = r.n_items // max(1, sum(sizes))
        parts = [r.evolve(id=f"{r.id}/p{j}", inputs={**r.inputs, "candidates": part},
                          params={**r.params, "scored": True, "score_once": r.id}, n_items=per_item * size)
                 for j, (part, size) in enumerate(zip(agg.inputs["parts"], sizes))]
        split_with_aggregate(ed, r, parts, sizes, merge={"mode": "topk", "top_n": r.params["top_n"]})
        if not ed.children(agg.id) and agg.id not in ed.outputs:
            ed.remove(agg.id)          # the concat is no longer read
        return ed.freeze()


ALL_PASSES: tuple[Pass, ...] = (DependencyPruning(), StageDecomposition(), PrefillSplit(), DecodePipelining(),
                                RerankPipelining())
PASSES_BY_NAME: dict[str, Pass] = {p.name: p for p in ALL_PASSES}


def _registry() -> dict[str, Pass]:
    reg = dict(PASSES_BY_NAME)
    for p in BASELINE_PASSES:
        if p.name in reg:
            raise KeyError(f"pass {p.name!r} registered twice")
        reg[p.name] = p
    return reg


def passes_named(names: Sequence[str]) -> tuple[Pass, ...]:
    """Passes by name: the Teola passes and the baselines' module rewrites."""
    reg = _registry()
    unknown = [n for n in names if n not in reg]
    if unknown:
        raise KeyError(f"unknown pass {unknown[0]!r}; known: {', '.join(reg)}")
    return tuple(reg[n] for n in names)


@dataclass(frozen=True)
class OptimizeResult:
    graph: Graph
    applied: tuple[str, ...]
    failures: tuple[tuple[str, str], ...]


def optimize(g: Graph, passes: Sequence[Pass], ctx: PassContext, *, max_rounds: int = 1000) -> OptimizeResult:
    """Apply ``passes`` in order, repeatedly, until none changes the graph."""
    applied: list[str] = []
    failures: list[tuple[str, str]] = []
    broken: set[str] = set()
    for _ in range(max_rounds):
        changed = False
        for p in passes:
            if p.name in broken:
                continue
            try:
                g2 = p.apply(g, ctx)
            except Exception as exc:  # the pass's copy is dropped; g is untouched
                failures.append((p.name, f"{type(exc).__name__}: {exc}"))
                broken.add(p.name)
                continue
            if g2 is not g:
                g, changed = g2, True
                applied.append(p.name)
        if not changed:
            return OptimizeResult(g, tuple(applied), tuple(failures))
    raise RuntimeError(f"passes did not reach a fixed point in {max_rounds} rounds")


class GraphCache:
    """Optimised graphs per (template, configuration shape, passes, engine batch limits)."""

    def __init__(self) -> None:
        self._graphs: dict[tuple, Graph] = {}
        self.hits = 0
        self.misses = 0

    def get(self, template: Template, cfg: QueryConfig, passes: Sequence[Pass], ctx: PassContext) -> Graph:
        key = (template.key(), cfg, tuple(p.name for p in passes), ctx.key())
        g = self._graphs.get(key)
        if g is None:
            self.misses += 1
            g = optimize(build_pgraph(template, cfg), passes, ctx).graph
            self._graphs[key] = g
        else:
            self.hits += 1
        return g
