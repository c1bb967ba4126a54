"""Simulator cost as the fleet grows: one simulated hour on fleets of 8, 64 and 512 GPUs.

A fleet of ``G`` GPUs (a multiple of 8) holds ``G / 8`` copies of the cluster benchmark's task
(``experiments/kinds/bench_sim.py``, case ``cluster``): classify on 2x qwen2.5-3b, then respond on 6x
llama-3.1-8b, each instance on its own A6000 with a KV reserve of ``kv_reserve_tokens``, vLLM v0
scheduling. Every copy gets Poisson arrivals at ``rps_per_task`` for ``duration_s`` simulated
seconds with the token sizes of the Azure 2023 ``trace`` (``harness.workload.poisson_workload``:
tasks and load grow with the fleet). Each size runs in a fresh process, alone, so its peak
resident memory is its own.

Rows (``scaling.parquet``, one per size; ``scaling.png`` plots wall time, events per second
and peak memory against the fleet size): ``gpus, tasks, requests, calls, completed, simulated_s,
events, wall_s`` (the simulation, ``ClusterSim.run``), ``build_s`` (building the fleet and the
workload), ``events_per_s, requests_per_s`` (per wall second of the simulation), ``peak_rss_mb``
(the process's peak resident set), ``base_rss_mb`` (before the fleet and workload were built),
``latency_mean_s``, ``trace_source``. Also ``summary.md``. With ``publish``, the three are
copied to ``results/sim_scaling/``. Wall times depend on what else the machine runs: the load average at
the start of each size is a column (``load_avg_1m``).
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Annotated

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text

GROUP = (("classify", "qwen2.5-3b", 2, 16), ("respond", "llama-3.1-8b", 6, None))   # stage, model, GPUs, output


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    sizes_gpus: list[Annotated[int, Field(ge=8, le=65_536)]] = Field(default_factory=lambda: [8, 64, 512])
    duration_s: float = Field(3600.0, gt=0, le=86_400, description="simulated seconds of arrivals")
    rps_per_task: float = Field(5.4, gt=0, description="arrival rate of each 8-GPU task copy (the conv trace's)")
    trace: str = "conv"
    data_dir: str | None = None
    gpu: str = "a6000"
    kv_reserve_tokens: int = Field(16_384, ge=16)
    publish: bool = False

    @field_validator("sizes_gpus")
    @classmethod
    def _multiple_of_8(cls, v: list[int]) -> list[int]:
        bad = [g for g in v if g % 8]
        if bad:
            raise ValueError(f"fleet sizes must be multiples of 8 GPUs (got {bad})")
        return v


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_size(params: Params, gpus: int, seed: int) -> dict:
    """One fleet size, in the calling process (a fresh one: ``run`` spawns it)."""
    import numpy as np

    from harness.cluster import ClusterSim, SimStage, SimTask
    from harness.workload import azure_or_synthetic, poisson_workload
    from profiler.engine import DEFAULT, reserved_mem_gb
    from profiler.steps import step_model
    from selector.deployment import InstanceSpec, Route

    base = _rss_mb()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    trace, source = azure_or_synthetic(params.trace, data_dir=params.data_dir, seed=seed)
    p, o = int(trace.prompt_tokens.mean()), int(trace.output_tokens.mean())
    mem = {m: reserved_mem_gb(step_model(m, params.gpu, 1, 1), DEFAULT, kv_tokens=params.kv_reserve_tokens)
           for _, m, _, _ in GROUP}
    insts, tasks = [], []
    for k in range(gpus // 8):
        stages, g0, prompt = [], 8 * k, p
        for stage, model, n, out in GROUP:
            ids = []
            for g in range(g0, g0 + n):
                insts.append(InstanceSpec(f"{model}/{g}", model, 1, 1, (g,), mem[model]))
                ids.append(insts[-1].id)
            stages.append(SimStage(stage, 1, prompt, out or o, (Route(tuple(ids)),)))
            g0, prompt = g0 + n, prompt + (out or 0)
        tasks.append(SimTask(f"chat{k}", 1e9, tuple(stages)))
    work = poisson_workload(trace, [params.rps_per_task] * len(tasks), load=1.0, window_s=params.duration_s,
                            seed=seed)
    sim = ClusterSim(gpu=params.gpu, instances=insts, tasks=tasks)
    build = time.perf_counter() - t0
    res = sim.run(work)
    done = ~res["failed"] & ~np.isnan(res["done_s"])
    n = len(work)
    return {"gpus": gpus, "tasks": len(tasks), "requests": n, "calls": 2 * n, "completed": int(done.sum()),
            "simulated_s": sim.makespan_s, "events": sim.events, "wall_s": sim.wall_s, "build_s": build,
            "events_per_s": sim.events / sim.wall_s, "requests_per_s": n / sim.wall_s,
            "peak_rss_mb": _rss_mb(), "base_rss_mb": base,
            "latency_mean_s": float(np.mean(res["done_s"][done] - work.arrival_s[done])) if done.any() else None,
            "load_avg_1m": load, "trace_source": source}


def run(params: Params, ctx: RunContext) -> None:
    rows = []
    for gpus in params.sizes_gpus:
        cell = ctx.cell_path(f"gpus{gpus}")
        if cell.exists():
            rows.append(pd.read_parquet(cell).iloc[0].to_dict())
            continue
        # a fresh process per size: its peak memory is its own
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            row = pool.submit(run_size, params, gpus, ctx.seed).result()
        atomic_write_parquet(cell, pd.DataFrame([row]))
        rows.append(row)
        if ctx.progress:
            print(f"{gpus} GPUs: {row['requests']} requests, {row['events']} events in {row['wall_s']:.1f} s "
                  f"({row['events_per_s']:.0f}/s), peak {row['peak_rss_mb']:.0f} MB")
    df = pd.DataFrame(rows)
    atomic_write_parquet(ctx.run_dir / "scaling.parquet", df)
    text = summary_md(df, params)
    atomic_write_text(ctx.run_dir / "summary.md", text)
    plot(df, ctx.run_dir / "scaling.png")
    print(text)
    if params.publish:
        out = ctx.run_dir.parents[1] / "sim_scaling"
        out.mkdir(parents=True, exist_ok=True)
        for name in ("scaling.parquet", "summary.md", "scaling.png"):
            shutil.copyfile(ctx.run_dir / name, out / name)


def plot(df: pd.DataFrame, path) -> None:
    """Wall time, events per second and peak memory against fleet size (log-log)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, col, label in zip(axes, ("wall_s", "events_per_s", "peak_rss_mb"),
                              ("simulation wall time (s)", "events per wall second", "peak resident memory (MB)")):
        ax.plot(df["gpus"], df[col], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("fleet size (GPUs)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Simulator cost per simulated hour as the fleet grows (tasks and load in proportion)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def summary_md(df: pd.DataFrame, params: Params) -> str:
    lines = [f"# Simulator scaling: {params.duration_s:g} simulated seconds, {params.rps_per_task:g} req/s per "
             "8-GPU task copy", "",
             "| GPUs | tasks | requests | events | wall s | events/s | requests/s | peak RSS MB | load avg |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in df.itertuples():
        lines.append(f"| {r.gpus} | {r.tasks} | {r.requests} | {r.events} | {r.wall_s:.1f} | {r.events_per_s:,.0f} | "
                     f"{r.requests_per_s:,.0f} | {r.peak_rss_mb:.0f} | {r.load_avg_1m:.1f} |")
    if len(df) > 1:
        a, b = df.iloc[0], df.iloc[-1]
        lines += ["", f"From {a.gpus} to {b.gpus} GPUs ({b.gpus / a.gpus:g}x): wall time x{b.wall_s / a.wall_s:.1f}, "
                  f"events x{b.events / a.events:.1f}, peak memory x{b.peak_rss_mb / a.peak_rss_mb:.1f}."]
    return "\n".join(lines) + "\n"
