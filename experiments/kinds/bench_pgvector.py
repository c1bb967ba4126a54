"""``python -m experiments.run bench_pgvector``: ingest and search times of the pgvector engine on an
embedded PostgreSQL (``pgserver``), with and without the HNSW index, and the search plans.

For ``params.rows`` random unit vectors of ``params.dim`` dimensions (MiniLM's 384 by default): the time
to ingest them in one batch into a fresh table with no index, with the HNSW index maintained
while inserting (the earlier behaviour), and with the index built once afterwards (the engine's
default for a table that reaches ``hnsw_min_rows``); then per query (``params.queries`` of them,
top 5) the search over one document's ``params.doc_rows`` rows (exact: primary-key lookup and sort)
and over the whole table (exact scan vs HNSW), with each plan's first line from ``EXPLAIN``.
Times are medians of ``params.repeats`` runs (a shared machine's noise is large); one row each
in ``results.parquet``.
"""
from __future__ import annotations

import statistics
import tempfile
import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext
from experiments.kinds._bench import Report


def _vectors(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _median(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _plan(db, sql: str, args) -> str:
    with db.connect().cursor(binary=True) as cur:
        cur.execute("EXPLAIN " + sql, args)
        lines = [r[0].strip() for r in cur.fetchall()]
    return next((ln.split("  (cost")[0].lstrip("-> ") for ln in lines if "Index" in ln or "Seq Scan on" in ln),
                lines[0])


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rows: int = Field(default=2000, ge=1)          # rows ingested
    dim: int = Field(default=384, ge=1)            # vector dimension (MiniLM)
    doc_rows: int = Field(default=40, ge=1)        # rows of one document
    queries: int = Field(default=20, ge=1)         # searches timed
    repeats: int = Field(default=3, ge=1)          # timed runs; the median counts


def run(params: Params, ctx: RunContext) -> None:
    from orchestrator.engines.real.pgvector import PgVectorEngine, embedded_server
    a = params
    report = Report(ctx, "pgvector ingest and search (bench_pgvector)")
    vecs = _vectors(a.rows, a.dim, 0)
    texts = [f"chunk {i}" for i in range(a.rows)]
    with tempfile.TemporaryDirectory(prefix="pgb-", dir="/tmp") as d:
        url = embedded_server(d)
        ingest = {}
        k = 0
        for label, hnsw, after in (("no index", False, False), ("HNSW while inserting", True, False),
                                   ("HNSW built after", False, True)):
            times = []
            for _ in range(a.repeats):
                k += 1
                db = PgVectorEngine(name="b", url=url, dim=a.dim, table=f"b{k}", hnsw=hnsw)
                db.connect()
                t0 = time.perf_counter()
                db.ingest([(texts, list(vecs))])
                if after:
                    db.build_index()
                times.append(time.perf_counter() - t0)
                last = db
            ingest[label] = statistics.median(times)
            report.line(f"ingest {a.rows} x {a.dim}-d, {label}: {ingest[label]:.3f} s")
            report.row({"case": f"ingest, {label}", "seconds": ingest[label], "plan": ""})
        db = last                                     # indexed, all rows
        qs = list(_vectors(a.queries, a.dim, 1))
        with db.connect().cursor() as cur:
            cur.execute(f"SELECT min(id) FROM {db.table}")
            lo = int(cur.fetchone()[0])
        ids = list(range(lo, lo + a.rows))
        doc = ids[: a.doc_rows]
        plain = PgVectorEngine(name="p", url=url, dim=a.dim, table=db.table, hnsw=False)
        plain.connect()
        plain._indexed = False                        # force the exact statement on the same table
        cases = (("document search (exact)", db, doc), ("whole table, exact scan", plain, ids),
                 ("whole table, HNSW", db, ids))
        for label, eng, cand in cases:
            sql = eng.search_sql(len(cand))
            args = ([qs[0]], 5) if "ANY(" not in sql else ([qs[0]], cand, 5)
            t = _median(lambda: eng.search(qs, cand, 5), a.repeats) / len(qs)
            plan = _plan(eng, sql, args)
            report.line(f"search, {label}: {1e3 * t:.2f} ms per query; plan: {plan}")
            report.row({"case": f"search, {label}", "seconds": t, "plan": plan})
        plain.close()
        db.close()
    report.write()

