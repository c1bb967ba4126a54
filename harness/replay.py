"""Deploy several tasks' deployments on the simulated cluster and replay one workload;
the cell metrics of docs/metrics.md (goodput, cost, latency, footprint). :func:`deployment_task`
is the one way a task's ``Deployment`` becomes the simulator's ``SimTask`` (the re-selection
controller uses it too)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.billing import gpu_bill
from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from profiler.engine import DEFAULT, EngineConfig
from selector.deployment import Deployment, InstanceSpec
from selector.problem import TOL, Problem


@dataclass(frozen=True)
class ReplayResult:
    summary: dict
    per_task: list[dict]


def deployment_task(p: Problem, dep: Deployment, stage_tokens: Sequence[tuple[int, int]],
                    model_of: Mapping[str, str]) -> SimTask:
    """The routed task that serves ``p``'s requests as ``dep`` deploys it: per stage its routes,
    ``stage_tokens`` = (prompt, output) of one call, and per route whether its models (``model_of``
    instance id) meet the task's accuracy SLO (an unknown model does not)."""
    ok = {m.name: m.accuracy >= p.task.accuracy_slo - TOL for m in p.models}
    stages = []
    for route, (prompt, output) in zip(dep.stages, stage_tokens, strict=True):
        accuracy_ok = tuple(all(ok.get(model_of[i], False) for i in r.instances) for r in route.routes)
        stages.append(SimStage(route.stage, route.calls, prompt, output, route.routes, accuracy_ok))
    return SimTask(p.task.name, p.task.latency_slo_s, tuple(stages))


def sim_tasks(problems: Sequence[Problem], deps: Sequence[Deployment | None],
              tokens: Sequence[dict[str, list[tuple[int, int]]]]) -> tuple[list[InstanceSpec], list[SimTask]]:
    """Instances and routed tasks of ``deps`` (``plan.deployment`` per task; ``None``: the task
    is not placed); ``tokens[k][workflow]`` = (prompt, output) per stage of task k."""
    instances: list[InstanceSpec] = []
    tasks: list[SimTask] = []
    models: dict[str, str] = {}
    for k, (p, dep) in enumerate(zip(problems, deps, strict=True)):
        if dep is None:
            tasks.append(SimTask(p.task.name, p.task.latency_slo_s, (), placed=False))
            continue
        instances.extend(dep.instances)
        models.update({i.id: i.model for i in dep.instances})
        models.update({i.id: i.model for i in p.cluster.instances})
        tasks.append(deployment_task(p, dep, tokens[k][dep.workflow], models))
    return instances, tasks


def replay(problems: Sequence[Problem], deps: Sequence[Deployment | None],
           tokens: Sequence[dict[str, list[tuple[int, int]]]], workload: Workload, *, gpu: str,
           price_per_gb_s: float, engine: EngineConfig = DEFAULT, colocation: bool = True,
           window_s: float | None = None, drain_cap_s: float | None = None) -> ReplayResult:
    """Simulate ``workload`` on the deployments; see docs/metrics.md for every reported number.
    ``colocation``: charge instances sharing a GPU (``ClusterSim``); ``window_s`` (arrival window)
    and ``drain_cap_s`` add the fixed-window cost and ``gpu_busy_s`` (per GPU id, busy time within
    the residency window) to the summary."""
    instances, tasks = sim_tasks(problems, deps, tokens)
    until = float("inf") if window_s is None else window_s + (drain_cap_s if drain_cap_s is not None else 0.0)
    sim = ClusterSim(gpu=gpu, instances=instances, tasks=tasks, engine=engine, colocation=colocation,
                     busy_until_s=until)
    res = sim.run(workload)
    residency = max(sim.makespan_s, float(workload.arrival_s[-1]) if len(workload) else 0.0)
    summary, per_task = cell_metrics(tasks, instances, workload, done_s=res["done_s"], failed=res["failed"],
                                     acc_ok=res["acc_ok"], residency_s=residency, price_per_gb_s=price_per_gb_s,
                                     window_s=window_s, drain_cap_s=drain_cap_s,
                                     prices=problems[0].cluster.prices if problems else None)
    summary.update({"preemptions": sum(i.preemptions for i in sim.instances.values()),
                    "events": sim.events, "sim_wall_s": sim.wall_s})
    if window_s is not None:
        summary["gpu_busy_s"] = sim.gpu_busy_s
    return ReplayResult(summary, per_task)


def cell_metrics(tasks: Sequence[SimTask], instances: Sequence[InstanceSpec], workload: Workload, *,
                 done_s: np.ndarray, failed: np.ndarray, acc_ok: np.ndarray, residency_s: float,
                 price_per_gb_s: float, window_s: float | None = None,
                 drain_cap_s: float | None = None,
                 prices: Mapping[str, float] | None = None) -> tuple[dict, list[dict]]:
    """The cell metrics of docs/metrics.md, shared by every backend (``sim``: simulated seconds;
    ``servers``: wall seconds since the first arrival). Per request: ``done_s`` (completion, NaN
    if none), ``failed``, ``acc_ok``; ``residency_s``: how long every instance was resident.
    With ``window_s`` (the arrival window) also the fixed-window cost: residency
    ``window_s + min(drain, drain_cap_s)`` (drain = ``residency_s - window_s``, at least 0;
    no cap when ``drain_cap_s`` is None), its cost and both costs per served request.
    ``reserved_gb_s`` is reserved GB x residency (what a cluster bills), not the selection
    objective ``cost_gb_s`` (new GB x end-to-end latency of one request). ``gpu_s_held`` and
    ``usd`` (``gpu_s_held_window`` and ``usd_window`` over the fixed window): the whole GPUs the instances hold, in dollars at
    ``prices`` (the cluster's US dollars per GPU-hour by GPU type; NaN without), see
    :func:`harness.billing.gpu_bill`."""
    slo = np.array([t.latency_slo_s for t in tasks])[workload.task]
    lat = done_s - workload.arrival_s
    served = ~failed & ~np.isnan(lat)
    good = served & acc_ok & (lat <= slo + TOL)
    gb = float(sum(i.mem_gb for i in instances))
    done = lat[served]
    summary = {
        "requests": len(workload), "completed": int(served.sum()), "failed": int(failed.sum()),
        "goodput": float(good.mean()) if len(workload) else 0.0,
        "accuracy_ok_share": float(acc_ok[served].mean()) if served.any() else 0.0,
        "latency_mean_s": float(done.mean()) if done.size else None,
        "latency_p50_s": float(np.percentile(done, 50)) if done.size else None,
        "latency_p99_s": float(np.percentile(done, 99)) if done.size else None,
        "instances": len(instances), "gb_reserved": gb,
        "tasks_unplaced": sum(not t.placed for t in tasks),
        "residency_s": residency_s, "reserved_gb_s": gb * residency_s, "cost_usd": gb * residency_s * price_per_gb_s,
    }
    summary["gpu_s_held"], summary["usd"] = gpu_bill(((i, 0.0, residency_s) for i in instances), prices)
    if window_s is not None:
        drain = max(0.0, residency_s - window_s)
        win = window_s + (drain if drain_cap_s is None else min(drain, drain_cap_s))
        n = int(served.sum())
        summary.update({
            "window_s": window_s, "drain_s": drain, "residency_window_s": win, "reserved_window_gb_s": gb * win,
            "cost_window_usd": gb * win * price_per_gb_s,
            "cost_per_served_usd": gb * residency_s * price_per_gb_s / n if n else None,
            "cost_window_per_served_usd": gb * win * price_per_gb_s / n if n else None,
        })
        summary["gpu_s_held_window"], summary["usd_window"] = gpu_bill(((i, 0.0, win) for i in instances), prices)
    per_task = []
    for k, t in enumerate(tasks):
        m = workload.task == k
        per_task.append({"task": t.name, "placed": t.placed, "requests": int(m.sum()),
                         "goodput": float(good[m].mean()) if m.any() else None,
                         "latency_mean_s": float(lat[m & served].mean()) if (m & served).any() else None,
                         "latency_slo_s": t.latency_slo_s})
    return summary, per_task
