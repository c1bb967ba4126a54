"""Beyond the paper (issue 19): re-selection when load shifts, with migration cost.

A compressed day (``harness.adaptive.diurnal``: the Azure 2023 traces' request sizes under a
day-long rate curve) is replayed on the cluster simulator under four policies, each deploying the
tasks in order on the same cluster:

- ``static-peak``: the selector's plans for every task's rate at the busiest moment, all day;
- ``static-mean``: its plans for the day's mean rates, all day;
- ``adaptive``: the controller of ``harness.adaptive.controller`` re-runs the selector as the load
  shifts (workflow, models, configs and reuse together) and migrates;
- ``adaptive-fixed-workflow`` (Murakkab-like): the same controller, the selector restricted to the
  developer's workflow (``solvers.baselines.common.developer_workflow`` / ``only_workflow``), so
  only models, configs and reuse move.

Cluster: the cluster file's GPUs repeated ``nodes`` times (ids renumbered), its sharing mode kept.
Outputs (docs/reselection.md): ``results.parquet`` (one row per policy and seed), ``tasks.parquet``,
``decisions.parquet`` (every re-selection), ``instances.parquet`` (every instance's start, ready,
drain, release), ``memory.parquet`` (GB held at every change), ``hourly.parquet`` (per profile
hour: requests, goodput, mean GB), ``memory.png``, ``migrations.png``, ``goodput.png`` and
``summary.md``; with ``publish``, the summary, the figures and the small tables (:data:`PUBLISHED`)
are copied to ``results/<experiment>/``. Each (policy, seed) cell is run by
``experiments.executor`` (local processes or Ray), written atomically to ``cells/`` and skipped
on a rerun with ``--run-id``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from experiments.executor import Cell, run_cells
from harness.adaptive.controller import ControllerConfig
from harness.adaptive.diurnal import DiurnalProfile
from selector.taskspec import TaskList

POLICIES = ("static-peak", "static-mean", "adaptive", "adaptive-fixed-workflow")
Policy = Literal["static-peak", "static-mean", "adaptive", "adaptive-fixed-workflow"]

#: the experiment's control loop, in simulated seconds of a day compressed 48x (one profile hour =
#: 75 s): tick every 4 profile minutes, rates over 48 min (short) and 72 min (long), 1.2 h after a
#: migration before moving down, no headroom over the capacity rows (docs/reselection.md)
DAY_CONTROLLER = ControllerConfig(interval_s=5.0, window_s=60.0, window_long_s=90.0, headroom=1.0,
                                  drift_down=0.15, up_gap_s=30.0, cooldown_s=90.0)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList
    cluster: str = Field("a6000x8-compute", description="configs/clusters/<name>.yaml")
    nodes: int = Field(8, ge=1, description="copies of the cluster file's GPUs")
    selector: str = Field("flowmaker", description="registry name of the selector every policy runs")
    policies: list[Policy] = Field(default=list(POLICIES), min_length=1)
    trace: Literal["code", "conv"] = Field("conv", description="Azure 2023 trace whose request sizes are drawn")
    profile: DiurnalProfile = Field(default=DiurnalProfile(peak_x=6.0, compression=48.0))
    controller: ControllerConfig = Field(default=DAY_CONTROLLER)
    seeds: list[int] | None = Field(None, min_length=1, description="workload seeds (default: the run's seed)")
    price_per_gb_s: float = Field(1e-6, ge=0, description="USD per GB-second of reserved memory")
    data_dir: str | None = Field(None, description="shared data folder (Azure traces)")
    scheduler: Literal["vllm-v1", "vllm", "padded", "sarathi"] = "vllm"
    publish: bool = Field(False, description="copy the summary, figures and small tables to results/<experiment>/")


class DeveloperWorkflow:
    """A selector restricted to the developer's workflow (Murakkab keeps the workflow fixed)."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, f"{inner.name}-fixed-workflow"

    def select(self, problem, *, time_limit_s: float = 60.0):
        from solvers.baselines.common import developer_workflow, only_workflow
        wf = problem.workflows[developer_workflow(problem)].name
        return self.inner.select(only_workflow(problem, wf), time_limit_s=time_limit_s)


def setup(params: Params):
    """``(problems, tokens, cluster, gpu)``: every task resolved on the replicated cluster."""
    from selector.errors import ProblemError
    from selector.problem import Cluster, Gpu
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import CONFIGS, load_task, stage_tokens
    try:
        base, gpu = load_cluster_file(CONFIGS / "clusters" / f"{params.cluster}.yaml")
        gpus = tuple(Gpu(id=n * len(base.gpus) + k, mem_gb=g.mem_gb, used_gb=g.used_gb, type=g.type)
                     for n in range(params.nodes) for k, g in enumerate(base.gpus))
        cluster = Cluster(gpus=gpus, sharing=base.sharing, prices=base.prices)
        catalog = load_catalog()
        problems = [resolve_task(t, catalog=catalog, cluster=cluster, gpu=gpu) for t in params.tasks]
        specs = [load_task(t) for t in params.tasks]
    except (ProblemError, OSError) as exc:
        raise UserError(str(exc)) from None
    tokens = [{w.name: stage_tokens(s, w) for w in s.workflows} for s in specs]
    return problems, tokens, cluster, gpu


def run_policy(policy: str, params: Params, problems, tokens, cluster, gpu: str, workload):
    """One day under ``policy`` (module docstring); returns ``harness.adaptive.sim.DayResult``."""
    from harness.adaptive.controller import TaskModel
    from harness.adaptive.sim import simulate_day
    from profiler.engine import EngineConfig
    from solvers.registry import get_solver
    try:
        selector = get_solver(params.selector)
    except (KeyError, TypeError) as exc:
        raise UserError(f"field 'params.selector': {exc}") from None
    prof, cfg = params.profile, params.controller
    base = [p.task.arrival_rate_rps for p in problems]
    if policy == "static-peak":
        rates, cfg = [prof.peak_x * r * prof.peak_multiplier() for r in base], cfg.model_copy(update={"adaptive": False})
    elif policy == "static-mean":
        rates, cfg = [prof.peak_x * r * prof.mean_multiplier() for r in base], cfg.model_copy(update={"adaptive": False})
    else:
        rates = [r * cfg.headroom for r in prof.rates_at(base, 0.0)]
        cfg = cfg.model_copy(update={"adaptive": True})
        if policy == "adaptive-fixed-workflow":
            selector = DeveloperWorkflow(selector)
    tasks = [TaskModel(p, t) for p, t in zip(problems, tokens)]
    return simulate_day(tasks, cluster, selector, workload, gpu=gpu, initial_rates=rates, end_s=prof.duration_s,
                        config=cfg, engine=EngineConfig(scheduler=params.scheduler),
                        price_per_gb_s=params.price_per_gb_s)


def _cell(policy: str, seed: int, params: Params, res, wl) -> dict[str, pd.DataFrame]:
    """The cell's tables (one row for results; long tables for the rest)."""
    prof = params.profile
    hours = prof.hours
    n_tasks = len(params.tasks)
    s = res.summary
    row = {"policy": policy, "seed": seed, **{k: v for k, v in s.items() if not isinstance(v, (dict, list))},
           "migrations_per_task_hour": s["migrations"] / (n_tasks * hours),
           "day_s": prof.duration_s, "profile_hours": hours, "compression": prof.compression}
    key = {"policy": policy, "seed": seed}
    hb = np.minimum((wl.arrival_s // prof.hour_s).astype(int), int(np.ceil(hours)) - 1)
    steps = np.array(res.gb_steps)
    hourly = []
    for h in range(int(np.ceil(hours))):
        m = hb == h
        a, b = h * prof.hour_s, min((h + 1) * prof.hour_s, prof.duration_s)
        hourly.append({**key, "hour": prof.start_hour + h, "requests": int(m.sum()),
                       "goodput": float(res.good[m].mean()) if m.any() else None, "gb_mean": _mean_gb(steps, a, b),
                       "rate_x": float(prof.multiplier((a + b) / 2))})
    tasks = [{**key, **t} for t in res.per_task]
    decisions = [{**key, **{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in d.items()}}
                 for d in res.decisions]
    return {"results": pd.DataFrame([row]), "tasks": pd.DataFrame(tasks), "decisions": pd.DataFrame(decisions),
            "instances": pd.DataFrame([{**key, **r} for r in res.instances]),
            "memory": pd.DataFrame([{**key, "t_s": t, "gb": g} for t, g in res.gb_steps]),
            "hourly": pd.DataFrame(hourly)}


def _mean_gb(steps: np.ndarray, a: float, b: float) -> float:
    """Time-average of the step function ``steps`` ((t, GB) rows) over ``[a, b)``."""
    ts, gs = steps[:, 0], steps[:, 1]
    edges = np.clip(np.concatenate([ts, [np.inf]]), a, b)
    return float((gs * np.diff(edges)).sum() / (b - a)) if b > a else 0.0


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The cells' rows in one table; a column empty in one cell (e.g. no release time in a static
    day) takes its type from the cells that fill it."""
    cols = list(dict.fromkeys(c for f in frames for c in f.columns))
    full = [f.dropna(axis=1, how="all") for f in frames if len(f)]
    return pd.concat(full, ignore_index=True).reindex(columns=cols) if full else pd.DataFrame(columns=cols)


TABLES = ("results", "tasks", "decisions", "instances", "memory", "hourly")
#: what ``publish`` copies beside the run folders (a few tens of kB)
PUBLISHED = ("summary.md", "memory.png", "migrations.png", "goodput.png", "results.parquet", "tasks.parquet",
             "hourly.parquet", "memory.parquet", "decisions.parquet")


def policy_cell(policy: str, seed: int, params: Params, problems, tokens, cluster, gpu: str, trace,
                source: str) -> dict[str, pd.DataFrame]:
    """One (policy, seed) cell: the seed's day of requests replayed under ``policy``; its tables."""
    from harness.adaptive.diurnal import diurnal_workload
    wl = diurnal_workload(trace, [p.task.arrival_rate_rps for p in problems], params.profile, seed=seed)
    t0 = time.perf_counter()
    res = run_policy(policy, params, problems, tokens, cluster, gpu, wl)
    cell = _cell(policy, seed, params, res, wl)
    cell["results"]["trace_source"] = source
    cell["results"]["cell_wall_s"] = time.perf_counter() - t0
    return cell


def _report(cell, tables: dict[str, pd.DataFrame]) -> None:
    r = tables["results"].iloc[0]
    print(f"{r.policy} seed {r.seed}: goodput {r.goodput:.4f}, cost {r.reserved_gb_s:.4g} GB*s, "
          f"migrations {int(r.migrations)}, {r.wall_s:.1f} s", flush=True)


def run(params: Params, ctx: RunContext) -> None:
    from harness.workload import azure_or_synthetic
    from experiments.kinds._reselection_report import plots, summary_md
    problems, tokens, cluster, gpu = setup(params)
    trace, source = azure_or_synthetic(params.trace, data_dir=params.data_dir, seed=ctx.seed)
    source = Path(source).name if Path(source).is_file() else source
    cells = [Cell(f"{policy}__{seed}", policy_cell, (policy, seed, params, problems, tokens, cluster, gpu, trace,
                                                       source), tables=TABLES)
             for seed in params.seeds or [ctx.seed] for policy in params.policies]
    results = run_cells(ctx, cells, desc="reselection", on_done=_report if ctx.progress else None)
    frames = {t: _concat([r[t] for r in results]) for t in TABLES}
    for t, df in frames.items():
        atomic_write_parquet(ctx.run_dir / f"{t}.parquet", df)
    plots(frames, params, ctx.run_dir)
    atomic_write_text(ctx.run_dir / "summary.md", summary_md(frames, params, source))
    if params.publish:
        for name in PUBLISHED:
            if (ctx.run_dir / name).exists():
                shutil.copyfile(ctx.run_dir / name, ctx.run_dir.parent / name)
    print((ctx.run_dir / "summary.md").read_text())
