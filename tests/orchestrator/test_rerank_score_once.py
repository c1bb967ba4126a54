"""Pipelined partial rerankings of one query score each distinct candidate once (``score_once``:
``RerankPipelining`` marks the parts, ``SimState.score_once`` sends each part only the candidates no
earlier part was sent), with outputs identical to re-scoring them, and the simulated reranker's
price drops with the pairs."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from conftest import make_graph
from orchestrator import load_app, ops, simulate
from orchestrator.batching import Blind
from orchestrator.engines import build_instances, load_engine_spec
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.runtime import make_payload
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.sim import QueryRun, SimState, run_events


def _recording(engines: dict, name: str = "reranker") -> list[tuple[tuple, float]]:
    """Record every batch the ``name`` instances run: (its invocations, its duration)."""
    log: list[tuple[tuple, float]] = []
    for inst in engines[name]:
        submit = inst.submit

        def rec(batch, *, _submit=submit, **kw):
            pending = _submit(batch, **kw)
            log.append((tuple(batch), pending.result().duration_s))
            return pending
        inst.submit = rec
    return log


def _advanced(score_once: bool, monkeypatch: pytest.MonkeyPatch):
    """Teola on advanced RAG (4 queries, two of them arriving together), with or without
    ``score_once``: the rerank invocations and batches run, results and traces."""
    app = load_app("advanced_rag")
    cfgs = [app.query, app.query, app.query.model_copy(update={"fetch_k": 10}), app.query]
    rng = np.random.default_rng(3)
    payloads = [make_payload(c, rng) for c in cfgs]
    with monkeypatch.context() as m:
        if not score_once:               # the paper's / Ayo's parts: each re-scores what it gets
            m.setattr(SimState, "score_once", staticmethod(lambda q, group, inputs: inputs))
        engines = app.build_engines()
        log = _recording(engines)
        traces: dict[int, QueryRun] = {}
        res = simulate(app.template(), cfgs, [0.0, 0.0, 0.4, 5.0], engines, scheme="teola",
                       payloads=payloads, traces=traces)
    return log, res, traces


def _pairs_per_query(log) -> Counter:
    pairs: Counter = Counter()
    for batch, _ in log:
        for inv in batch:
            pairs[int(inv.key.split("/")[0])] += len(ops.flatten_candidates(inv.inputs["candidates"]))
    return pairs


def _found(q: QueryRun) -> list[list[str]]:
    """The candidates each partial reranking of ``q`` was given by the graph (its search's hits)."""
    parts = [n for n in q.graph.nodes.values() if n.kind == Kind.RERANKING]
    assert len(parts) == 3 and all(n.params["score_once"] == parts[0].params["score_once"] for n in parts)
    return [ops.flatten_candidates(ops.resolve(n.inputs["candidates"], q.store)) for n in parts]


def test_partial_rerankings_score_each_distinct_candidate_once_with_identical_outputs(monkeypatch):
    log, res, traces = _advanced(True, monkeypatch)
    log0, res0, _ = _advanced(False, monkeypatch)
    assert [r.outputs for r in res] == [r.outputs for r in res0]
    pairs, pairs0 = _pairs_per_query(log), _pairs_per_query(log0)
    for qid, q in traces.items():
        found = _found(q)
        distinct = len(ops.flatten_candidates(found))
        assert distinct < sum(map(len, found))                   # the searches overlap: something to skip
        assert pairs[qid] == distinct
        assert pairs0[qid] == sum(map(len, found))
        # the merged top-n is one reranking of all the searches' hits
        top = [n for n in q.graph.nodes.values() if n.kind == Kind.AGGREGATE and n.params.get("mode") == "topk"]
        assert q.store[top[0].id] == ops.rerank(q.payload["question"], found, top[0].params["top_n"])
    # the simulated reranker is priced by the pairs it scores: less busy time in all
    assert sum(d for _, d in log) < sum(d for _, d in log0)


def _two_parts_graph(a: list[str], b: list[str], top_n: int):
    q = Node("in:question", Kind.INPUT, "input", None, {}, {"field": "question"})
    params = {"top_n": top_n, "scored": True, "score_once": "rerank"}
    parts = [Node(f"rerank/p{j}", Kind.RERANKING, "rerank", "reranker",
                  {"query": Ref("in:question"), "candidates": Lit(c)}, params, n_items=len(c))
             for j, c in enumerate((a, b))]
    merge = Node("rerank/merge", Kind.AGGREGATE, "rerank", None, {"parts": tuple(Ref(p.id) for p in parts)},
                 {"mode": "topk", "top_n": top_n})
    return make_graph([q, *parts, merge])


def _run_hand_graph(a: list[str], b: list[str], top_n: int):
    engines = {"reranker": build_instances(load_engine_spec("cross-encoder-minilm_cpu"))}
    log = _recording(engines)
    sched = EngineScheduler(name="reranker", instances=engines["reranker"], policy=Blind(), max_batch=256)
    state = SimState(schedulers={"reranker": sched}, dispatch_overhead_s=0.0)
    (res,) = run_events(state, [QueryRun(0, _two_parts_graph(a, b, top_n), 0.0, {"question": "who w1 w2"})])
    return log, res


def test_parts_dispatched_in_one_batch_score_a_shared_candidate_once():
    a = [f"a{i} x y" for i in range(5)]
    b = a[1:4] + [f"b{i} x y" for i in range(3)]
    log, res = _run_hand_graph(a, b, 3)
    assert len(log) == 1 and len(log[0][0]) == 2                  # both parts in one batch
    sent = [ops.flatten_candidates(inv.inputs["candidates"]) for inv in log[0][0]]
    assert sorted(sent[0] + sent[1]) == sorted(ops.flatten_candidates([a, b]))   # each once
    assert res.outputs["rerank/merge"] == ops.rerank("who w1 w2", [a, b], 3)


def test_a_part_with_nothing_new_to_score_runs_no_reranking():
    a = [f"a{i} x y" for i in range(5)]
    log, res = _run_hand_graph(a, a[::-1], 2)
    assert [len(batch) for batch, _ in log] == [1]
    assert res.outputs["rerank/merge"] == ops.rerank("who w1 w2", [a], 2)
