"""Issue 14, item 7: the embedded PostgreSQL (trust auth) never puts its socket where other local
users can reach it, whatever the length of the data directory's path."""
from __future__ import annotations

import shutil
import stat
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("pgserver")
psycopg = pytest.importorskip("psycopg")


def _check(data_dir: Path) -> Path:
    from orchestrator.engines.real.pgvector import embedded_server, socket_dir, stop_embedded_server
    url = embedded_server(data_dir)
    try:
        sock = socket_dir(url)
        assert sock is not None
        mode = sock.stat().st_mode
        assert not mode & (stat.S_IRWXG | stat.S_IRWXO), f"{sock}: {stat.filemode(mode)}"
        assert (sock / ".s.PGSQL.5432").is_socket()
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        return sock
    finally:
        stop_embedded_server(data_dir)


def test_long_data_dir_keeps_the_socket_private(tmp_path) -> None:
    """Before: with a data path over ~100 characters pgserver (as root) put the socket in a 0777
    directory, and `trust` auth let any local user in as superuser."""
    data = tmp_path / ("d" * 90) / "pgdata"
    sock = _check(data)
    assert len(str(sock)) < 60 and sock.parent == Path(tempfile.gettempdir())
    # issue 28 item 9: the stopped server's short folder under the temp dir is gone (it left 38 MB)
    assert not sock.exists() and not data.is_symlink()
    again = _check(data)                              # a second start gets a fresh private folder
    assert not again.exists() and not data.exists()


def test_short_data_dir_holds_its_own_socket() -> None:
    base = Path(tempfile.mkdtemp(prefix="pgt-", dir="/tmp"))
    try:
        assert _check(base / "pg") == (base / "pg").resolve()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_long_data_dir_that_already_holds_data_is_refused(tmp_path) -> None:
    from orchestrator.engines.real.pgvector import private_pgdata
    data = tmp_path / ("d" * 90) / "pgdata"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("17\n")
    with pytest.raises(RuntimeError, match="too long"):
        private_pgdata(data)
