"""``python -m experiments.run capacity_check``: does a plan break where the selector says it is full?

Per task: resolve it on the cluster (``perf.capacity_rps`` by docs/resolve.md's rule), let
``selector`` choose a plan on the empty cluster, and take the plan's own capacity
(``harness.capacity.plan_capacity_rps``: replicas x ``capacity_rps`` / calls, the tightest
stage). Then replay the plan alone in the cluster simulator (``harness.capacity.load_point``)
on Poisson arrivals with the task trace's request sizes at ``loads`` x that capacity, each load
once per seed (``seeds`` of them from the config's ``seed``: each a different draw of arrivals
and a different order of the trace's sizes, ``sizes``; ``requests`` per load and seed). Per load the goodput is pooled over the seeds, with
its 95% t interval over them (``experiments.kinds._intervals.ci95``); the *break ratio* is the
first load whose pooled goodput is below ``threshold``. The target (issue 23): 1.0 <= ratio <=
1.25 for every task. Also per seed its own break, and whether ``threshold`` lies in the interval
at the pooled break (the break is then not settled by these seeds). ``floor`` is the pooled
goodput at ``floor_load`` x capacity (almost no queueing): below ``threshold`` the SLO already
misses that share of the trace's requests unloaded, so no capacity can put the break in range.

Every (task, seed) is one cell of ``experiments.executor.run_cells`` (resumable, as many workers
as the config's ``workers``; its name carries the plan capacity, so a resume after a rule change
re-runs it): its loads in order until its goodput is below :func:`stop_level`, where the pooled
goodput is below ``threshold`` whatever the other seeds read; pooled figures are given at the
loads every seed ran ('-' past them).

Rows: ``results.parquet`` one per task: ``task, workflow, plan, arrival_rate_rps,
plan_capacity_rps, floor, break_ratio, break_goodput, break_ci95, threshold_in_ci, seed_breaks,
in_target`` and ``goodput@<load>`` / ``ci95@<load>`` (pooled mean and half-width) per load;
``points.parquet`` one per load a seed ran (``task, seed, load, rate_rps, requests, goodput, preemptions,
wall_s``); ``summary.md`` prints the table and the pooled goodput per load.
"""
from __future__ import annotations

import shutil
import time
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext, atomic_write_parquet
from experiments.executor import Cell, run_cells
from experiments.kinds._bench import Report
from flowmaker.entry import UserError
from selector.taskspec import TaskList


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList
    cluster: str = "a6000x8"
    selector: str = "flowmaker"
    loads: list[float] = Field(min_length=1)
    floor_load: float = Field(default=0.1, gt=0)
    window_s: float = Field(default=600.0, gt=0)
    #: requests per load point and seed (the window is that many over the rate); None: ``window_s``
    requests: int | None = Field(default=None, ge=1)
    #: seeds per load: the config's seed and the next ``seeds - 1``
    seeds: int = Field(default=4, ge=1)
    #: request sizes (``harness.workload.poisson_workload``): the trace shuffled per seed (every
    #: whole pass holds its sizes exactly) or drawn with replacement
    sizes: Literal["shuffle", "resample"] = "shuffle"
    threshold: float = Field(default=0.99, gt=0, le=1)
    target: tuple[float, float] = (1.0, 1.25)
    time_limit_s: float = Field(default=30.0, gt=0)
    publish: bool = False


def seed_cell(problem, dep, tokens, trace, gpu: str, loads: list[float], window_s: float, requests: int | None,
              seed: int, stop_below: float, sizes: str = "shuffle") -> pd.DataFrame:
    """One (task, seed): ``harness.capacity.load_point`` at each of ``loads`` in order, one row
    each, until the goodput drops below ``stop_below`` (:func:`stop_level`; the first load is
    always run through, the floor)."""
    from harness.capacity import load_point
    rows = []
    for k, x in enumerate(loads):
        t0 = time.perf_counter()
        pt = load_point(problem, dep, tokens, trace, gpu=gpu, load=x, window_s=window_s, requests=requests,
                        seed=seed, sizes=sizes)
        rows.append({"task": problem.task.name, "seed": seed, "load": x, "rate_rps": pt.rate_rps,
                     "requests": pt.requests, "goodput": pt.goodput, "preemptions": pt.preemptions,
                     "wall_s": time.perf_counter() - t0})
        if k and pt.goodput < stop_below:
            break
    return pd.DataFrame(rows)


def stop_level(threshold: float, seeds: int) -> float:
    """A seed's goodput below which the pooled goodput of ``seeds`` seeds (their mean) is below
    ``threshold`` whatever the others read (each at most 1), so no seed needs a higher load."""
    return 1.0 - seeds * (1.0 - threshold)


def run(params: Params, ctx: RunContext) -> None:
    t0 = time.perf_counter()
    plans = _plans(params)
    seeds = [ctx.seed + k for k in range(params.seeds)]
    loads = sorted(set(params.loads))
    stop = stop_level(params.threshold, params.seeds)
    cells = [Cell(f"{name}-cap{pl['cap']:.6g}-{params.sizes}-s{seed}", seed_cell,
                  (pl["problem"], pl["dep"], pl["tokens"], pl["trace"], pl["gpu"], [params.floor_load, *loads],
                   params.window_s, params.requests, seed, stop, params.sizes), label=f"{name} seed {seed}")
             for seed in seeds for name, pl in plans.items() if "dep" in pl]
    points = pd.concat(run_cells(ctx, cells, desc="capacity check"), ignore_index=True) if cells else None
    rep = Report(ctx, f"Break ratio: first load (x plan capacity) whose goodput, pooled over {params.seeds} "
                      f"seeds, is < {params.threshold}")
    lo, hi = params.target
    rep.line(f"{'task':15} {'plan':22} {'rate':>5} {'capacity':>8} {'floor':>6} {'break':>5} {'goodput at break':>25} "
             f"{'seed breaks':24} in [{lo:g}, {hi:g}]")
    for name, pl in plans.items():
        if "dep" not in pl:
            rep.line(f"{name:15} no plan: {pl['status']}")
            continue
        row = _task_row(params, pl, points[points.task == name], loads)
        rep.row(row)
        shown = "-" if row["break_ratio"] is None else f"{row['break_ratio']:g}"
        at = "-" if row["break_ratio"] is None else _fmt(row["break_goodput"], row["break_ci95"]) + (
            " ~" if row["threshold_in_ci"] else "")
        rep.line(f"{name:15} {row['plan'][:22]:22} {row['arrival_rate_rps']:5.3g} {row['plan_capacity_rps']:8.3g} "
                 f"{row['floor']:6.4f} {shown:>5} {at:>25} {row['seed_breaks']:24} "
                 f"{'yes' if row['in_target'] else 'NO'}")
    _goodput_table(rep, rep.rows, loads)
    span = f"{params.requests} requests" if params.requests else f"a {params.window_s:g} s window"
    drawn = "the trace shuffled" if params.sizes == "shuffle" else "sizes drawn with replacement"
    n = 0 if points is None else len(points)
    rep.line("")
    rep.line(f"break = first of the loads with pooled goodput < {params.threshold} ('-': none); '~': "
             f"{params.threshold} inside the 95% interval there (these seeds do not settle it); seed breaks: each "
             f"seed's own; floor = pooled goodput at {params.floor_load:g}x. Poisson arrivals, {span} per load and "
             f"seed ({drawn}), seeds {seeds[0]}-{seeds[-1]}; {n} load points, {time.perf_counter() - t0:.0f} s in this run "
             f"(resumed cells not counted)")
    rep.write()
    if points is not None:
        atomic_write_parquet(ctx.run_dir / "points.parquet", points)
    if params.publish:
        out = ctx.run_dir.parents[1] / ctx.run_dir.parent.name
        out.mkdir(parents=True, exist_ok=True)
        for f in ("summary.md", "results.parquet", "points.parquet"):
            if (ctx.run_dir / f).exists():
                shutil.copyfile(ctx.run_dir / f, out / f)


def _plans(params: Params) -> dict[str, dict]:
    """Per task: its resolved problem, the selector's plan and what replaying it needs."""
    from harness.capacity import plan_capacity_rps
    from harness.workload import azure_or_synthetic
    from selector.clusterfile import load_cluster_file
    from selector.deploy import deploy_task
    from selector.errors import ProblemError
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import load_task, stage_tokens
    from solvers.registry import get_solver
    try:
        cluster, gpu = load_cluster_file(params.cluster)
        solver = get_solver(params.selector)
    except (ProblemError, KeyError) as exc:
        raise UserError(f"field 'params': {exc}") from None
    catalog = load_catalog()
    plans: dict[str, dict] = {}
    for name in params.tasks:
        task = load_task(name)
        p = resolve_task(task, catalog=catalog, cluster=cluster, gpu=gpu)
        plan, _ = deploy_task(p, solver, time_limit_s=params.time_limit_s)
        dep = plan.deployment
        if dep is None:
            plans[task.name] = {"status": plan.status}
            continue
        trace, source = azure_or_synthetic(task.trace)
        plans[task.name] = {
            "problem": p, "dep": dep, "trace": trace, "source": source, "gpu": gpu or dep.instances[0].gpu_type,
            "tokens": {wf.name: stage_tokens(task, wf) for wf in task.workflows},
            "cap": plan_capacity_rps(p, dep), "plan": " + ".join(f"{i.model}@tp{i.tp}pp{i.pp}" for i in dep.instances)}
    return plans


def _task_row(params: Params, pl: dict, pts: pd.DataFrame, loads: list[float]) -> dict:
    """One task's row: pooled goodput and interval per load, the pooled and per-seed breaks."""
    from experiments.kinds._intervals import ci95
    seeds = pts.seed.nunique()      # a load some seed stopped short of is past the break: not pooled
    stats = {x: ci95(g) if len(g := pts.goodput[pts.load == x]) == seeds else (float("nan"),) * 2 for x in loads}
    floor = ci95(pts.goodput[pts.load == params.floor_load])[0]
    brk = next((x for x in loads if stats[x][0] < params.threshold), None)
    seed_breaks = []
    for _, g in pts[pts.load.isin(loads)].sort_values("load").groupby("seed"):
        below = g[g.goodput < params.threshold]
        seed_breaks.append("-" if below.empty else f"{below.load.iloc[0]:g}")
    m, h = stats[brk] if brk is not None else (float("nan"), float("nan"))
    lo, hi = params.target
    return {"task": pl["problem"].task.name, "workflow": pl["dep"].workflow, "plan": pl["plan"],
            "trace_source": pl["source"], "arrival_rate_rps": pl["problem"].task.arrival_rate_rps,
            "plan_capacity_rps": pl["cap"], "floor": floor, "break_ratio": brk, "break_goodput": m,
            "break_ci95": h, "threshold_in_ci": bool(brk is not None and m - h <= params.threshold <= m + h),
            "seed_breaks": " ".join(seed_breaks), "in_target": brk is not None and lo <= brk <= hi,
            "preemptions@break": int(pts.preemptions[pts.load == brk].sum()) if brk is not None else 0,
            **{f"goodput@{x:g}": stats[x][0] for x in loads}, **{f"ci95@{x:g}": stats[x][1] for x in loads}}


def _goodput_table(rep: Report, rows: list[dict], loads: list[float]) -> None:
    """Pooled goodput per load and task (x1000, the interval's half-width beside it)."""
    if not rows:
        return
    rep.line("")
    rep.line(f"pooled goodput x1000 (+- 95% half-width) per load; '*': the break")
    rep.line(f"{'load':>5} " + " ".join(f"{r['task'][:15]:>15}" for r in rows))
    for x in loads:
        cells = []
        for r in rows:
            m, h = r[f"goodput@{x:g}"], r[f"ci95@{x:g}"]
            mark = "*" if r["break_ratio"] == x else " "
            cells.append("-" if m != m else f"{1000 * m:7.2f}+-{1000 * h:4.2f}{mark}" if h == h
                         else f"{1000 * m:13.2f}{mark}")
        rep.line(f"{x:5g} " + " ".join(f"{c:>15}" for c in cells))


def _fmt(m: float, h: float) -> str:
    from experiments.kinds._intervals import fmt
    return fmt(m, h, digits=4)
