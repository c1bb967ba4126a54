"""pgvector on a real embedded PostgreSQL: the HNSW index exists only when it helps, the whole-table
search uses it (EXPLAIN), a document's search stays exact on its own rows, and vectors travel in
the pgvector adapter's binary format (issue 16 item 6)."""
from __future__ import annotations

import numpy as np
import pytest


def _vectors(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _plan(db, sql_args) -> str:
    sql, args = sql_args
    with db.connect().cursor(binary=True) as cur:
        cur.execute("EXPLAIN " + sql, args)
        return "\n".join(r[0] for r in cur.fetchall())


def _exact(vecs: np.ndarray, q: np.ndarray, rows: list[int], k: int) -> list[int]:
    d = 1.0 - vecs[rows] @ q
    return [rows[j] for j in np.argsort(d, kind="stable")[:k]]


def test_small_tables_get_no_index_and_search_exactly(pg_url):
    from orchestrator.engines.real.pgvector import PgVectorEngine
    db = PgVectorEngine(name="db", url=pg_url, dim=384, table="idx_small", hnsw_min_rows=1000)
    vecs = _vectors(300)
    (ids,) = db.ingest([([f"t{i}" for i in range(300)], list(vecs))])
    assert not db.indexed
    doc = ids[100:140]
    sql = db.search_sql(len(doc))
    plan = _plan(db, (sql, ([vecs[0]], doc, 3)))
    assert "idx_small_pkey" in plan and "idx_small_emb" not in plan            # the document's own rows
    got = db.search([vecs[0], vecs[7]], doc, 3)
    assert got == [[f"t{i}" for i in _exact(vecs, vecs[j], list(range(100, 140)), 3)] for j in (0, 7)]
    db.close()


def test_large_tables_build_the_index_once_and_whole_table_search_uses_it(pg_url):
    from orchestrator.engines.real.pgvector import PgVectorEngine
    db = PgVectorEngine(name="db", url=pg_url, dim=384, table="idx_large", hnsw_min_rows=500)
    vecs = _vectors(600, seed=1)
    ids: list[int] = []
    for lo in (0, 300):
        ids += db.ingest([([f"t{i}" for i in range(lo, lo + 300)], list(vecs[lo:lo + 300]))])[0]
        assert db.indexed == (lo == 300)                     # built after the ingestion that crossed 500
    whole = db.search_sql(len(ids))
    plan = _plan(db, (whole, ([vecs[3]], 5)))
    assert "Index Scan using idx_large_emb" in plan, plan
    sub = db.search_sql(20)
    assert "idx_large_emb" not in _plan(db, (sub, ([vecs[3]], ids[:20], 5)))
    got = db.search([vecs[3]], ids, 5)[0]
    exact = [f"t{i}" for i in _exact(vecs, vecs[3], list(range(600)), 5)]
    assert got[0] == "t3" and len(set(got) & set(exact)) >= 4                    # approximate, high recall
    db.close()
    again = PgVectorEngine(name="db2", url=pg_url, dim=384, table="idx_large", hnsw_min_rows=500)
    again.connect()
    assert again.indexed                                     # found, not rebuilt
    again.close()


def test_vectors_travel_binary_through_the_adapter(pg_url):
    from orchestrator.engines.real.pgvector import PgVectorEngine
    db = PgVectorEngine(name="db", url=pg_url, dim=4, table="idx_bin")
    (ids,) = db.ingest([(["a"], [[0.5, -0.25, 1e-7, 3.0]])])
    with db.connect().cursor(binary=True) as cur:
        cur.execute("SELECT emb FROM idx_bin WHERE id = %s", (ids[0],))
        got = cur.fetchone()[0]
    assert np.array_equal(np.asarray(got.to_numpy() if hasattr(got, "to_numpy") else got, dtype=np.float32),
                          np.array([0.5, -0.25, 1e-7, 3.0], dtype=np.float32))     # float32 exactly
    db.close()


@pytest.mark.slow
def test_ingest_without_the_index_is_faster(pg_url):
    """The measurement behind the docs' figures (2,000 384-d rows), loosely."""
    import time
    from orchestrator.engines.real.pgvector import PgVectorEngine
    vecs = _vectors(2000, seed=2)
    t = {}
    for name, hnsw in (("noidx", False), ("hnsw", True)):
        db = PgVectorEngine(name="db", url=pg_url, dim=384, table=f"ing_{name}", hnsw=hnsw)
        db.connect()
        t0 = time.perf_counter()
        db.ingest([([f"t{i}" for i in range(2000)], list(vecs))])
        t[name] = time.perf_counter() - t0
        db.close()
    assert t["noidx"] < t["hnsw"]
