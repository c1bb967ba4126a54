"""The ``sim`` backend for several tasks: instances on shared GPUs, requests flowing through
their workflow's stages, a router per stage.

A workflow request visits its stages in order; a stage with ``calls = k`` makes k calls one
after another; each call goes to one instance of the stage, picked by least outstanding
calls (a stage with routes for RouteLLM's weak and strong models first picks one by the request's
difficulty). A request fails when its task was not placed or one of its calls can never fit
its instance's KV cache. Instances with shards on the same GPU slow each other down while
busy at the same time (``orchestrator.engines.llm_core.Colocation``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.routers import LeastOutstanding
from orchestrator.engines.llm_core import Colocation, GpuSlot, LLMCore, Seq
from orchestrator.runtime.events import Arrivals, Event, Simulator
from profiler.engine import DEFAULT, EngineConfig, kv_capacity_tokens
from profiler.steps import step_model
from selector.deployment import Route, route_index


@dataclass(frozen=True)
class SimStage:
    """One stage of a placed task: ``routes`` (``selector.deployment.Route``: instance ids and
    the share of requests each takes, as the deployment's ``StageRoute``); ``accuracy_ok`` per
    route: whether its models meet the task's accuracy SLO (empty: all do)."""

    name: str
    calls: int
    prompt_tokens: int          # one call's sizes for a request of average size
    output_tokens: int
    routes: tuple[Route, ...]
    accuracy_ok: tuple[bool, ...] = ()

    def route(self, difficulty: float) -> tuple[tuple[str, ...], bool]:
        """The instances a request's calls go to and whether their model meets the accuracy SLO
        (``selector.deployment.route_index``: RouteLLM's easy requests take the weak route)."""
        k = route_index([r.share for r in self.routes], difficulty)
        return self.routes[k].instances, (self.accuracy_ok[k] if self.accuracy_ok else True)

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The instance groups a call may be routed to (one per route with instances)."""
        return tuple(r.instances for r in self.routes if r.instances)

    def sizes(self, prompt_scale: float, output_scale: float) -> tuple[int, int]:
        """One call's (prompt, output) tokens for a request scaled by its own token counts."""
        return max(1, round(self.prompt_tokens * prompt_scale)), max(1, round(self.output_tokens * output_scale))


@dataclass(frozen=True)
class SimTask:
    name: str
    latency_slo_s: float
    stages: tuple[SimStage, ...]
    placed: bool = True


@dataclass(frozen=True)
class Workload:
    """Workflow requests, sorted by arrival: times (s), task index, token scale factors
    (this request's tokens / the trace's mean), difficulty in [0, 1]."""

    arrival_s: np.ndarray
    task: np.ndarray
    prompt_scale: np.ndarray
    output_scale: np.ndarray
    difficulty: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


class _NoSlowdown(Colocation):
    """Colocation off: instances sharing a GPU do not slow each other (GPU busy time is still kept)."""

    def factor(self, gpus) -> float:
        return 1.0


class _TrackedGpu(GpuSlot):
    """A ``GpuSlot`` that also adds up the time during which ``busy > 0`` (up to ``until_s``)."""

    __slots__ = ("_n", "clock", "until_s", "since", "busy_s")

    def __init__(self, id: int, clock: Simulator, until_s: float) -> None:
        self._n, self.clock, self.until_s, self.since, self.busy_s = 0, clock, until_s, 0.0, 0.0
        super().__init__(id)

    @property
    def busy(self) -> int:
        return self._n

    @busy.setter
    def busy(self, n: int) -> None:
        if (self._n > 0) != (n > 0):
            now = min(self.clock.now, self.until_s)
            if n > 0:
                self.since = now
            else:
                self.busy_s += now - self.since
        self._n = n


class _Req:
    __slots__ = ("i", "task", "stage", "left", "acc_ok", "diff", "ps", "os")

    def __init__(self, i: int, task: SimTask, diff: float, ps: float, os: float) -> None:
        self.i, self.task, self.diff, self.ps, self.os = i, task, diff, ps, os
        self.stage = 0
        self.left = 0
        self.acc_ok = True


class ClusterSim:
    """Build once per (deployments, workload); ``run()`` returns per-request results."""

    def __init__(self, *, gpu: str, instances: list[Any], tasks: list[SimTask],
                 engine: EngineConfig = DEFAULT, step_override: Any = None, colocation: bool = True,
                 busy_until_s: float = float("inf"), track_busy: bool = True) -> None:
        """``colocation``: charge the slowdown of instances sharing a GPU (off: every instance runs
        as if alone, the sensitivity row of the paper experiment); ``busy_until_s``: GPU busy time
        (``gpu_busy_s``) is counted up to this time; ``track_busy`` off: plain GPU slots, no busy
        time (``gpu_busy_s`` is empty) and a ~1.7x faster run where instances share GPUs."""
        self.tasks = tasks
        self.engine = engine
        self.sim = Simulator()
        slots: dict[int, GpuSlot] = {}
        slot = (lambda g: _TrackedGpu(g, self.sim, busy_until_s)) if track_busy else GpuSlot
        self._track_busy = track_busy
        colo = Colocation() if colocation else _NoSlowdown()
        self.instances: dict[str, LLMCore] = {}
        for spec in instances:
            sm = step_override or step_model(spec.model, gpu, spec.tp, spec.pp)
            kv = kv_capacity_tokens(sm, engine, mem_gb=spec.mem_gb)   # the plan's allocation
            gs = [slots.setdefault(g, slot(g)) for g in spec.gpus]
            self.instances[spec.id] = LLMCore(name=spec.id, step=sm, kv_tokens=kv, sink=self._done, config=engine,
                                              gpus=gs, colocation=colo, loop=self.sim)
        self._groups: dict[tuple[str, ...], list[LLMCore]] = {}
        for t in tasks:
            for s in t.stages:
                for ids in s.groups:
                    if t.placed:
                        self._groups[ids] = [self.instances[i] for i in ids]
        self.router = LeastOutstanding()
        self.gpus = slots
        self._next_call = 0
        self._spawn = (gpu, step_override, colo, slot)     # how add_instance builds a core

    # ---- request flow -----------------------------------------------------------------
    def run(self, workload: Workload) -> dict[str, np.ndarray]:
        """Replay ``workload``; per request: ``done_s`` (NaN if failed), ``failed``, ``acc_ok``."""
        t0 = time.perf_counter()
        self.w = workload
        n = len(workload)
        self.done_s = np.full(n, np.nan)
        self.failed = np.zeros(n, dtype=bool)
        self.acc_ok = np.ones(n, dtype=bool)
        if n:
            self.sim.push(Arrivals(float(workload.arrival_s[0]), 0, self))
        self.sim.run()
        self.wall_s = time.perf_counter() - t0
        return {"done_s": self.done_s, "failed": self.failed, "acc_ok": self.acc_ok}

    @property
    def arrival_s(self):
        return self.w.arrival_s

    def arrive_one(self, i: int, now: float) -> list[Event] | None:
        """Request ``i`` arrives (``core.Arrivals`` calls this for every request of an instant)."""
        w = self.w
        task = self.tasks[int(w.task[i])]
        if not task.placed:
            self.failed[i] = True
            self.acc_ok[i] = False
            return None
        req = _Req(i, task, float(w.difficulty[i]), float(w.prompt_scale[i]), float(w.output_scale[i]))
        req.left = task.stages[0].calls
        return self._issue(req, now)

    def _issue(self, req: _Req, now: float):
        st = req.task.stages[req.stage]
        ids, ok = st.route(req.diff)
        if not ok:
            req.acc_ok = False
        self._next_call += 1
        call = Seq(self._next_call, *st.sizes(req.ps, req.os), now, owner=req)
        return self.router.pick(self._groups[ids], call).submit(call, now)

    def _done(self, call: Seq, now: float):
        req: _Req = call.owner
        if call.failed:
            self.failed[req.i] = True
            return None
        req.left -= 1
        if req.left == 0:
            req.stage += 1
            if req.stage == len(req.task.stages):
                self.done_s[req.i] = now
                self.acc_ok[req.i] = req.acc_ok
                return None
            req.left = req.task.stages[req.stage].calls
        return self._issue(req, now)

    # ---- summaries --------------------------------------------------------------------
    @property
    def events(self) -> int:
        return self.sim.events_handled

    @property
    def makespan_s(self) -> float:
        return self.sim.now

    # ---- a deployment that changes while it runs (harness.adaptive) ----------------------
    def add_instance(self, spec: Any) -> LLMCore:
        """A new, empty instance of ``spec`` (an ``InstanceSpec``) from now on, built and colocated
        like those given at construction; no call reaches it until a task's route lists it
        (:meth:`set_task`)."""
        if spec.id in self.instances:
            raise ValueError(f"instance {spec.id!r} already exists")
        gpu, step_override, colo, slot = self._spawn
        sm = step_override or step_model(spec.model, gpu, spec.tp, spec.pp)
        kv = kv_capacity_tokens(sm, self.engine, mem_gb=spec.mem_gb)
        gs = [self.gpus.setdefault(g, slot(g)) for g in spec.gpus]
        inst = self.instances[spec.id] = LLMCore(name=spec.id, step=sm, kv_tokens=kv, sink=self._done,
                                                 config=self.engine, gpus=gs, colocation=colo, loop=self.sim)
        return inst

    def set_task(self, k: int, task: SimTask) -> None:
        """Task ``k`` follows ``task`` for requests arriving from now on; a request already under
        way keeps the routes it arrived with."""
        if task.placed:
            for s in task.stages:
                for ids in s.groups:
                    self._groups[ids] = [self.instances[i] for i in ids]
        self.tasks[k] = task

    def remove_instance(self, iid: str) -> None:
        """Drop an idle instance (nothing queued or running) and every route group listing it."""
        inst = self.instances[iid]
        if inst.outstanding or inst.busy:
            raise ValueError(f"instance {iid!r} still has {inst.outstanding} call(s)")
        del self.instances[iid]
        for ids in [ids for ids in self._groups if iid in ids]:
            del self._groups[ids]

    @property
    def gpu_busy_s(self) -> dict[int, float]:
        """Per GPU id: simulated time (up to ``busy_until_s``) during which at least one instance
        with a shard on it was mid-iteration (empty without ``track_busy``)."""
        return {g: s.busy_s for g, s in sorted(self.gpus.items())} if self._track_busy else {}
