"""``python -m experiments.run capacity_check``: does a plan break where the selector says it is full?

Per task: resolve it on the cluster (``perf.capacity_rps`` by docs/resolve.md's rule), let
``selector`` choose a plan on the empty cluster, and take the plan's own capacity
(``harness.capacity.plan_capacity_rps``: replicas x ``capacity_rps`` / calls, the tightest
stage). Then replay the plan alone in the cluster simulator on Poisson arrivals with the task
trace's request sizes (``harness.workload.poisson_workload``, ``window_s`` or ``requests`` per
load, fixed seed) at
``loads`` x that capacity, in order, until the goodput drops below ``threshold``: that load is
the *break ratio*. The target (issue 23): 1.0 <= ratio <= 1.25 for every task. ``floor`` is the
goodput at ``floor_load`` x capacity (almost no queueing): below ``threshold`` the SLO already
misses that share of the trace's requests unloaded, so no capacity can put the break in range.

Rows (``results.parquet``): ``task, workflow, plan, arrival_rate_rps, plan_capacity_rps, floor,
break_ratio, in_target`` and ``goodput@<load>`` per load run; ``summary.md`` prints the table.
"""
from __future__ import annotations

import shutil
import time

from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext
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
    #: requests per load point (the window is that many over the rate); None: ``window_s``
    requests: int | None = Field(default=None, ge=1)
    threshold: float = Field(default=0.99, gt=0, le=1)
    target: tuple[float, float] = (1.0, 1.25)
    time_limit_s: float = Field(default=30.0, gt=0)
    publish: bool = False


def run(params: Params, ctx: RunContext) -> None:
    from harness.capacity import breaking_load, plan_capacity_rps
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
    rep = Report(ctx, f"Break ratio: first load (x plan capacity) with goodput < {params.threshold}")
    rep.line(f"{'task':16} {'plan':28} {'rate':>6} {'capacity':>8} {'floor':>6} {'break':>6}  in [{params.target[0]:g}, "
             f"{params.target[1]:g}]")
    for name in params.tasks:
        t0 = time.perf_counter()
        task = load_task(name)
        p = resolve_task(task, catalog=catalog, cluster=cluster, gpu=gpu)
        plan, _ = deploy_task(p, solver, time_limit_s=params.time_limit_s)
        dep = plan.deployment
        if dep is None:
            rep.line(f"{task.name:16} no plan: {plan.status}")
            continue
        tokens = {wf.name: stage_tokens(task, wf) for wf in task.workflows}
        trace, source = azure_or_synthetic(task.trace, seed=ctx.seed)
        kw = dict(gpu=gpu or dep.instances[0].gpu_type, window_s=params.window_s, requests=params.requests,
                  threshold=params.threshold, seed=ctx.seed)
        _, floor = breaking_load(p, dep, tokens, trace, loads=[params.floor_load], **kw)
        ratio, points = breaking_load(p, dep, tokens, trace, loads=params.loads, **kw)
        cap = plan_capacity_rps(p, dep)
        ok = ratio is not None and params.target[0] <= ratio <= params.target[1]
        what = " + ".join(f"{i.model}@tp{i.tp}pp{i.pp}" for i in dep.instances)
        shown = "-" if ratio is None else f"{ratio:g}"
        rep.line(f"{task.name:16} {what[:28]:28} {p.task.arrival_rate_rps:6.3g} {cap:8.3g} {floor[0].goodput:6.3f} "
                 f"{shown:>6}  {'yes' if ok else 'NO'}")
        rep.row({"task": task.name, "workflow": dep.workflow, "plan": what, "trace_source": source,
                 "arrival_rate_rps": p.task.arrival_rate_rps, "plan_capacity_rps": cap,
                 "floor": floor[0].goodput, "break_ratio": ratio, "in_target": ok,
                 **{f"goodput@{pt.load:g}": pt.goodput for pt in points}, "wall_s": time.perf_counter() - t0})
    rep.line("")
    span = f"{params.requests} requests per load" if params.requests else f"{params.window_s:g} s window"
    rep.line(f"break = first of loads {params.loads} with goodput < {params.threshold} ('-': none); floor = goodput "
             f"at {params.floor_load:g}x; Poisson arrivals, {span}, seed {ctx.seed}")
    rep.write()
    if params.publish:
        out = ctx.run_dir.parents[1] / ctx.run_dir.parent.name
        out.mkdir(parents=True, exist_ok=True)
        for f in ("summary.md", "results.parquet"):
            shutil.copyfile(ctx.run_dir / f, out / f)
