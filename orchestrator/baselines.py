"""How the baselines run each module: LlamaIndex modules as black boxes (LlamaDist), and
LlamaDistPC's manual parallelism of independent *modules*.

These are graph rewrites like the passes (``orchestrator.rewrite.Pass``: ``apply(graph, ctx) ->
graph``, same object when
nothing matches), applied to the p-graph of the baseline schemes only. They never change what a
query computes, only when each primitive may start. What LlamaIndex does inside a module, from
its source (run-llama/llama_index, llama-index-core):

* tree synthesis: ``response_synthesizers/tree_summarize.py``, ``TreeSummarize.get_response``:
  with the default ``use_async=False`` the leaf summaries are
  ``[self._llm.predict(...) for text_chunk in text_chunks]``, one LLM call after another, then
  the root call. Refine (``refine.py``) is a chain by construction (already so in the p-graph).
* embedding a list of texts: ``base/embeddings/base.py``, ``get_text_embedding_batch`` sends
  batches of ``embed_batch_size`` (``DEFAULT_EMBED_BATCH_SIZE = 10``) one after another;
  ``VectorStoreIndex`` then inserts the nodes into the vector store.
* retrieval for expanded queries: ``retrievers/fusion_retriever.py``, ``QueryFusionRetriever``:
  ``_get_queries`` parses the *whole* LLM completion before any retrieval (no decode
  pipelining), then each query is retrieved by its own ``retriever.aretrieve(query)`` (one query
  embedding and one vector-store query each; concurrent under the default ``use_async=True``).
* reranking (``FlagEmbeddingReranker`` / ``SentenceTransformerRerank``): one scoring call over
  all (query, node) pairs: already one primitive in the p-graph.
* contextual retrieval's chunk contexts: ``extractors/document_context.py``,
  ``DocumentContextExtractor.aextract`` runs one LLM call per chunk through
  ``async_utils.run_jobs(..., workers=self.num_workers)``, an ``asyncio.Semaphore`` of
  ``DEFAULT_NUM_WORKERS = 4`` (run-llama/llama_index, llama-index-core, ``document_context.py``
  at 08b9fe0429ffde0aae6dd7f7e19e206de7b5b8fe, ``async_utils.py`` at
  00536a4ecef866d16b339f8887958639abb2e370): at most 4 contexts in flight. Modelled as slots:
  call ``i`` starts when call ``i - 4`` has finished (the calls are alike, so they finish in
  order; a semaphore would start it at the first of any earlier finish).

LlamaDistPC (Teola sec. 6, baselines) parallelises independent modules by hand: a module starts
when every module it reads data from has *finished* (module-level dependencies, each module
still a black box), instead of after its predecessor in template order.

The *opened* variants (pass ``llamaindex_open``) are the strongest configuration of the same
modules, each by a documented LlamaIndex knob: ``TreeSummarize(use_async=True)`` sends the leaf
calls together (``run_async_tasks([self._llm.apredict(...) for text_chunk in text_chunks])``),
``DocumentContextExtractor(num_workers=n)`` with ``n`` at least the chunk count keeps every
context call in flight, and ``embed_batch_size`` (a ``BaseEmbedding`` field, ``le=2048``) at least
the chunk count embeds a document in one call. Per-query retrieval and parsing the whole
expansion first stay: no LlamaIndex option streams a completion into retrievers.
"""
from __future__ import annotations

from collections import defaultdict

from orchestrator.graph import Graph, GraphEditor
from orchestrator.primitives import Kind
from orchestrator.rewrite import Pass, PassContext, decompose, push_through

#: llama_index.core.constants.DEFAULT_EMBED_BATCH_SIZE
LLAMAINDEX_EMBED_BATCH = 10


class LlamaIndexModules(Pass):
    """Rewrite the p-graph into what LlamaIndex executes inside each module (rules above)."""

    def __init__(self, *, embed_batch: int | None = LLAMAINDEX_EMBED_BATCH, open_loops: bool = False,
                 name: str = "llamaindex") -> None:
        self.embed_batch = embed_batch      # None: one embedding call per document
        self.open_loops = open_loops        # True: every loop call in flight at once (use_async, num_workers)
        self.name = name

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        for nid in g.order:
            n = g.nodes[nid]
            if n.kind == Kind.EMBEDDING and self.embed_batch is not None and n.n_items > self.embed_batch:
                return self._sequential_batches(g, nid)
            if n.kind == Kind.SEARCHING and n.n_items > 1:
                split = self._per_query(g, n)
                if split is not None:
                    return split
        return g if self.open_loops else self._sequential_loop_calls(g)

    def _sequential_batches(self, g: Graph, nid: str) -> Graph:
        g2 = decompose(g, g.nodes[nid], self.embed_batch)
        ed = GraphEditor.of(g2)
        stages = sorted((s for s in ed.nodes if s.startswith(f"{nid}/s")), key=lambda s: int(s.rsplit("/s", 1)[1]))
        for a, b in zip(stages, stages[1:]):
            ed.edges.add((a, b))      # batch j+1 is sent when batch j returns
        return ed.freeze()

    @staticmethod
    def _per_query(g: Graph, s) -> Graph | None:
        """One retriever call (embed one query, search it) per query."""
        q = s.inputs["queries"]
        src = g.nodes.get(getattr(q, "node", None) or "")
        if src is None or src.kind != Kind.EMBEDDING or src.n_items != s.n_items or q.lo is not None \
                or q.index is not None or q.transform is not None:
            return None
        g1 = decompose(g, src, 1)
        agg = next(n for n in g1.nodes.values() if n.kind == Kind.AGGREGATE and n.id.startswith(f"{src.id}/agg"))
        return push_through(g1, g1.nodes[s.id], agg)

    @staticmethod
    def _sequential_loop_calls(g: Graph) -> Graph:
        """A module's loop over independent LLM calls keeps ``loop_workers`` in flight: call
        ``i`` waits for call ``i - loop_workers`` (1: one after another)."""
        calls: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for n in g.nodes.values():
            if n.kind == Kind.PREFILLING and "loop_call" in n.params:
                calls[n.component].append((int(n.params["loop_call"]), n.id))
        new = set()
        for comp, lst in calls.items():
            lst.sort()
            ids = [nid for _, nid in lst]
            for j, nxt in enumerate(ids):
                w = int(g.nodes[nxt].params.get("loop_workers", 1))
                if j >= w:
                    edge = (g.nodes[ids[j - w]].params["kv_chain"], nxt)   # that call's decode -> this prefill
                    if edge not in g.edges:
                        new.add(edge)
        if not new:
            return g
        ed = GraphEditor.of(g)
        ed.edges |= new
        return ed.freeze()


class ModulePruning(Pass):
    """LlamaDistPC: keep a module's own edges and data edges; a module's first primitives wait
    for the last primitives of every module it reads from (and no longer for its template
    predecessor when it reads nothing from it)."""
    name = "module_prune"

    def apply(self, g: Graph, ctx: PassContext) -> Graph:
        comp = {nid: n.component for nid, n in g.nodes.items()}
        inside = {(s, d) for s, d in g.edges if comp[s] == comp[d]}
        data = {(s, d) for s, d in g.edges if s in g.nodes[d].sources()}
        has_parent_inside = {d for _, d in inside}
        has_child_inside = {s for s, _ in inside}
        members: dict[str, list[str]] = defaultdict(list)
        for nid, c in comp.items():
            members[c].append(nid)
        reads = {(comp[s], comp[d]) for s, d in data if comp[s] != comp[d] and g.nodes[s].kind != Kind.INPUT}
        module = set()
        for a, b in reads:
            tails = [t for t in members[a] if t not in has_child_inside]
            heads = [h for h in members[b] if h not in has_parent_inside]
            module |= {(t, h) for t in tails for h in heads}
        keep = frozenset(inside | data | module)
        if keep == g.edges:
            return g
        ed = GraphEditor.of(g)
        ed.edges = set(keep)
        return ed.freeze()


BASELINE_PASSES: tuple[Pass, ...] = (LlamaIndexModules(),
                                     LlamaIndexModules(embed_batch=None, open_loops=True, name="llamaindex_open"),
                                     ModulePruning())
