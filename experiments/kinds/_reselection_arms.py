"""One simulated run (an *arm*) of the re-selection experiment and the hourly oracle
(``experiments.kinds.reselection``; docs/reselection.md).

An :class:`Arm` is one policy over one segment of the profile (start hour, hours, compression)
under one workload seed: static (the plans for ``rate_x`` x each task's peak rate in the segment,
never re-selected) or adaptive (the controller of ``harness.adaptive.controller``), with the
selector free or restricted to the developer's workflow, a start-up model, and optionally a GPU
cap (the cluster's first ``gpu_cap`` GPUs). The controller's times are given in *profile*
seconds and divided by the compression (:func:`sim_controller`), so a run keeps the same policy
whatever its compression, and start-ups are real time relative to the profile.

:func:`oracle_cell` is the bound: per profile hour every task re-planned for that hour's peak rate
with perfect foresight and no migration cost (the plans of a fresh deployment, task after task, on
the empty cluster), cost only (not simulated). Its ``fluid_x`` is the load shape's bound: the
peak plan's GPUs (static-peak's rates, split by task: :func:`task_gpus`) over their mean when each
task's share follows its hourly rate exactly (no floor, no whole instances or GPUs): what any
policy paying static-peak's GPUs per request/s can save at most.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from harness.adaptive.config import ControllerConfig, TaskModel
from harness.adaptive.diurnal import DiurnalProfile, load_week

#: the planner's rules off: the selector's own plans (spec section 9's placement, memory x latency)
PLAIN = {"pack_busy": None, "score": "gb", "shrink_tp": (), "shrink_moves": "down"}
#: the controller's fields that are durations in profile seconds (divided by the compression)
TIMES = ("interval_s", "window_s", "window_long_s", "up_gap_s", "cooldown_s", "forecast_s", "slo_hold_s")


class Arm(BaseModel):
    """One simulated run (module docstring); ``name`` is its cell name and policy label."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    phase: str
    policy: str
    adaptive: bool
    fixed_workflow: bool = False
    rate_x: float = Field(1.0, gt=0, description="static: plan for this x each task's peak rate")
    profile: DiurnalProfile
    controller: ControllerConfig
    seed: int
    gpu_cap: int | None = None
    startup_fixed_s: float = Field(30.0, ge=0, description="profile seconds")
    load_gb_per_s: float = Field(0.5, gt=0, description="GB per profile second")
    plain: bool = Field(False, description="the selector's own plans: none of the planner's rules (packing, "
                        "GPU score, smaller TP)")

    @property
    def name(self) -> str:
        return f"{self.phase}__{self.policy}__{self.seed}".replace(" ", "_").replace(",", "")


def sim_controller(arm: Arm) -> ControllerConfig:
    """The arm's controller in simulated seconds (module docstring)."""
    c = arm.profile.compression
    upd = {k: getattr(arm.controller, k) / c for k in TIMES}
    upd.update(startup_fixed_s=arm.startup_fixed_s / c, load_gb_per_s=arm.load_gb_per_s * c,
               adaptive=arm.adaptive)
    if arm.plain:
        upd.update(PLAIN)
    return arm.controller.model_copy(update=upd)


def task_profiles(profile: DiurnalProfile, tasks: Sequence[str], curves: dict[str, str]) -> list[DiurnalProfile]:
    """Per task the profile with its own week curve (``curves[task]``, from
    ``harness.adaptive.diurnal.load_week``) or ``profile``'s own."""
    base = profile.model_dump()
    return [DiurnalProfile(**{**base, "hourly": load_week(curves[t])}) if t in curves else profile for t in tasks]


def cap_cluster(cluster, gpu_cap: int | None):
    """``cluster`` limited to its first ``gpu_cap`` GPUs (None: as is)."""
    if gpu_cap is None or gpu_cap >= len(cluster.gpus):
        return cluster
    return cluster.model_copy(update={"gpus": cluster.gpus[:gpu_cap]})


def arm_rates(arm: Arm, profs: list[DiurnalProfile], base: list[float]) -> list[float]:
    """First-deployment rates: static at ``rate_x`` x each task's peak in the segment; adaptive
    at the rate of the segment's start."""
    if arm.adaptive:
        return [p.rates_at([r], 0.0)[0] for p, r in zip(profs, base)]
    return [arm.rate_x * p.peak_x * r * p.peak_multiplier() for p, r in zip(profs, base)]


def selector_for(name: str, fixed_workflow: bool):
    from flowmaker.entry import UserError
    from solvers.registry import get_solver
    try:
        sel = get_solver(name)
    except (KeyError, TypeError) as exc:
        raise UserError(f"field 'params.selector': {exc}") from None
    return DeveloperWorkflow(sel) if fixed_workflow else sel


class DeveloperWorkflow:
    """A selector restricted to the developer's workflow (Murakkab keeps the workflow fixed)."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, f"{inner.name}-fixed-workflow"

    def select(self, problem, *, time_limit_s: float = 60.0):
        from solvers.baselines.common import developer_workflow, only_workflow
        wf = problem.workflows[developer_workflow(problem)].name
        return self.inner.select(only_workflow(problem, wf), time_limit_s=time_limit_s)


def arm_cell(arm: Arm, params, problems, tokens, cluster, gpu: str, trace, source: str) -> dict[str, pd.DataFrame]:
    """One arm: the seed's requests over the segment replayed under its policy; its tables."""
    from harness.adaptive.diurnal import diurnal_workload
    from harness.adaptive.sim import simulate_day
    from profiler.engine import EngineConfig
    profs = task_profiles(arm.profile, params.tasks, params.curves)
    base = [p.task.arrival_rate_rps for p in problems]
    wl = diurnal_workload(trace, base, profs, seed=arm.seed)
    t0 = time.perf_counter()
    res = simulate_day([TaskModel(p, t) for p, t in zip(problems, tokens)], cap_cluster(cluster, arm.gpu_cap),
                       selector_for(params.selector, arm.fixed_workflow), wl, gpu=gpu,
                       initial_rates=arm_rates(arm, profs, base), end_s=arm.profile.duration_s,
                       config=sim_controller(arm), engine=EngineConfig(scheduler=params.scheduler),
                       price_per_gb_s=params.price_per_gb_s, forecast=lambda k, t: profs[k].multiplier(t))
    cell = _tables(arm, profs, base, res, wl)
    cell["results"]["trace_source"] = source
    cell["results"]["cell_wall_s"] = time.perf_counter() - t0
    return cell


def _key(arm: Arm) -> dict:
    return {"phase": arm.phase, "policy": arm.policy, "seed": arm.seed}


def _tables(arm: Arm, profs, base, res, wl) -> dict[str, pd.DataFrame]:
    """The arm's tables (one row for results; long tables for the rest)."""
    prof = arm.profile
    s = res.summary
    n_h = int(np.ceil(prof.hours))
    infeasible = [d for d in res.decisions if d["outcome"] == "infeasible"]
    row = {**_key(arm), **{k: v for k, v in s.items() if not isinstance(v, (dict, list))},
           "migrations_per_task_hour": s["migrations"] / (len(base) * prof.hours), "day_s": prof.duration_s,
           "profile_hours": prof.hours, "start_hour": prof.start_hour, "compression": prof.compression,
           "rate_x": arm.rate_x, "adaptive": arm.adaptive, "fixed_workflow": arm.fixed_workflow,
           "gpu_cap": arm.gpu_cap if arm.gpu_cap is not None else -1, "startup_fixed_s": arm.startup_fixed_s,
           "load_gb_per_s": arm.load_gb_per_s, "infeasible": len(infeasible),
           "infeasible_slo": sum(d["reason"] == "slo" for d in infeasible)}
    key = _key(arm)
    since = placed_since(res.decisions)
    row.update(tasks_placed_start=sum(t <= 0.0 for t in since.values()), tasks_placed=len(since),
               task_hours_placed=sum(prof.duration_s - t for t in since.values()) / prof.hour_s,
               served_in_slo=int(res.good.sum()))
    owned = task_gpu_s(res.instances, s["residency_s"])
    per_task = [{**key, **t, "placed_from_h": since[t["task"]] / prof.hour_s if t["task"] in since else None,
                 "gpu_s_owned": owned.get(t["task"], 0.0)} for t in res.per_task]
    hb = np.minimum((wl.arrival_s // prof.hour_s).astype(int), n_h - 1)
    steps = np.array(res.gb_steps)
    peak = sum(p.peak_x * r for p, r in zip(profs, base))
    hourly = []
    for h in range(n_h):
        m = hb == h
        a, b = h * prof.hour_s, min((h + 1) * prof.hour_s, prof.duration_s)
        load = sum(p.peak_x * r * float(p.multiplier((a + b) / 2)) for p, r in zip(profs, base))
        hourly.append({**key, "hour": prof.start_hour + h, "requests": int(m.sum()),
                       "goodput": float(res.good[m].mean()) if m.any() else None, "gb_mean": mean_gb(steps, a, b),
                       "gpus_mean": mean_gpus(res.instances, a, b, prof.duration_s), "lost": int((~res.good[m]).sum()),
                       "rate_x": load / peak if peak > 0 else 0.0})
    decisions = [{**key, **{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in d.items()}}
                 for d in res.decisions]
    return {"results": pd.DataFrame([row]), "tasks": pd.DataFrame(per_task),
            "decisions": pd.DataFrame(decisions), "instances": pd.DataFrame([{**key, **r} for r in res.instances]),
            "memory": pd.DataFrame([{**key, "t_s": t, "gb": g} for t, g in res.gb_steps]),
            "hourly": pd.DataFrame(hourly)}


def placed_since(decisions: list[dict]) -> dict[str, float]:
    """Per task placed during the run, when it was first deployed (simulated s; a placed task
    stays placed: an infeasible re-selection keeps what serves)."""
    out: dict[str, float] = {}
    for d in decisions:
        if d["outcome"] == "deploy":
            out.setdefault(d["task"], d["t_s"])
    return out


def task_gpu_s(instances: list[dict], end_s: float) -> dict[str, float]:
    """Per task the GPU-seconds of the instances its versions started, from start to release (or
    ``end_s``); an instance another task reuses counts for the task that started it."""
    out: dict[str, float] = {}
    for r in instances:
        hi = end_s if r["released_s"] is None else r["released_s"]
        out[r["task"]] = out.get(r["task"], 0.0) + len(str(r["gpus"]).split(",")) * max(0.0, hi - r["start_s"])
    return out


def mean_gpus(instances: list[dict], a: float, b: float, end_s: float) -> float:
    """Whole GPUs held on average over ``[a, b)`` (a GPU shared by instances once:
    ``harness.billing.gpu_bill`` of the instances' spans clipped to the hour)."""
    from harness.billing import gpu_bill
    from selector.deployment import InstanceSpec
    spans = []
    for r in instances:
        lo, hi = max(a, r["start_s"]), min(b, end_s if r["released_s"] is None else r["released_s"])
        if hi > lo:
            gpus = tuple(int(g) for g in str(r["gpus"]).split(","))
            spans.append((InstanceSpec(r["instance"], r["model"], r["tp"], r["pp"], gpus, r["mem_gb"]), lo, hi))
    return gpu_bill(spans, None)[0] / (b - a) if b > a else 0.0


def mean_gb(steps: np.ndarray, a: float, b: float) -> float:
    """Time-average of the step function ``steps`` ((t, GB) rows) over ``[a, b)``."""
    ts, gs = steps[:, 0], steps[:, 1]
    edges = np.clip(np.concatenate([ts, [np.inf]]), a, b)
    return float((gs * np.diff(edges)).sum() / (b - a)) if b > a else 0.0


class _PlanOnly:
    """A backend where nothing runs: instances are ready at once (the oracle's fresh deployments)."""

    def start(self, specs, ready_at): pass
    def ready(self, iid, now): return True
    def failed(self, iid): return False
    def switch(self, k, task): pass
    def idle(self, iid): return True
    def stop(self, iid): pass
    def arrivals(self, k, t0, t1): return 0
    def outcomes(self, k, t0, t1, now, slo_s): return 0, 0
    def in_flight(self, k, t0, t1): return 0


def oracle_cell(arm: Arm, params, problems, tokens, cluster, gpu: str) -> dict[str, pd.DataFrame]:
    """The hourly oracle over ``arm``'s segment (module docstring): cost only; goodput not
    simulated (NaN)."""
    from harness.adaptive.controller import Controller
    from harness.billing import gpu_bill
    profs = task_profiles(arm.profile, params.tasks, params.curves)
    base = [p.task.arrival_rate_rps for p in problems]
    prof, cfg = arm.profile, sim_controller(arm)
    tasks = [TaskModel(p, t) for p, t in zip(problems, tokens)]
    sel = selector_for(params.selector, arm.fixed_workflow)
    t0, spans, hourly, gb_s, unplaced, loads = time.perf_counter(), [], [], 0.0, 0, []

    def plan(rates: list[float]) -> Controller:
        ctl = Controller(tasks, cap_cluster(cluster, arm.gpu_cap), sel, _PlanOnly(), gpu=gpu, config=cfg)
        ctl.deploy(rates, warm=True)
        return ctl

    peaks = arm_rates(arm.model_copy(update={"adaptive": False, "rate_x": 1.0}), profs, base)
    weights = task_gpus(plan(peaks), len(tasks))
    for h in range(int(np.ceil(prof.hours))):
        a, b = h * prof.hour_s, min((h + 1) * prof.hour_s, prof.duration_s)
        grid = np.linspace(a, b, 13)
        rates = [p.peak_x * r * float(p.multiplier(grid).max()) for p, r in zip(profs, base)]
        loads.append(sum(w * min(1.0, x / pk) for w, x, pk in zip(weights, rates, peaks) if pk > 0))
        ctl = plan(rates)
        unplaced += len(tasks) - len(ctl.ledger.current)
        held = [x for x in ctl.ledger.held.values() if x.released_s is None]
        gb = sum(x.spec.mem_gb for x in held)
        n_gpus = len({g for x in held for g in x.spec.gpus})
        gb_s += gb * (b - a)
        spans += [(x.spec, a, b) for x in held]
        hourly.append({**_key(arm), "hour": prof.start_hour + h, "requests": 0, "goodput": None, "gb_mean": gb, "gpus_mean": n_gpus,
                       "rate_x": sum(rates) / sum(p.peak_x * r for p, r in zip(profs, base))})
    gpu_s, usd = gpu_bill(spans, problems[0].cluster.prices if problems else None)
    row = {**_key(arm), "goodput": float("nan"), "reserved_gb_s": gb_s, "gpu_s_held": gpu_s, "usd": usd,
           "busy_gpu_s": float("nan"), "gb_mean": gb_s / prof.duration_s, "unplaced_task_hours": unplaced,
           "migrations": 0, "reselections": 0, "profile_hours": prof.hours, "start_hour": prof.start_hour,
           "compression": prof.compression, "rate_x": 1.0, "adaptive": True, "fixed_workflow": arm.fixed_workflow,
           "gpu_cap": arm.gpu_cap if arm.gpu_cap is not None else -1, "wall_s": time.perf_counter() - t0,
           "fluid_x": sum(weights) / float(np.mean(loads)) if loads and np.mean(loads) > 0 else float("nan")}
    return {"results": pd.DataFrame([row]), "hourly": pd.DataFrame(hourly)}


def task_gpus(ctl, n_tasks: int) -> list[float]:
    """Per task the GPUs its plan holds on ``ctl``'s cluster: every live instance's GPUs split among
    the task versions routed to it in proportion to the utilisation each puts there."""
    out = [0.0] * n_tasks
    idx = {t.name: k for k, t in enumerate(ctl.tasks)}
    for h in ctl.ledger.held.values():
        total = sum(h.users.values())
        for v, u in h.users.items():
            if h.released_s is None and total > 0:
                out[idx[ctl.ledger.task_of(v)]] += len(h.spec.gpus) * u / total
    return out
