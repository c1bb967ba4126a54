"""Measured profile runs: `python -m profiler run configs/profile/NAME.yaml`.

A `ProfileConfig` names a backend (torch | fingerprint | trtllm), the models, the device and a
grid; `run_profile` measures every point not measured yet and writes the one table schema of
profiler/table.py (parquet). Every measured point is appended at once to a raw log next to
the table (`<out>.jsonl`: the table columns plus `layers`, timing spread and sample counts),
so an interrupted run resumes where it stopped; the parquet is rebuilt from the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from profiler.catalog import CatalogError, GpuSpec, ModelSpec, configs_dir, load_gpus, load_models, repo_root

RAW_KEY = ("model", "gpu", "tp", "pp", "layers", "batch", "prompt_tokens", "output_tokens")


class ProfileConfig(BaseModel):
    """One profiling job (configs/profile/*.yaml). Paths are relative to the repository root."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    backend: Literal["torch", "fingerprint", "trtllm"]
    device: str = Field(default="cuda", description="torch device: cuda, cuda:1, cpu")
    gpu: str = Field(description="catalog name in the table key (configs/gpus.yaml or "
                                 "configs/profile/devices.yaml)")
    models: list[str] = Field(min_length=1)
    deploy: list[tuple[PositiveInt, PositiveInt]] = Field(
        default=[(1, 1)], description="(tp, pp) pairs; torch and fingerprint measure (1, 1) only")
    batches: list[PositiveInt] = Field(min_length=1)
    prompt_tokens: list[PositiveInt] = Field(min_length=1)
    output_tokens: list[PositiveInt] = Field(min_length=1)
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    warmup: int = Field(default=2, ge=0)
    repeats: int = Field(default=5, ge=1)
    decode_steps: int = Field(default=8, ge=1)
    min_time_s: float = Field(default=0.0, ge=0, description="sample each point at least this long")
    threads: PositiveInt | None = Field(default=None, description="CPU threads (torch default: all)")
    cpu_timer: Literal["wall", "thread"] = Field(
        default="wall", description="CPU: wall clock, or the thread's CPU time (threads=1; robust "
                                    "on a shared machine)")
    fingerprint_layers: tuple[PositiveInt, PositiveInt] = Field(
        default=(1, 2), description="fingerprint backend: the two copy depths (MaverIQ: 1 and 2)")
    out: str = Field(description="parquet table to write, e.g. results/profiles/NAME.parquet")


@dataclass(frozen=True)
class RunSummary:
    table: Path
    rows: int
    measured: int
    skipped: int
    complete: bool


def load_profile_config(path: Path | str) -> ProfileConfig:
    """Read and validate a profile config; CatalogError names the file and the field."""
    from profiler.catalog import config_path, parse_model, read_yaml_file
    path = config_path(path, "profile", "profile config", exclude=("devices", "models"))  # their shared data
    return parse_model(ProfileConfig, read_yaml_file(path), path, whole="(file)")


def all_models() -> dict[str, ModelSpec]:
    """configs/models.yaml plus the measurement-only shapes of configs/profile/models.yaml."""
    extra = configs_dir() / "profile" / "models.yaml"
    return {**load_models(), **(load_models(extra) if extra.is_file() else {})}


def all_gpus() -> dict[str, GpuSpec]:
    """configs/gpus.yaml plus measurement devices of configs/profile/devices.yaml (e.g. cpu)."""
    extra = configs_dir() / "profile" / "devices.yaml"
    return {**load_gpus(), **(load_gpus(extra) if extra.is_file() else {})}


def raw_log_path(table: Path) -> Path:
    return table.with_suffix(".jsonl")


def read_raw(path: Path) -> dict[tuple, dict]:
    """Rows of a raw log by RAW_KEY (a later line replaces an earlier one; a torn last line
    from an interrupted write is ignored)."""
    rows: dict[tuple, dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows[tuple(r[k] for k in RAW_KEY)] = r
    return rows


def rows_to_table(rows: Iterable[dict[str, Any]]):
    """A validated DataFrame in profiler.table.SCHEMA from row dicts (extra keys dropped)."""
    import pandas as pd  # noqa: PLC0415
    from profiler.table import KEY, SCHEMA, validate_table  # noqa: PLC0415
    df = pd.DataFrame([{c: r[c] for c in SCHEMA.names} for r in rows], columns=SCHEMA.names)
    for c in KEY[2:]:
        df[c] = df[c].astype("int64")
    df = df.sort_values(KEY, kind="stable").reset_index(drop=True)
    validate_table(df)
    return df


def table_rows(cfg: ProfileConfig, raw: dict[tuple, dict], models: dict[str, ModelSpec]) -> list[dict]:
    """The table rows a config's raw log yields: full-depth rows, or fingerprint extrapolations."""
    from profiler.fingerprint import extrapolate  # noqa: PLC0415
    mine = [r for r in raw.values() if r["model"] in cfg.models and r["gpu"] == cfg.gpu]
    layers = {n: models[n].layers for n in cfg.models}
    if cfg.backend == "fingerprint":
        return extrapolate(mine, layers, cfg.fingerprint_layers)
    return [r for r in mine if r["layers"] == layers[r["model"]]]


def _depths(cfg: ProfileConfig, m: ModelSpec) -> tuple[int, ...]:
    return tuple(cfg.fingerprint_layers) if cfg.backend == "fingerprint" else (m.layers,)


def _todo(cfg: ProfileConfig, models: dict[str, ModelSpec], raw: dict[tuple, dict]) -> list[tuple]:
    grid = [(b, p, o) for b in cfg.batches for p in cfg.prompt_tokens for o in cfg.output_tokens]
    todo = []
    for name in cfg.models:
        for depth in _depths(cfg, models[name]):
            for tp, pp in cfg.deploy:
                pts = [pt for pt in grid if (name, cfg.gpu, tp, pp, depth) + pt not in raw]
                todo.append((name, depth, tp, pp, pts))
    return todo


def _check(cfg: ProfileConfig, models: dict[str, ModelSpec], gpus: dict[str, GpuSpec]) -> None:
    for n in cfg.models:
        if n not in models:
            raise CatalogError(f"models: unknown model '{n}'; known: {', '.join(sorted(models))}")
    if cfg.gpu not in gpus:
        raise CatalogError(f"gpu: unknown '{cfg.gpu}'; known: {', '.join(sorted(gpus))}")
    a1, a2 = cfg.fingerprint_layers
    if cfg.backend == "fingerprint" and not a1 < a2 <= min(models[n].layers for n in cfg.models):
        raise CatalogError(f"fingerprint_layers: need a1 < a2 <= the shallowest model's layers, "
                           f"got {a1}, {a2}")
    if cfg.backend != "trtllm" and list(cfg.deploy) != [(1, 1)]:
        raise CatalogError(f"deploy: backend '{cfg.backend}' measures tp=1, pp=1 only "
                           "(use backend trtllm for tensor/pipeline parallelism)")


def run_profile(cfg: ProfileConfig, *, out: Path | None = None, max_points: int | None = None,
                progress: bool = True) -> RunSummary:
    """Measure the points of `cfg` missing from its raw log, then (re)write the table.

    `max_points` stops after that many new points (the table then holds what is done; running
    again resumes). Returns counts of measured and skipped (already logged) points.
    """
    from tqdm import tqdm  # noqa: PLC0415
    models, gpus = all_models(), all_gpus()
    _check(cfg, models, gpus)
    if cfg.backend == "trtllm":  # fail before any file or progress bar exists
        from profiler.trtllm_backend import require  # noqa: PLC0415
        require()
    table = Path(out) if out else repo_root() / cfg.out
    table.parent.mkdir(parents=True, exist_ok=True)
    log = raw_log_path(table)
    raw = read_raw(log)
    todo = _todo(cfg, models, raw)
    left = sum(len(t[-1]) for t in todo)
    total = len(cfg.batches) * len(cfg.prompt_tokens) * len(cfg.output_tokens) * sum(
        len(_depths(cfg, models[n])) for n in cfg.models) * len(cfg.deploy)
    budget = left if max_points is None else min(left, max_points)
    measured = 0
    bar = tqdm(total=total, initial=total - left, disable=not progress, unit="pt", desc=cfg.name)
    with open(log, "a", encoding="utf-8") as fh:
        for row in _measure(cfg, models, todo, budget):
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            raw[tuple(row[k] for k in RAW_KEY)] = row
            measured += 1
            bar.set_postfix_str(f"{row['model']} L{row['layers']} b{row['batch']} p{row['prompt_tokens']}")
            bar.update()
    bar.close()
    from profiler.table import write_table  # noqa: PLC0415
    df = rows_to_table(table_rows(cfg, raw, models))
    write_table(df, table)
    return RunSummary(table=table, rows=len(df), measured=measured, skipped=total - left,
                      complete=measured == left)


def _measure(cfg: ProfileConfig, models: dict[str, ModelSpec], todo: list[tuple], budget: int):
    if budget <= 0:
        return
    if cfg.backend == "trtllm":
        from profiler.trtllm_backend import measure_grid as trt_grid  # noqa: PLC0415
        for name, _, tp, pp, pts in todo:
            for row in trt_grid(models[name], gpu_name=cfg.gpu, tp=tp, pp=pp, points=pts[:budget],
                                dtype=cfg.dtype, repeats=cfg.repeats):
                yield row
                budget -= 1
            if budget <= 0:
                return
        return
    from profiler.torch_bench import BenchSettings, Device, measure_grid  # noqa: PLC0415
    from profiler.torch_model import Arch  # noqa: PLC0415
    settings = BenchSettings(warmup=cfg.warmup, repeats=cfg.repeats, decode_steps=cfg.decode_steps,
                             min_time_s=cfg.min_time_s, dtype=cfg.dtype, threads=cfg.threads,
                             cpu_timer=cfg.cpu_timer)
    device = Device(cfg.device, settings)
    try:
        for name, depth, _, _, pts in todo:
            if not pts:
                continue
            arch = Arch.from_mapping(models[name].model_dump()).with_layers(depth)
            for row in measure_grid(arch, model_name=name, gpu_name=cfg.gpu, device=device,
                                    settings=settings, points=pts[:budget]):
                yield row
                budget -= 1
            if budget <= 0:
                return
    finally:
        device.close()
