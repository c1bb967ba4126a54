"""The controller on the cluster simulator: a day of requests through deployments that change as
they run.

:class:`SimBackend` gives the controller the simulator's side of :class:`~harness.adaptive.
controller.Backend`: new instances are added to the running ``ClusterSim`` at once (they hold
memory from then on and no call reaches them until a version that routes to them switches in, at
their modelled ready time), a switch replaces the task's routes for requests arriving from then
on (a request keeps the routes it arrived with, so the old instances finish what they started), and
a drained instance leaves the simulator. Observations come from the simulator's per-request
arrays, so the controller sees only what has happened by ``now``.

:func:`simulate_day` runs one policy over one workload: the first deployment at ``initial_rates``
(loaded before the first request), a control tick every ``interval_s`` until the workload's
``end_s`` and polls at modelled ready times and every ``drain_poll_s`` while something drains.
Cost is the GB x seconds every instance held, from its start to its release (or the end of the
run: ``max(last completion or failure, last arrival, end_s)``), and in dollars the whole GPUs
they held over the same spans (``gpu_s_held``, ``usd``: ``harness.billing.gpu_bill``), and the
GPU-seconds during which some instance on a GPU was mid-iteration (``busy_gpu_s``); the other
cell metrics are ``harness.replay.cell_metrics``'s (docs/metrics.md).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.adaptive.config import ControllerConfig, TaskModel
from harness.adaptive.controller import Controller
from harness.adaptive.planning import Forecast
from harness.billing import gpu_bill
from harness.cluster import ClusterSim, SimTask, Workload
from harness.replay import cell_metrics
from orchestrator.runtime.events import P_FREE, Event, Simulator
from profiler.engine import DEFAULT, EngineConfig
from selector.deployment import InstanceSpec
from selector.problem import TOL, Cluster


class SimBackend:
    """The simulator's side of the controller's ``Backend`` protocol (module docstring)."""

    def __init__(self, sim: ClusterSim, workload: Workload) -> None:
        self.sim, self.w = sim, workload
        self.ready_at: dict[str, float] = {}
        n_tasks = int(workload.task.max()) + 1 if len(workload) else 0
        self.index = [np.flatnonzero(workload.task == k) for k in range(n_tasks)]
        self.times = [workload.arrival_s[ix] for ix in self.index]

    def _range(self, k: int, t0: float, t1: float) -> np.ndarray:
        if k >= len(self.index):
            return np.zeros(0, dtype=np.int64)
        a = self.times[k]
        return self.index[k][np.searchsorted(a, t0, "left"):np.searchsorted(a, t1, "left")]

    def start(self, specs: Sequence[InstanceSpec], ready_at: Sequence[float]) -> None:
        for spec, r in zip(specs, ready_at, strict=True):
            self.sim.add_instance(spec)
            self.ready_at[spec.id] = r

    def ready(self, iid: str, now: float) -> bool:
        return now >= self.ready_at.get(iid, 0.0) - TOL

    def failed(self, iid: str) -> bool:
        return False

    def switch(self, k: int, task: SimTask) -> None:
        self.sim.set_task(k, task)

    def idle(self, iid: str) -> bool:
        inst = self.sim.instances[iid]
        return inst.outstanding == 0 and not inst.busy

    def stop(self, iid: str) -> None:
        self.sim.remove_instance(iid)

    def arrivals(self, k: int, t0: float, t1: float) -> int:
        if k >= len(self.times):
            return 0
        a = self.times[k]
        return int(np.searchsorted(a, t1, "left") - np.searchsorted(a, t0, "left"))

    def outcomes(self, k: int, t0: float, t1: float, now: float, slo_s: float) -> tuple[int, int]:
        ix = self._range(k, t0, t1)
        if not len(ix):
            return 0, 0
        done, failed = self.sim.done_s[ix], self.sim.failed[ix]
        age = now - self.w.arrival_s[ix]
        finished = ~np.isnan(done)
        late = np.where(finished, done - self.w.arrival_s[ix] > slo_s + TOL, age > slo_s + TOL)
        judged = failed | finished | (age > slo_s + TOL)
        return int(judged.sum()), int((failed | late).sum())

    def in_flight(self, k: int, t0: float, t1: float) -> int:
        ix = self._range(k, t0, t1)
        return int((np.isnan(self.sim.done_s[ix]) & ~self.sim.failed[ix]).sum()) if len(ix) else 0


class _Tick(Event):
    __slots__ = ("run",)
    priority = P_FREE           # after the instant's arrivals and completions, before iterations start

    def __init__(self, time: float, run: _DayRun) -> None:
        super().__init__(time)
        self.run = run

    def handle(self, sim: Simulator):
        return self.run.on_tick(self.time)


class _Poll(_Tick):
    __slots__ = ()

    def handle(self, sim: Simulator):
        return self.run.on_poll(self.time)


class _DayRun:
    def __init__(self, ctl: Controller, end_s: float) -> None:
        self.ctl, self.end_s = ctl, end_s
        self.poll_at = float("inf")

    def _polls(self, nxt: float | None, now: float) -> list[Event]:
        if nxt is None or nxt >= self.poll_at - 1e-12:
            return []
        self.poll_at = max(nxt, now)
        return [_Poll(self.poll_at, self)]

    def on_tick(self, now: float) -> list[Event]:
        self.ctl.tick(now)
        out = self._polls(self.ctl.poll(now), now)
        if now + self.ctl.cfg.interval_s <= self.end_s + TOL:
            out.append(_Tick(now + self.ctl.cfg.interval_s, self))
        return out

    def on_poll(self, now: float) -> list[Event]:
        if now < self.poll_at - 1e-12:
            return []                       # superseded by an earlier poll
        self.poll_at = float("inf")
        return self._polls(self.ctl.poll(now), now)


@dataclass(frozen=True)
class DayResult:
    """``summary`` (cell metrics, cost integrated over time, migrations), ``per_task``,
    ``decisions`` (one row per re-selection), ``gb_steps`` ((time, GB held) at every change),
    ``instances`` (one row per instance: task, model, config, GB, start, ready, drain, release),
    ``good``: per request, whether it met its SLO (the goodput numerator)."""

    summary: dict
    per_task: list[dict]
    decisions: list[dict]
    gb_steps: list[tuple[float, float]]
    instances: list[dict]
    good: np.ndarray


def simulate_day(tasks: Sequence[TaskModel], cluster: Cluster, selector: Any, workload: Workload, *, gpu: str,
                 initial_rates: Sequence[float], end_s: float, config: ControllerConfig = ControllerConfig(),
                 engine: EngineConfig = DEFAULT, price_per_gb_s: float = 1e-6,
                 forecast: Forecast | None = None) -> DayResult:
    """One policy over ``workload`` (module docstring); ``config.adaptive = False``: the first
    deployment stays all day; ``forecast``: the controller's seasonal forecast (``config.forecast_s``)."""
    t0 = time.perf_counter()
    sim = ClusterSim(gpu=gpu, instances=[], engine=engine, track_busy=True,
                     tasks=[SimTask(t.name, t.problem.task.latency_slo_s, (), placed=False) for t in tasks])
    ctl = Controller(tasks, cluster, selector, SimBackend(sim, workload), gpu=gpu, config=config,
                     forecast=forecast)
    ctl.deploy(initial_rates, now=0.0, warm=True)
    run = _DayRun(ctl, end_s)
    if config.adaptive:
        sim.sim.push(_Tick(config.interval_s, run))
    res = sim.run(workload)
    return day_result(ctl, workload, res["done_s"], res["failed"], res["acc_ok"], end_s=end_s,
                      price_per_gb_s=price_per_gb_s,
                      extra={"busy_gpu_s": float(sum(sim.gpu_busy_s.values())), "events": sim.events,
                             "sim_wall_s": sim.wall_s, "wall_s": time.perf_counter() - t0,
                             "preemptions": sum(i.preemptions for i in sim.instances.values())})


def day_result(ctl: Controller, workload: Workload, done_s: np.ndarray, failed: np.ndarray, acc_ok: np.ndarray, *,
               end_s: float, price_per_gb_s: float, extra: dict | None = None) -> DayResult:
    """The day's metrics from the per-request arrays and the controller's ledger (shared by the
    simulator and the servers backend)."""
    ended = np.where(np.isnan(done_s), -np.inf, done_s)
    residency = max(float(ended.max()) if len(ended) else 0.0, float(workload.arrival_s[-1]) if len(workload) else 0.0,
                    end_s)
    # placed: serving at the end (a task once placed stays placed; static: placed at the start)
    tasks = [SimTask(t.name, t.problem.task.latency_slo_s, (), placed=t.name in ctl.ledger.current) for t in ctl.tasks]
    summary, per_task = cell_metrics(tasks, [], workload, done_s=done_s, failed=failed, acc_ok=acc_ok,
                                     residency_s=residency, price_per_gb_s=price_per_gb_s)
    led = ctl.ledger
    steps = led.gb_steps(residency)
    gb_s = led.gb_s(residency)
    gpu_s, usd = gpu_bill(led.spans(residency), ctl.tasks[0].problem.cluster.prices if ctl.tasks else None)
    moves = [d for d in ctl.decisions if d["outcome"] == "migrate"]
    summary.update({
        "instances": len(led.held), "gb_reserved": None,
        "gb_mean": gb_s / residency if residency > 0 else 0.0, "gb_peak": max(g for _, g in steps),
        "gb_min": min(g for t, g in steps if t < residency) if steps else 0.0,
        "reserved_gb_s": gb_s, "cost_usd": gb_s * price_per_gb_s, "gpu_s_held": gpu_s, "usd": usd,
        "migrations": len(moves), "instances_started": sum(len(d["started"].split(",")) for d in moves if d["started"]),
        "reselections": sum(d["reason"] not in ("initial",) for d in ctl.decisions),
        "updates": sum(d["outcome"] == "update" for d in ctl.decisions),
        "select_s": ctl.select_s, **(extra or {})})
    for row in per_task:
        row["migrations"] = sum(d["task"] == row["task"] for d in moves)
    rows = []
    for iid, h in led.held.items():
        rows.append({"instance": iid, "task": led.task_of(h.owner), "version": h.owner, "model": h.spec.model,
                     "tp": h.spec.tp, "pp": h.spec.pp, "gpus": ",".join(map(str, h.spec.gpus)), "mem_gb": h.spec.mem_gb,
                     "start_s": h.start_s, "ready_s": h.ready_s, "drain_s": h.drain_s, "released_s": h.released_s})
    slo = np.array([t.latency_slo_s for t in tasks])[workload.task] if len(workload) else np.zeros(0)
    good = ~failed & acc_ok & (done_s - workload.arrival_s <= slo + TOL)
    return DayResult(summary, per_task, list(ctl.decisions), steps, rows, good)
