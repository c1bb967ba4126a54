"""Component expanders: how each template component becomes primitives for one query (Alg. 1).

An expander gets the component, the query configuration and ``use(port)``, which resolves the
component's ``uses`` wiring to an :class:`Export` (a ref plus the list lengths it carries). It
returns its nodes (ids prefixed by the component name) and its exports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from orchestrator.ops import words
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.template import Component, QueryConfig


@dataclass(frozen=True)
class Export:
    """A component output: ``ref``; ``n`` its list length (None: a scalar); ``inner`` the length
    of each element when it is a list of lists."""
    ref: Ref
    n: int | None = None
    inner: int | None = None


@dataclass
class Expansion:
    nodes: list[Node]
    exports: dict[str, Export]


Use = Callable[[str], Export]
Expander = Callable[[Component, QueryConfig, Use], Expansion]
EXPANDERS: dict[str, Expander] = {}


def expander(op: str) -> Callable[[Expander], Expander]:
    def deco(fn: Expander) -> Expander:
        if op in EXPANDERS:
            raise KeyError(f"component op {op!r} registered twice")
        EXPANDERS[op] = fn
        return fn
    return deco


def get_expander(op: str) -> Expander:
    try:
        return EXPANDERS[op]
    except KeyError:
        raise KeyError(f"unknown component op {op!r}; known: {', '.join(sorted(EXPANDERS))}") from None


def _as_list(e: Export) -> tuple[Ref, int]:
    if e.n is not None:
        return e.ref, e.n
    if e.ref.transform is not None:
        raise ValueError(f"cannot wrap transformed ref {e.ref} as a list")
    return Ref(e.ref.node, e.ref.lo, e.ref.hi, e.ref.index, "as_list"), 1


def _instr(c: Component, role: str, tokens: int) -> Lit:
    return Lit(words((c.name, role), tokens))


def _llm_pair(c: Component, tag: str, segments: tuple, *, fmt: str, out_tokens: int,
              n_items: int = 1, splittable: bool = False, loop_call: int | None = None,
              loop_workers: int = 1, close_tokens: int | None = None) -> list[Node]:
    """A prefill->decode pair. ``loop_call``: the call's index in the module's own loop over
    independent LLM calls (tree-synthesis leaves, chunk contexts); a framework that runs modules
    as black boxes keeps at most ``loop_workers`` of them in flight (see
    ``orchestrator.baselines``). ``close_tokens``: a JSON list output closes after that many of
    its ``out_tokens`` tokens."""
    pid, did = f"{c.name}/{tag}prefill", f"{c.name}/{tag}decode"
    pp: dict = {"kv_chain": did}
    if loop_call is not None:
        pp.update(loop_call=loop_call, loop_workers=loop_workers)
    p = Node(pid, Kind.PREFILLING, c.name, c.engine, {"segments": segments}, pp)
    dp = {"kv_chain": did, "fmt": fmt, "output_tokens": out_tokens, "n_items": n_items}
    if close_tokens is not None:
        dp["close_tokens"] = min(close_tokens, out_tokens)
    d = Node(did, Kind.DECODING, c.name, c.engine, {"kv": Ref(pid)}, dp, splittable=splittable)
    return [p, d]


@expander("index")
def _index(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    chunks, n = _as_list(use("chunks"))
    e = Node(f"{c.name}/embed", Kind.EMBEDDING, c.name, c.engine, {"texts": chunks},
             n_items=n, batchable=c.batchable, elementwise=("texts",))
    i = Node(f"{c.name}/ingest", Kind.INGESTION, c.name, c.params["db_engine"],
             {"texts": chunks, "vectors": Ref(e.id)}, n_items=n, batchable=c.batchable,
             elementwise=("texts", "vectors"))
    return Expansion([e, i], {"index": Export(Ref(i.id), n)})


@expander("embed")
def _embed(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    texts, n = _as_list(use("texts"))
    e = Node(f"{c.name}/embed", Kind.EMBEDDING, c.name, c.engine, {"texts": texts},
             n_items=n, batchable=c.batchable, elementwise=("texts",))
    return Expansion([e], {"vectors": Export(Ref(e.id), n)})


@expander("search")
def _search(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    queries, n = _as_list(use("queries"))
    top_k = int(c.params.get("top_k", cfg.fetch_k))
    inputs = {"queries": queries}
    if "index" in c.uses:
        inputs["index"] = use("index").ref
    guard = use("guard").ref if "guard" in c.uses else None
    s = Node(f"{c.name}/search", Kind.SEARCHING, c.name, c.engine, inputs,
             {"top_k": top_k, "result_tokens": int(c.params.get("result_tokens", 64)),
              "skip_value": [[] for _ in range(n)]},
             n_items=n, batchable=c.batchable, elementwise=("queries",), guard=guard)
    found = min(top_k, cfg.n_chunks) if "index" in c.uses and cfg.n_chunks else top_k
    return Expansion([s], {"hits": Export(Ref(s.id), n, found)})


@expander("rerank")
def _rerank(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    cand = use("candidates")
    n_pairs = (cand.n or 1) * (cand.inner or 1)
    r = Node(f"{c.name}/rerank", Kind.RERANKING, c.name, c.engine,
             {"query": use("query").ref, "candidates": cand.ref}, {"top_n": cfg.top_k},
             n_items=n_pairs, batchable=False)
    return Expansion([r], {"top": Export(Ref(r.id), cfg.top_k)})


@expander("llm")
def _llm(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    segs = []
    for spec in c.params["prompt"]:
        if spec.startswith("instr:"):
            segs.append(_instr(c, "instr", int(spec.split(":")[1])))
        else:
            segs.append(use(spec).ref)
    fmt = c.params.get("format", "text")
    n = cfg.n_expanded_queries if fmt == "json_list" else 1
    out = int(c.params.get("output_tokens", cfg.answer_tokens))
    close = c.params.get("json_close_tokens") if fmt == "json_list" else None
    if close is not None and c.params.get("decode_stop", "structure") == "structure":
        out = close = min(out, int(close))  # the engine stops where the list closes (EOS / grammar end)
    nodes = _llm_pair(c, "", tuple(segs), fmt=fmt, out_tokens=out, n_items=n, splittable=c.splittable,
                      close_tokens=None if close is None else int(close))
    d = nodes[1].id
    ex = {"text": Export(Ref(d))}
    if fmt == "json_list":
        ex["items"] = Export(Ref(d, transform="json_items"), n)
    return Expansion(nodes, ex)


@expander("synthesis")
def _synthesis(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    q, ctx = use("question").ref, use("context")
    k = ctx.n if ctx.n is not None else cfg.top_k
    instr_tokens = int(c.params.get("instr_tokens", 64))
    mode = cfg.synthesis_mode
    if mode == "one_shot" or k == 1:
        nodes = _llm_pair(c, "", (_instr(c, "qa", instr_tokens), q, ctx.ref), fmt="text",
                          out_tokens=cfg.answer_tokens)
    elif mode == "tree":
        leaf_tokens = int(c.params.get("leaf_tokens", cfg.answer_tokens))
        nodes = []
        for i in range(k):
            seg = (_instr(c, "qa", instr_tokens), q, ctx.ref.at(i))
            nodes += _llm_pair(c, f"leaf{i}_", seg, fmt="text", out_tokens=leaf_tokens, loop_call=i)
        leaves = tuple(Ref(f"{c.name}/leaf{i}_decode") for i in range(k))
        nodes += _llm_pair(c, "root_", (_instr(c, "sum", instr_tokens), q) + leaves, fmt="text",
                           out_tokens=cfg.answer_tokens)
    else:  # refine: answer with chunk 0, then refine it with each next chunk (LlamaIndex order)
        nodes = _llm_pair(c, "step0_", (_instr(c, "qa", instr_tokens), q, ctx.ref.at(0)),
                          fmt="text", out_tokens=cfg.answer_tokens)
        for i in range(1, k):
            seg = (_instr(c, "refine", instr_tokens), q, Ref(f"{c.name}/step{i-1}_decode"),
                   ctx.ref.at(i))
            nodes += _llm_pair(c, f"step{i}_", seg, fmt="text", out_tokens=cfg.answer_tokens)
    return Expansion(nodes, {"answer": Export(Ref(nodes[-1].id))})


@expander("condition")
def _condition(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    n = Node(f"{c.name}/cond", Kind.CONDITION, c.name, None, {"x": use("x").ref})
    return Expansion([n], {"flag": Export(Ref(n.id))})


@expander("contextualize")
def _contextualize(c: Component, cfg: QueryConfig, use: Use) -> Expansion:
    chunks, n = _as_list(use("chunks"))
    half = cfg.neighbours // 2
    out_tokens = int(c.params.get("context_tokens", 48))
    workers = int(c.params.get("loop_workers", 4))   # LlamaIndex run_jobs: DEFAULT_NUM_WORKERS
    nodes: list[Node] = []
    joined = []
    for i in range(n):
        window = Ref(chunks.node, lo=max(0, i - half), hi=min(n, i + half + 1))
        seg = (_instr(c, "ctx", int(c.params.get("instr_tokens", 48))), window, Ref(chunks.node, index=i))
        nodes += _llm_pair(c, f"c{i}_", seg, fmt="text", out_tokens=out_tokens, loop_call=i, loop_workers=workers)
        j = Node(f"{c.name}/join{i}", Kind.AGGREGATE, c.name, None,
                 {"parts": (Ref(nodes[-1].id), Ref(chunks.node, index=i))}, {"mode": "join"})
        nodes.append(j)
        joined.append(Ref(j.id))
    a = Node(f"{c.name}/all", Kind.AGGREGATE, c.name, None, {"parts": tuple(joined)}, {"mode": "concat"})
    nodes.append(a)
    return Expansion(nodes, {"texts": Export(Ref(a.id), n)})
