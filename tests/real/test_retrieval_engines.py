"""Embedding (offline MiniLM), similarity reranker and PostgreSQL + pgvector against a real
server: ingestion and search are batched, search stays inside the index it is given."""
from __future__ import annotations

import math

import pytest

from orchestrator.engines.base import Invocation
from orchestrator.primitives import Kind

DOC_A = ["Ships dock at the north harbour of the town.", "The bakery sells rye bread every morning.",
         "The museum shows old maps of the coast.", "Ferries to the island leave at noon."]
DOC_B = ["Photosynthesis turns light into chemical energy.", "Leaves are green because of chlorophyll."]


@pytest.fixture(scope="module")
def embedder():
    from orchestrator.engines.real.embedding import SentenceEmbeddingEngine
    e = SentenceEmbeddingEngine(name="emb#0")
    yield e
    e.close()


def _vecs(embedder, *groups):
    res = embedder.submit([Invocation(f"g{i}", Kind.EMBEDDING, {"texts": g}, n_items=len(g))
                           for i, g in enumerate(groups)]).result(timeout=120)
    return [o.value for o in res.outputs]


def test_embeddings_are_real_384d_unit_vectors(embedder):
    (vs,) = _vecs(embedder, DOC_A)
    assert len(vs) == 4 and all(len(v) == 384 for v in vs)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vs)
    (q,) = _vecs(embedder, ["where do boats moor?"])
    sims = [sum(a * b for a, b in zip(q[0], v)) for v in vs]
    assert max(range(4), key=sims.__getitem__) == 0   # semantically nearest: the harbour sentence


def test_batch_of_invocations_splits_back_in_order(embedder):
    a, b = _vecs(embedder, DOC_A, DOC_B)
    (a1,) = _vecs(embedder, DOC_A)
    assert len(a) == 4 and len(b) == 2
    assert all(math.isclose(x, y, abs_tol=1e-5) for u, v in zip(a, a1) for x, y in zip(u, v))


def test_reranker_orders_candidates_by_relevance():
    from orchestrator.engines.real.embedding import EmbeddingReranker
    rr = EmbeddingReranker(name="rr#0")
    out = rr.submit([Invocation("r", Kind.RERANKING, {"query": "when does the ferry leave?",
                                                      "candidates": [DOC_A[:2], DOC_A[2:] + DOC_A[:1]]},
                                {"top_n": 2})]).result(timeout=120).outputs[0].value
    rr.close()
    assert out[0] == DOC_A[3] and len(out) == 2


def test_cross_encoder_stand_in_scores_pairs_jointly_and_deterministically(tmp_path):
    from orchestrator.engines.real.embedding import EmbeddingReranker, build_minilm_cross_encoder
    d = build_minilm_cross_encoder(tmp_path / "ce")
    assert build_minilm_cross_encoder(tmp_path / "ce") == d                    # built once, then reused
    rr = EmbeddingReranker(name="rr#0", cross_encoder_dir=d)
    q1, q2 = "when does the ferry leave?", "why are plants green?"
    s1 = rr._scores([(q1, t) for t in DOC_A])
    s2 = rr._scores([(q1, t) for t in reversed(DOC_A)])
    s3 = rr._scores([(q2, t) for t in DOC_A])
    both = rr.submit([Invocation(f"r{i}", Kind.RERANKING, {"query": q, "candidates": [DOC_A]}, {"top_n": 2})
                      for i, q in enumerate((q1, q2))]).result(timeout=120).outputs
    alone = [rr.submit([Invocation("r", Kind.RERANKING, {"query": q, "candidates": [DOC_A]}, {"top_n": 2})])
             .result(timeout=120).outputs[0] for q in (q1, q2)]
    rr.close()
    assert [o.value for o in both] == [o.value for o in alone]      # one forward for the batch, split back per query
    assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(s1, reversed(s2)))   # per pair, not per batch
    assert len(set(s1)) == len(DOC_A)
    assert s1 != s3                                                            # the query is read with each candidate


def test_pgvector_ingest_and_search_on_a_real_server(embedder, pg_url):
    from orchestrator.engines.real.pgvector import PgVectorEngine
    db = PgVectorEngine(name="db#0", url=pg_url, dim=384, table="test_chunks")
    va, vb = _vecs(embedder, DOC_A, DOC_B)
    res = db.submit([Invocation("ia", Kind.INGESTION, {"texts": DOC_A, "vectors": va}, n_items=4),
                     Invocation("ib", Kind.INGESTION, {"texts": DOC_B, "vectors": vb}, n_items=2)]).result(timeout=60)
    idx_a, idx_b = (o.value for o in res.outputs)
    assert len(idx_a) == 4 and len(idx_b) == 2 and not set(idx_a) & set(idx_b)
    (qs,) = _vecs(embedder, ["where do boats moor?", "why are plants green?"])
    found = db.submit([Invocation("sa", Kind.SEARCHING, {"queries": qs, "index": idx_a}, {"top_k": 2}),
                       Invocation("sb", Kind.SEARCHING, {"queries": qs, "index": idx_b}, {"top_k": 5})]
                      ).result(timeout=60)
    in_a, in_b = (o.value for o in found.outputs)
    assert in_a[0][0] == DOC_A[0] and len(in_a[0]) == 2 and set(in_a[1]) <= set(DOC_A)
    assert in_b[1][0] == DOC_B[1] and sorted(in_b[0]) == sorted(DOC_B)   # only that index, top_k capped
    with __import__("psycopg").connect(pg_url) as c:
        assert c.execute("SELECT count(*) FROM test_chunks").fetchone()[0] >= 6
    db.close()


def test_staged_ingestions_concatenate_into_one_index(embedder, pg_url):
    from orchestrator.engines.real.pgvector import PgVectorEngine
    from orchestrator import ops
    db = PgVectorEngine(name="db#1", url=pg_url, dim=384, table="test_chunks")
    (va,) = _vecs(embedder, DOC_A)
    parts = [db.submit([Invocation(f"s{j}", Kind.INGESTION, {"texts": DOC_A[j:j + 2], "vectors": va[j:j + 2]})]
                       ).result(timeout=60).outputs[0].value for j in (0, 2)]
    index = ops.aggregate(parts, "concat")
    (q,) = _vecs(embedder, ["when does the ferry leave?"])
    assert db.search(q, index, 1) == [[DOC_A[3]]]
    db.close()


def test_real_reranker_scores_each_distinct_candidate_of_a_pipelined_reranking_once(monkeypatch):
    """Teola's partial rerankings of advanced RAG on the real (bi-encoder) reranker, the other
    engines simulated: with ``score_once`` each query's pairs are its searches' distinct hits,
    without it every hit of every search; the answers are the same."""
    import numpy as np
    from orchestrator import load_app, ops
    from orchestrator.engines.real.embedding import EmbeddingReranker
    from orchestrator.runtime.realtime import run_realtime
    from orchestrator.runtime.sim import SimState

    class Counting(EmbeddingReranker):
        def _run(self, batch, t0, on_piece):
            for inv in batch:
                self.sent.append((int(inv.key.split("/")[0]), ops.flatten_candidates(inv.inputs["candidates"])))
            return super()._run(batch, t0, on_piece)

    app = load_app("advanced_rag")
    cfgs = app.query_configs(2, np.random.default_rng(0))

    def run(score_once: bool):
        with monkeypatch.context() as m:
            if not score_once:
                m.setattr(SimState, "score_once", staticmethod(lambda q, group, inputs: inputs))
            engines = app.build_engines()
            rr = Counting(name="rr#0")
            rr.sent = []
            engines["reranker"] = [rr]
            rep = run_realtime(app.template(), cfgs, [0.0, 0.0], engines, scheme="teola", seed=3,
                               time_scale=0.01, timeout_s=120)
            rr.close()
        assert not rep.failed
        return rep, rr.sent

    (rep, sent), (rep0, sent0) = run(True), run(False)
    assert [r.outputs for r in rep.results] == [r.outputs for r in rep0.results]
    for qid in (0, 1):
        found = [c for q, c in sent0 if q == qid]
        assert len(found) == 3 and len(ops.flatten_candidates(found)) < sum(map(len, found))
        got = [t for q, c in sent if q == qid for t in c]
        assert sorted(got) == sorted(ops.flatten_candidates(found))       # each distinct hit once
