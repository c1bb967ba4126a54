"""What every experiment kind gets from the runner: the run folder, seed, progress flag,
and helpers for atomic, resumable output."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd


class UserError(Exception):
    """A mistake in the user's input: printed as one line, exit status 2."""


@dataclass(frozen=True)
class RunContext:
    run_dir: Path
    seed: int
    progress: bool
    config_path: Path

    def cell_path(self, name: str, suffix: str = ".parquet") -> Path:
        """Where one finished unit of work is stored; existence means done (resume skips it)."""
        d = self.run_dir / "cells"
        d.mkdir(parents=True, exist_ok=True)
        return d / f"{name}{suffix}"


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent, timeout=5)
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


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
