"""What every experiment kind gets from the runner: the run folder, seed, progress flag,
and helpers for atomic, resumable output; and the runner's rules for run folders, so that
results never mix (issue 14): unique run ids, folders created exclusively, resumes only under
the same config (its hash is kept in ``meta.json``), run ids confined to the results root."""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import IO, Annotated, Literal

import pandas as pd
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from flowmaker.names import NAME_RE, distinct, file_name, name_problem, path_inside


#: a config's list of registry names (selectors, solvers, apps): at least one, none twice
NameList = Annotated[list[str], Field(min_length=1), AfterValidator(distinct)]

from flowmaker.entry import UserError
from profiler.catalog import repo_root


class Execution(BaseModel):
    """Where an experiment's cells run (:mod:`experiments.executor`): top-level keys of an
    experiment config. Never part of what the cells compute: the config hash leaves these keys
    out, so a run may be resumed under another runtime or worker count."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    runtime: Literal["local", "ray"] = Field("local", description="local: worker processes on this machine; "
                                                                 "ray: Ray tasks")
    workers: int | None = Field(None, ge=1, description="local: processes (default 1: this process); ray: cells in "
                                                       "flight (default: the cluster's CPUs)")
    ray_address: str | None = Field(None, description="Ray cluster to join (default: RAY_ADDRESS, else a private "
                                                      "local instance)")

    def describe(self) -> str:
        """E.g. ``2 local worker(s)`` or ``Ray, 4 cell(s) in flight``, for reports."""
        if self.runtime == "ray":
            return f"Ray, {self.workers or 'one per CPU'} cell(s) in flight"
        return f"{self.workers or 1} local worker(s)"


#: the top-level config keys that are :class:`Execution`'s
EXECUTION_KEYS = tuple(Execution.model_fields)


@dataclass(frozen=True)
class RunContext:
    run_dir: Path
    seed: int
    progress: bool
    config_path: Path
    execution: Execution = Execution()

    def cell_path(self, name: str, suffix: str = ".parquet") -> Path:
        """Where one finished unit of work is stored; existence means done (resume skips it)."""
        d = self.run_dir / "cells"
        d.mkdir(parents=True, exist_ok=True)
        return d / (file_name(name) + suffix)     # a key built from user values: never a path of its own

    def file_path(self, *parts: str) -> Path:
        """``run_dir/parts...``, each part a safe file name (``flowmaker.names.file_name``), its
        folder made: where a kind stores a file named after a task, an app or a selector."""
        p = path_inside(self.run_dir, *parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


#: a run id is one plain path component: no separators, no leading dot, nothing to resolve
RUN_ID_PATTERN = NAME_RE


def new_run_id() -> str:
    """``YYYYmmddTHHMMSSZ-<6 random hex digits>`` (UTC): two runs started in the same second
    still get folders of their own."""
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def config_hash(config: dict) -> str:
    """SHA-256 of the resolved config as canonical JSON (key order and YAML layout do not count;
    nor do the :data:`EXECUTION_KEYS`, which say where cells run, not what they compute)."""
    config = {k: v for k, v in config.items() if k not in EXECUTION_KEYS}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _stored_hash(run_dir: Path) -> str | None:
    """The config hash a run folder was started with: ``meta.json``'s, else (older runs) the hash
    of its ``config.yaml``; None for a folder with neither."""
    from flowmaker.inputs import load_data, read_text
    try:
        meta = json.loads(read_text(run_dir / "meta.json"))     # bounded: a FIFO there never blocks
        if isinstance(meta, dict) and isinstance(meta.get("config_sha256"), str):
            return meta["config_sha256"]
    except ValueError:                                          # InputError, JSONDecodeError
        pass
    try:
        old = load_data(run_dir / "config.yaml")
    except ValueError:
        return None
    return config_hash(old) if isinstance(old, dict) else None


def open_run_dir(root: Path, experiment: str, run_id: str | None, config: dict, *,
                 force: bool = False) -> tuple[Path, str | None]:
    """The run folder ``root/experiment/run_id``, and the hash of the config it was started with
    when it is a resume (None for a new run).

    Without ``run_id``: a new id, its folder created exclusively (never shared with another
    run). With one: it must match :data:`RUN_ID_PATTERN` and stay inside ``root``; an existing
    folder is resumed only when its config hash equals ``config``'s, and one that holds cells but
    neither ``meta.json`` nor ``config.yaml`` (nothing to check the config against) not at all,
    unless ``force``."""
    if run_id is None:
        for _ in range(8):
            run_dir = root / experiment / new_run_id()
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            try:
                run_dir.mkdir(exist_ok=False)
                return run_dir, None
            except FileExistsError:
                continue
        raise UserError(f"{root / experiment}: could not create a fresh run folder")
    if (why := name_problem(run_id)) is not None:
        raise UserError(f"--run-id {run_id[:80]!r}: {why}")
    run_dir = root / experiment / run_id
    base = root.resolve()
    if not run_dir.resolve().is_relative_to(base):
        raise UserError(f"--run-id {run_id!r}: resolves outside the results root {base}")
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
        return run_dir, None
    except FileExistsError:
        pass
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: exists and is not a folder")
    old, new = _stored_hash(run_dir), config_hash(config)
    if old is None and not force and any((run_dir / "cells").glob("*")):
        raise UserError(f"{run_dir}: has cells but no meta.json or config.yaml, so nothing says which config made "
                        f"them; start a new run (no --run-id), or pass --force to resume it anyway")
    if old is not None and old != new and not force:
        raise UserError(f"{run_dir}: started with a different config (sha256 {old[:12]}, now {new[:12]}); "
                        f"its cells would mix with this one's: start a new run (no --run-id), or pass --force")
    return run_dir, old


class RunLock:
    """An exclusive lock on a run folder for the life of this process (``.lock`` in it, holding
    the owner's pid): a second process on the same run id is refused rather than mixing cells.
    ``flock`` where the platform has it (released by the kernel however the owner dies), else an
    exclusively created file removed on :meth:`release`."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._fh: IO[str] | None = None
        try:
            import fcntl
        except ImportError:
            fcntl = None
        if fcntl is None:
            try:
                self._fh = open(self.path, "x")
            except FileExistsError:
                raise UserError(self._busy()) from None
        else:
            self._fh = open(self.path, "a+")
            try:
                fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._fh.close()
                raise UserError(self._busy()) from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"{os.getpid()}\n")
        self._fh.flush()

    def _busy(self) -> str:
        try:
            pid = self.path.read_text().strip() or "?"
        except OSError:
            pid = "?"
        return (f"{self.path.parent}: in use by another process (pid {pid}); wait for it to finish, or start "
                f"a new run (no --run-id)")

    def release(self) -> None:
        if self._fh is None:
            return
        try:
            import fcntl  # noqa: F401 - flock: the kernel drops the lock on close
        except ImportError:
            self.path.unlink(missing_ok=True)
        self._fh.close()
        self._fh = None


def check_finite(value: object, field: str) -> None:
    """UserError naming the first NaN or infinite number in ``value`` (nested dicts and lists):
    a limit of ``.inf`` or ``.nan`` in a config is a promise that a run never ends."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"field '{field}': must be a finite number, not {value}")
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite(v, f"{field}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(v, f"{field}[{i}]")


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=repo_root(), timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def write_meta(run_dir: Path, *, seed: int, config_path: Path, extra: dict | None = None) -> None:
    pkgs = ["numpy", "pandas", "pyarrow", "pydantic", "ortools", "pulp", "highspy", "optuna", "torch"]
    meta = {
        "git_sha": git_sha(),
        "seed": seed,
        "config": str(config_path),
        "started_at": datetime.now(timezone.utc).isoformat(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {p: v for p in pkgs if (v := _version(p))},
        **(extra or {}),
    }
    atomic_write_text(run_dir / "meta.json", json.dumps(meta, indent=1))


def finish_meta(run_dir: Path, *, wall_s: float, cpu_s: float) -> None:
    """Add the run's measured ``wall_s`` and ``cpu_s`` (from the runner's start to the kind's return,
    report and publishing included) and ``finished_at`` to ``meta.json``, with the load average then."""
    path = run_dir / "meta.json"
    meta = json.loads(path.read_text()) if path.exists() else {}
    meta.update(wall_s=round(wall_s, 3), cpu_s=round(cpu_s, 3), finished_at=datetime.now(timezone.utc).isoformat(),
                load_average=[round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None)
    atomic_write_text(path, json.dumps(meta, indent=1))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _new_temp(path: Path) -> tuple[int, str]:
    """A temporary file beside ``path`` with the mode a plain ``open(path, "w")`` gives
    (``0o666 & ~umask``): ``mkstemp``'s 0600 made result files mix 0600 and 0644 (issue 28)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, tmp


def atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = _new_temp(path)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    fd, tmp = _new_temp(path)
    os.close(fd)
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
