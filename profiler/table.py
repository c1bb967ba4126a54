"""The one latency/memory table schema every profiler backend writes (parquet), and lookups.

Units are in the column names: seconds (_s) and GB = 1e9 bytes (_gb, all GPUs of the
instance together). Key: (model, gpu, tp, pp, batch, prompt_tokens, output_tokens).
"""

from __future__ import annotations

import datetime as dt
from importlib import metadata
from itertools import product
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from profiler.analytic import AnalyticModel, unsupported_reason
from profiler.catalog import GpuSpec, ModelSpec

KEY = ["model", "gpu", "tp", "pp", "batch", "prompt_tokens", "output_tokens"]
METRICS = ["ttft_s", "tpot_s", "latency_s", "mem_gb", "weights_gb", "kv_gb", "activation_gb"]
PROVENANCE = ["backend", "device_name", "driver", "library_versions", "dtype", "measured_at"]
SCHEMA = pa.schema(
    [("model", pa.string()), ("gpu", pa.string())]
    + [(c, pa.int64()) for c in KEY[2:]]
    + [(c, pa.float64()) for c in METRICS]
    + [(c, pa.string()) for c in PROVENANCE]
)


#: key and metric columns that must be > 0: a deployment has >= 1 GPU per axis, a call >= 1 token
#: of each kind, and a measured time or footprint is never zero
POSITIVE = {"tp", "pp", "batch", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "latency_s", "mem_gb"}
#: the largest table file read (the analytic grid of every model and GPU is ~10 MB)
MAX_TABLE_BYTES = 512 * 2**20


class TableError(ValueError):
    """The table violates SCHEMA; the message names the column."""


def _version() -> str:
    try:
        return metadata.version("flowmaker")
    except metadata.PackageNotFoundError:
        return "unknown"


def validate_table(df: pd.DataFrame) -> None:
    """Raise TableError on a missing column, wrong dtype, negative/NaN number or duplicate key."""
    for f in SCHEMA:
        if f.name not in df.columns:
            raise TableError(f"missing column '{f.name}'")
        col = df[f.name]
        if pa.types.is_string(f.type):
            if not (pd.api.types.is_string_dtype(col) or pd.api.types.is_object_dtype(col)) or not all(
                    isinstance(v, str) for v in col):
                raise TableError(f"column '{f.name}' must hold strings")
            continue
        want_int = pa.types.is_integer(f.type)
        ok = pd.api.types.is_integer_dtype(col) if want_int else pd.api.types.is_numeric_dtype(col)
        if not ok or pd.api.types.is_bool_dtype(col):
            raise TableError(f"column '{f.name}' must be {'integer' if want_int else 'numeric'}, got {col.dtype}")
        if col.isna().any():
            raise TableError(f"column '{f.name}' has NaN")
        if not want_int and not np.isfinite(col.to_numpy(dtype=float)).all():
            raise TableError(f"column '{f.name}' has an infinite value")
        if (col < 0).any():
            raise TableError(f"column '{f.name}' has negative values")
        if f.name in POSITIVE and (col <= 0).any():
            raise TableError(f"column '{f.name}' must be > 0 (got {col[col <= 0].iloc[0].item()!r} "
                             f"in row {int((col <= 0).to_numpy().argmax())})")
    dup = df.duplicated(subset=KEY)
    if dup.any():
        row = df.loc[dup.idxmax(), KEY].to_dict()
        raise TableError(f"duplicate key (columns {', '.join(KEY)}): {row}")


def write_table(df: pd.DataFrame, path: Path | str) -> None:
    """Validate and write `df` as parquet with SCHEMA (parent folder must exist)."""
    validate_table(df)
    pq.write_table(pa.Table.from_pandas(df[SCHEMA.names], schema=SCHEMA, preserve_index=False), path)


def read_table(path: Path | str) -> pd.DataFrame:
    """Read a parquet table and validate it; TableError for a file that is missing, too large
    (:data:`MAX_TABLE_BYTES`), not parquet (a CSV, a truncated file) or off the schema."""
    p = Path(path)
    try:
        if not p.is_file():
            raise TableError("no such file" if not p.exists() else "not a regular file")
        if p.stat().st_size > MAX_TABLE_BYTES:
            raise TableError(f"larger than {MAX_TABLE_BYTES // 2**20} MiB")
        df = pq.read_table(p).to_pandas()
    except TableError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = " ".join(str(exc).split())[:200]
        raise TableError(f"not a readable parquet table ({first})") from None
    validate_table(df)
    return df


def build_analytic_table(models: Iterable[ModelSpec], gpus: Iterable[GpuSpec],
                         configs: Iterable[tuple[int, int]], batches: Iterable[int],
                         prompt_tokens: Iterable[int], output_tokens: Iterable[int],
                         model: AnalyticModel | None = None) -> pd.DataFrame:
    """Analytic predictions on the full grid; (model, tp, pp) combinations the model cannot be
    sharded into (see `unsupported_reason`) are left out. Rows that do not fit in memory stay:
    filter with mem_gb <= tp*pp*gpu.mem_gb."""
    am = model or AnalyticModel()
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    libs = f"flowmaker {_version()}"
    rows = []
    batches, prompt_tokens, output_tokens = list(batches), list(prompt_tokens), list(output_tokens)
    for m, g, (tp, pp) in product(list(models), list(gpus), list(configs)):
        if unsupported_reason(m, tp, pp):
            continue
        for b, p, o in product(batches, prompt_tokens, output_tokens):
            pr = am.predict(m, g, tp=tp, pp=pp, batch=b, prompt_tokens=p, output_tokens=o)
            rows.append((m.name, g.name, tp, pp, b, p, o, pr.ttft_s, pr.tpot_s, pr.latency_s, pr.mem_gb,
                         pr.weights_gb, pr.kv_gb, pr.activation_gb, "analytic", g.name, "", libs,
                         "bf16", now))
    df = pd.DataFrame(rows, columns=SCHEMA.names)
    for c in KEY[2:]:
        df[c] = df[c].astype("int64")
    return df


def _interp_axis(values: np.ndarray, x: float) -> list[tuple[float, float]]:
    """(grid value, weight) pairs bracketing x; clamps outside the grid to the nearest end."""
    if x <= values[0]:
        return [(values[0], 1.0)]
    if x >= values[-1]:
        return [(values[-1], 1.0)]
    i = int(np.searchsorted(values, x))
    lo, hi = values[i - 1], values[i]
    w = (x - lo) / (hi - lo)
    return [(lo, 1.0 - w), (hi, w)]


def lookup(table: pd.DataFrame, model: str, gpu: str, tp: int, pp: int, batch: float,
           prompt_tokens: float, output_tokens: float) -> dict[str, float]:
    """Metrics at a point, trilinear in (batch, prompt_tokens, output_tokens) over the grid.

    Exact match on (model, gpu, tp, pp); between grid points each metric is interpolated
    linearly along each axis; outside the grid it is clamped to the nearest grid value (no
    extrapolation). KeyError when the slice is empty or a needed grid corner is missing.
    """
    sub = table[(table.model == model) & (table.gpu == gpu) & (table.tp == tp) & (table.pp == pp)]
    if sub.empty:
        raise KeyError(f"no rows for model={model} gpu={gpu} tp={tp} pp={pp}")
    idx = sub.set_index(["batch", "prompt_tokens", "output_tokens"])[METRICS]
    axes = [np.sort(sub[c].unique()) for c in ("batch", "prompt_tokens", "output_tokens")]
    out = dict.fromkeys(METRICS, 0.0)
    for (b, wb), (p, wp), (o, wo) in product(*(_interp_axis(a, x) for a, x in
                                               zip(axes, (batch, prompt_tokens, output_tokens)))):
        w = wb * wp * wo
        if w == 0.0:
            continue
        try:
            row = idx.loc[(b, p, o)]
        except KeyError:
            raise KeyError(f"grid point batch={b} prompt={p} output={o} missing for {model}/{gpu}") from None
        for c in METRICS:
            out[c] += w * float(row[c])
    return out
