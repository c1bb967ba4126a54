"""Vector search on PostgreSQL + pgvector: the real store behind INGESTION and SEARCHING.

Point it at a user's server (``url``), or let :func:`embedded_server` start a real local one
from the PyPI package ``pgserver`` (PostgreSQL binaries with the pgvector extension; ~1 s).

Rows live in one table (``id bigserial, text, emb vector(dim)``). INGESTION inserts a batch of
texts with their vectors (one pipelined ``executemany``; vectors travel in pgvector's binary
format through the ``pgvector`` adapter, not as text literals) and returns the rows' handles; a
document's index is the list of its handles, so staged ingestions concatenate (the
orchestrator's Aggregate) into one index. SEARCHING returns, per query vector, the ``top_k``
texts of that index nearest by cosine distance (ties by text), one statement per invocation.

When an approximate index helps: a search over a document's own chunks (a few to a few thousand
rows) is exact, a primary-key lookup of its rows and a sort by distance, which beats any index.
An HNSW index pays off only for searches over (most of) a large table, and maintaining it while
rows arrive made ingestion ~15x slower (12.4 s vs 0.79 s for 2,000 384-d rows). So by default
(``hnsw=None``) the index is built once, after an ingestion leaves the table with
``hnsw_min_rows`` rows or more, and a search whose candidates are the whole table is an
ordered HNSW scan (``ORDER BY emb <=> q LIMIT k``, checked with ``EXPLAIN`` in the tests);
``hnsw=True`` builds it at once, ``False`` never.

The embedded server trusts whoever reaches its Unix socket (pgserver's ``trust`` auth), so the
socket must sit where only its owner can reach it: the data directory itself (PostgreSQL keeps
it 0700). pgserver moves the socket elsewhere when the data path is too long for a socket path
(~100 characters) and, run as root, makes that directory 0777: any local user could then
connect as superuser (issue 14). So a long ``data_dir`` becomes a symlink to a short private
directory (``mkdtemp``: random name, 0700) that holds the data and the socket, and the socket
directory is checked after start.
"""
from __future__ import annotations

import atexit
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlparse
from typing import Any, Sequence

from orchestrator.engines.base import EngineError, Invocation, InvocationOutput, PieceCallback
from orchestrator.engines.real.worker import WorkerEngine
from orchestrator.primitives import Kind

_SERVERS: dict[str, Any] = {}
_SLOCK = threading.Lock()
SOCKET_PATH_MAX = 100          # Unix socket paths end at 107 bytes; a margin for the lock file's sake
_SOCKET_NAME = ".s.PGSQL.5432"


def _short_enough(pgdata: Path) -> bool:
    return len(str(pgdata / _SOCKET_NAME)) <= SOCKET_PATH_MAX


def private_pgdata(data_dir: str | Path) -> Path:
    """The directory that really holds the cluster for ``data_dir``: ``data_dir`` itself when a
    socket inside it has a short enough path; else a fresh ``mkdtemp`` directory (0700, random
    name) that ``data_dir`` becomes a symlink to (a later call follows the symlink)."""
    p = Path(data_dir).expanduser()
    if p.is_symlink() and not p.exists():          # its fallback was removed by a stop: start afresh
        p.unlink()
    if p.is_symlink():
        real = p.resolve()
        if not _short_enough(real) or real.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise RuntimeError(f"{p} -> {real}: not a short private data directory for PostgreSQL")
        return real
    real = p.resolve()
    if _short_enough(real):
        real.mkdir(parents=True, exist_ok=True)
        return real
    if real.exists() and any(real.iterdir()):
        raise RuntimeError(f"{p}: path too long ({len(str(real))} characters) to keep PostgreSQL's socket "
                           f"private, and it already holds data: move it to a shorter path")
    if real.exists():
        real.rmdir()
    real.parent.mkdir(parents=True, exist_ok=True)
    bases = [b for b in (tempfile.gettempdir(), "/tmp") if len(b) + 30 <= SOCKET_PATH_MAX]
    if not bases:
        raise RuntimeError("no short temporary directory for PostgreSQL's socket (set TMPDIR=/tmp)")
    short = Path(tempfile.mkdtemp(prefix="fmpg-", dir=bases[0]))
    p.symlink_to(short, target_is_directory=True)
    if not _FALLBACKS:
        atexit.register(_remove_fallbacks)        # registered before pgserver's stop: runs after it
    _FALLBACKS[str(short)] = p
    return short


#: short data folders made under the system temp folder -> the data_dir symlinked to each; a stop
#: (or the process's exit) removes both: nothing of ours stays in /tmp (issue 28: 38 MB did)
_FALLBACKS: dict[str, Path] = {}


def _remove_fallback(key: str) -> None:
    link = _FALLBACKS.pop(key, None)
    if link is None:
        return
    shutil.rmtree(key, ignore_errors=True)
    if link.is_symlink():
        link.unlink(missing_ok=True)


def _remove_fallbacks() -> None:
    for key in list(_FALLBACKS):
        server = _SERVERS.pop(key, None)
        if server is not None:
            server.cleanup()
        _remove_fallback(key)


def socket_dir(url: str) -> Path | None:
    """The Unix-socket directory of a ``postgresql://...?host=/dir`` URL (None for TCP)."""
    host = parse_qs(urlparse(url).query).get("host", [None])[0]
    return Path(host) if host and host.startswith("/") else None


def embedded_server(data_dir: str | Path) -> str:
    """Start (or reuse) a pgserver PostgreSQL for ``data_dir`` (see :func:`private_pgdata`);
    return its connection URL. The server stops when the process exits. Raises RuntimeError,
    after stopping it, if its socket directory is reachable by other users."""
    with _SLOCK:
        key = str(private_pgdata(data_dir))
        if key not in _SERVERS:
            import pgserver
            _SERVERS[key] = pgserver.get_server(key, cleanup_mode="stop")
            sock = socket_dir(_SERVERS[key].get_uri())
            if sock is not None and sock.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                _SERVERS.pop(key).cleanup()
                raise RuntimeError(f"PostgreSQL's socket directory {sock} is open to other users "
                                   f"(mode {stat.filemode(sock.stat().st_mode)}); stopped it")
        return _SERVERS[key].get_uri()


def stop_embedded_server(data_dir: str | Path) -> None:
    """Stop the server :func:`embedded_server` started for ``data_dir`` (no-op if none)."""
    with _SLOCK:
        key = str(Path(data_dir).expanduser().resolve())
        server = _SERVERS.pop(key, None)
    if server is not None:
        server.cleanup()
    _remove_fallback(key)


def _vec(v: Sequence[float]) -> Any:
    import numpy as np
    return np.asarray(v, dtype=np.float32)


class PgVectorEngine(WorkerEngine):
    """INGESTION (``texts``, ``vectors`` -> row handles) and SEARCHING (``queries`` vectors,
    ``index`` handles, ``params['top_k']`` -> texts per query) against PostgreSQL."""

    def __init__(self, *, name: str, url: str, dim: int, table: str = "teola_chunks",
                 max_batch: int = 256, hnsw: bool | None = None, hnsw_min_rows: int = 10_000) -> None:
        if not table.isidentifier():
            raise ValueError(f"table must be a plain identifier, not {table!r}")
        super().__init__(name=name, kind="vectordb", serves=frozenset({Kind.INGESTION, Kind.SEARCHING}),
                         max_batch=max_batch)
        self.url, self.dim, self.table, self.hnsw = url, dim, table, hnsw
        self.hnsw_min_rows = hnsw_min_rows
        self._conn = None
        self._rows = 0                # rows in the table (counted at connect, kept up to date)
        self._indexed = False

    def warm(self) -> None:
        self.connect()

    def connect(self) -> Any:
        if self._conn is None:
            import psycopg
            from pgvector.psycopg import register_vector
            conn = psycopg.connect(self.url, autocommit=True)
            with conn.cursor() as cur:
                cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                            f"(id bigserial PRIMARY KEY, text text NOT NULL, emb vector({self.dim}) NOT NULL)")
                register_vector(conn)
                cur.execute(f"SELECT count(*) FROM {self.table}")
                self._rows = int(cur.fetchone()[0])
                cur.execute("SELECT 1 FROM pg_indexes WHERE tablename = %s AND indexname = %s",
                            (self.table, f"{self.table}_emb"))
                self._indexed = cur.fetchone() is not None
            self._conn = conn
            if self.hnsw:
                self.build_index()
        return self._conn

    def build_index(self) -> None:
        """Build the HNSW cosine index (once; a no-op when it exists)."""
        if not self._indexed:
            with self.connect().cursor() as cur:
                cur.execute(f"CREATE INDEX IF NOT EXISTS {self.table}_emb ON {self.table} "
                            f"USING hnsw (emb vector_cosine_ops)")
            self._indexed = True

    @property
    def indexed(self) -> bool:
        return self._indexed

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
        with self.connect().cursor(binary=True) as cur:
            if rows:
                cur.executemany(f"INSERT INTO {self.table} (text, emb) VALUES (%s, %b) RETURNING id",
                                rows, returning=True)
                while True:
                    ids.append(int(cur.fetchone()[0]))
                    if not cur.nextset():
                        break
        self._rows += len(ids)
        if self.hnsw is None and self._rows >= self.hnsw_min_rows:
            self.build_index()             # once, over the rows in place: cheaper than while inserting
        out, lo = [], 0
        for texts, _ in docs:
            out.append(ids[lo:lo + len(texts)])
            lo += len(texts)
        return out

    def search_sql(self, n_candidates: int) -> str:
        """The statement :meth:`search` runs for ``n_candidates`` rows (module docstring): exact
        over the candidates, or an HNSW-ordered scan when they are the whole indexed table."""
        if self._indexed and n_candidates >= self._rows:
            inner = f"SELECT text, emb <=> q.v AS d FROM {self.table} ORDER BY emb <=> q.v LIMIT %s"
        else:
            inner = f"SELECT text, emb <=> q.v AS d FROM {self.table} WHERE id = ANY(%s) ORDER BY d, text LIMIT %s"
        return (f"SELECT q.i, c.text FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, i) "
                f"CROSS JOIN LATERAL ({inner}) c ORDER BY q.i, c.d, c.text")

    def search(self, queries: Sequence[Sequence[float]], index: Sequence[int], top_k: int) -> list[list[str]]:
        """Per query vector, the ``top_k`` nearest texts among the rows ``index``."""
        if not queries:
            return []
        conn = self.connect()
        ids = sorted({int(i) for i in index})
        sql = self.search_sql(len(ids))
        args = ([_vec(q) for q in queries], top_k) if "ANY(" not in sql else ([_vec(q) for q in queries], ids, top_k)
        with conn.cursor(binary=True) as cur:
            cur.execute(sql, args)
            found: list[list[str]] = [[] for _ in queries]
            for i, text in cur.fetchall():
                found[int(i) - 1].append(text)
        return found

    def close(self) -> None:
        super().close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
