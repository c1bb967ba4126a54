"""Timing claims of the measured profiler backends on CPU: ``python -m experiments.run bench_measured``.

Measures the tiny models (full depth, and the fingerprint extrapolation of ``tiny-llama``) on
the grid the CI tests use and checks what only a quiet machine can show:

- TTFT grows with the prompt (64 -> 192 tokens) and with the batch (1 -> 4 -> 8); TPOT does
  not fall by more than 10% from one batch to the next and grows from batch 1 to 8;
- the fingerprint's TTFT and TPOT are within 15% (MAPE) of full depth.

The CI tests (tests/profiler/test_measured.py) keep the deterministic checks (schema, KV and
memory accounting, memory of the fingerprint); these wall-clock claims failed there whenever
another job used the CPU. Prints the MAPE table and one line per failed claim (a warning each;
``results.parquet``: one row, the number of failed claims and ``holds``).
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext
from experiments.kinds._bench import Report

GRID = {"batches": [1, 4, 8], "prompt_tokens": [64, 192], "output_tokens": [16]}
TINY = dict(device="cpu", gpu="cpu", dtype="fp32", warmup=1, repeats=3, decode_steps=4,
            min_time_s=0.1, threads=1, cpu_timer="thread", **GRID)
MODELS = ("tiny-llama", "tiny-mixtral")


def measure(out: Path, *, repeats: int = 5):
    """(full-depth table, fingerprint table) on :data:`GRID`."""
    from profiler.measured import ProfileConfig, run_profile
    from profiler.table import read_table

    def cfg(name: str, backend: str, models: list[str], min_time_s: float) -> ProfileConfig:
        return ProfileConfig(name=name, backend=backend, models=models, out=str(out / f"{name}.parquet"),
                             **{**TINY, "repeats": repeats, "min_time_s": min_time_s})
    full = run_profile(cfg("full", "torch", list(MODELS), 0.2), progress=False)
    fp = run_profile(cfg("fp", "fingerprint", ["tiny-llama"], 0.25), progress=False)
    return read_table(full.table), read_table(fp.table)


def monotonic_failures(full, model: str) -> list[str]:
    """The monotonicity claims (module docstring) that ``model``'s rows break."""
    t = full[full.model == model].set_index(["batch", "prompt_tokens"])
    bad = [f"{model}: TTFT batch {b} prompt 192 <= prompt 64" for b in GRID["batches"]
           if not t.loc[(b, 192)].ttft_s > t.loc[(b, 64)].ttft_s]
    for p in GRID["prompt_tokens"]:
        seq = [t.loc[(b, p)] for b in GRID["batches"]]
        if not all(y.ttft_s > x.ttft_s for x, y in zip(seq, seq[1:])):
            bad.append(f"{model}: TTFT not increasing in batch at prompt {p}")
        if not all(y.tpot_s >= 0.9 * x.tpot_s for x, y in zip(seq, seq[1:])):
            bad.append(f"{model}: TPOT fell by more than 10% with batch at prompt {p}")
        if not seq[-1].tpot_s > seq[0].tpot_s:
            bad.append(f"{model}: TPOT at batch 8 <= batch 1 at prompt {p}")
    return bad


def fingerprint_failures(full, fp, *, limit_pct: float = 15.0) -> tuple[list[str], object]:
    """(failed claims, MAPE table) of the fingerprint against full depth."""
    from profiler.validate import errors, mape
    err = mape(errors(full[full.model == "tiny-llama"], fp))
    overall = err.loc[("all", "", "", "")]
    bad = [f"fingerprint {m} MAPE {overall[m]:.1f}% > {limit_pct:g}%" for m in ("ttft_s", "tpot_s")
           if overall[m] > limit_pct]
    return bad, err


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    repeats: int = Field(default=5, ge=1)       # timed runs per point; the median counts


def run(params: Params, ctx: RunContext) -> None:
    report = Report(ctx, "Timing claims of the measured profiler (bench_measured)")
    with tempfile.TemporaryDirectory() as tmp:
        full, fp = measure(Path(tmp), repeats=params.repeats)
    bad = [b for m in MODELS for b in monotonic_failures(full, m)]
    fbad, table = fingerprint_failures(full, fp)
    report.line(table.to_string(float_format=lambda v: f"{v:.1f}"))
    for b in bad + fbad:
        report.line(f"FAILED: {b}")
        logging.getLogger(__name__).warning("timing claim failed: %s", b)
    report.line("all timing claims hold" if not bad + fbad else f"{len(bad + fbad)} timing claim(s) failed")
    report.row({"claims": "monotonic latency, fingerprint within 15%", "failed": len(bad + fbad),
                "holds": not bad + fbad})
    report.write()
