"""Vector search on PostgreSQL + pgvector: the real store behind INGESTION and SEARCHING.

Point it at a user's server (``url``), or let :func:`embedded_server` start a real local one
from the PyPI package ``pgserver`` (PostgreSQL binaries with the pgvector extension; ~1 s).

Rows live in one table (``id bigserial, text, emb vector(dim)``, HNSW cosine index). INGESTION
inserts a batch of texts with their vectors (one pipelined ``executemany``) and returns the rows'
handles; a document's index is the list of its handles, so staged ingestions concatenate (the
orchestrator's Aggregate) into one index. SEARCHING returns, per query vector, the ``top_k``
texts of that index nearest by cosine distance (ties by text), one statement per invocation.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

from orchestrator.engines.base import EngineError, Invocation, InvocationOutput, PieceCallback
from orchestrator.engines.real.worker import WorkerEngine
from orchestrator.primitives import Kind

_SERVERS: dict[str, Any] = {}
_SLOCK = threading.Lock()


def embedded_server(data_dir: str | Path) -> str:
    """Start (or reuse) a pgserver PostgreSQL in ``data_dir``; return its connection URL. The
    server stops when the process exits."""
    key = str(Path(data_dir).resolve())
    with _SLOCK:
        if key not in _SERVERS:
            import pgserver
            Path(key).mkdir(parents=True, exist_ok=True)
            _SERVERS[key] = pgserver.get_server(key, cleanup_mode="stop")
        return _SERVERS[key].get_uri()


def _vec(v: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


class PgVectorEngine(WorkerEngine):
    """INGESTION (``texts``, ``vectors`` -> row handles) and SEARCHING (``queries`` vectors,
    ``index`` handles, ``params['top_k']`` -> texts per query) against PostgreSQL."""

    def __init__(self, *, name: str, url: str, dim: int, table: str = "teola_chunks",
                 max_batch: int = 256, hnsw: bool = True) -> None:
        if not table.isidentifier():
            raise ValueError(f"table must be a plain identifier, not {table!r}")
        super().__init__(name=name, kind="vectordb", serves=frozenset({Kind.INGESTION, Kind.SEARCHING}),
                         max_batch=max_batch)
        self.url, self.dim, self.table, self.hnsw = url, dim, table, hnsw
        self._conn = None

    def warm(self) -> None:
        self.connect()

    def connect(self) -> Any:
        if self._conn is None:
            import psycopg
            self._conn = psycopg.connect(self.url, autocommit=True)
            with self._conn.cursor() as cur:
                cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                            f"(id bigserial PRIMARY KEY, text text NOT NULL, emb vector({self.dim}) NOT NULL)")
                if self.hnsw:
                    cur.execute(f"CREATE INDEX IF NOT EXISTS {self.table}_emb ON {self.table} "
                                f"USING hnsw (emb vector_cosine_ops)")
        return self._conn

    def _run(self, batch: list[Invocation], t0: float, on_piece: PieceCallback | None) -> list[InvocationOutput]:
        import time
        conn = self.connect()
        values: dict[str, Any] = {}
        ing = [i for i in batch if i.kind == Kind.INGESTION]
        if ing:
            for inv, ids in zip(ing, self.ingest([(i.inputs["texts"], i.inputs["vectors"]) for i in ing])):
                values[inv.key] = ids
        for inv in batch:
            if inv.kind == Kind.SEARCHING:
                if "index" not in inv.inputs:
                    raise EngineError(f"{self.name}: SEARCHING {inv.key} names no index")
                values[inv.key] = self.search(inv.inputs["queries"], inv.inputs["index"], int(inv.params["top_k"]))
        done = time.perf_counter() - t0
        _ = conn
        return [InvocationOutput(values[i.key], done) for i in batch]

    def ingest(self, docs: Sequence[tuple[Sequence[str], Sequence[Sequence[float]]]]) -> list[list[int]]:
        """Insert every ``(texts, vectors)`` group in one pipelined statement batch; return each
        group's row ids (its index handles)."""
        rows = []
        for texts, vecs in docs:
            if len(texts) != len(vecs):
                raise EngineError(f"{self.name}: ingest got {len(texts)} texts but {len(vecs)} vectors")
            rows += [(t, _vec(v)) for t, v in zip(texts, vecs)]
        ids: list[int] = []
        with self.connect().cursor() as cur:
            if rows:
                cur.executemany(f"INSERT INTO {self.table} (text, emb) VALUES (%s, %s::vector) RETURNING id",
                                rows, returning=True)
                while True:
                    ids.append(int(cur.fetchone()[0]))
                    if not cur.nextset():
                        break
        out, lo = [], 0
        for texts, _ in docs:
            out.append(ids[lo:lo + len(texts)])
            lo += len(texts)
        return out

    def search(self, queries: Sequence[Sequence[float]], index: Sequence[int], top_k: int) -> list[list[str]]:
        """Per query vector, the ``top_k`` nearest texts among the rows ``index``."""
        if not queries:
            return []
        sql = (f"SELECT q.i, c.text FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, i) "
               f"CROSS JOIN LATERAL (SELECT text, emb <=> q.v AS d FROM {self.table} "
               f"WHERE id = ANY(%s) ORDER BY d, text LIMIT %s) c ORDER BY q.i, c.d, c.text")
        with self.connect().cursor() as cur:
            cur.execute(sql, ([_vec(q) for q in queries], [int(i) for i in index], top_k))
            found: list[list[str]] = [[] for _ in queries]
            for i, text in cur.fetchall():
                found[int(i) - 1].append(text)
        return found

    def close(self) -> None:
        super().close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
