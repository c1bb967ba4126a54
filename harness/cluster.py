"""The ``sim`` backend: instances on shared GPUs, requests flowing through their workflow's
stages, a router per stage. The what-if tool (``harness.simulate``) is one task of one stage here.

A workflow request visits its stages in order; a stage with ``calls = k`` makes k calls one
after another; each call goes to one instance of the stage, picked by the router (least
outstanding calls unless told otherwise; a stage with routes for RouteLLM's weak and strong
models first picks one by the request's difficulty). A request fails when its task was not
placed or one of its calls can never fit its instance's KV cache. Instances with shards on the
same GPU slow each other down while busy at the same time (``orchestrator.engines.llm_timing.Colocation``).

:func:`build_core` is the one way an instance spec (model, TP x PP, GPUs, memory) on a GPU type
with an engine configuration becomes an engine core; :func:`instance_timing` is its step time
and KV capacity, which the orchestrated runs (``harness.orchestration``) use too.
"""
from __future__ import annotations

import gc
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_seq import FAILED, Seq, Sink
from orchestrator.engines.llm_timing import Colocation, GpuSlot, StepTime
from orchestrator.runtime.events import Arrivals, Event, Simulator
from profiler.engine import DEFAULT, EngineConfig, kv_capacity_tokens
from selector.deployment import InstanceSpec, Route, route_index

ROUTERS = ("round-robin", "least-outstanding")


class RoundRobin:
    """Instances in turn, in the order given."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def pick(self, instances: Sequence[LLMCore], call: Seq) -> LLMCore:
        inst = instances[self._next % len(instances)]
        self._next += 1
        return inst


class LeastOutstanding:
    """The instance with the fewest queued plus running calls; ties: the first listed."""

    name = "least-outstanding"

    def pick(self, instances: Sequence[LLMCore], call: Seq) -> LLMCore:
        if len(instances) == 1:
            return instances[0]
        return min(instances, key=_outstanding)


_outstanding = attrgetter("outstanding")


Router = RoundRobin | LeastOutstanding


def make_router(name: str) -> Router:
    if name == "round-robin":
        return RoundRobin()
    if name == "least-outstanding":
        return LeastOutstanding()
    raise KeyError(f"unknown router '{name}'; known: {', '.join(ROUTERS)}")


def instance_timing(spec: InstanceSpec, *, gpu: str, engine: EngineConfig,
                    step: StepTime | None = None) -> tuple[StepTime, int]:
    """``spec``'s step time model (the profiler's for its model on ``tp x pp`` GPUs of its own type
    (``spec.gpu_type``, spec section 10), or of ``gpu`` when the plan names none, unless ``step``
    is given) and its KV capacity in tokens from the memory it was given (``mem_gb``;
    ``engine.kv_capacity_tokens`` overrides); 0 tokens when nothing is left for the cache."""
    if step is None:
        from profiler.steps import step_model
        sm = step_model(spec.model, spec.gpu_name(gpu), spec.tp, spec.pp)
        return sm, kv_capacity_tokens(sm, engine, mem_gb=spec.mem_gb)
    return step, kv_capacity_tokens(step, engine, mem_gb=spec.mem_gb)


def build_core(spec: InstanceSpec, *, gpu: str, engine: EngineConfig, sink: Sink, loop: Simulator,
               step: StepTime | None = None, gpus: Sequence[GpuSlot] = (),
               colocation: Colocation | None = None) -> LLMCore:
    """The engine core of instance ``spec`` on GPU type ``gpu`` (:func:`instance_timing`),
    running on ``loop``; ``gpus``: its slots when instances share GPUs (with ``colocation``)."""
    sm, kv = instance_timing(spec, gpu=gpu, engine=engine, step=step)
    return LLMCore(name=spec.id, step=sm, kv_tokens=kv, sink=sink, config=engine, gpus=gpus,
                   colocation=colocation, loop=loop, coast=True)


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
        k = 0 if len(self.routes) == 1 else route_index([r.share for r in self.routes], difficulty)
        return self.routes[k].instances, (self.accuracy_ok[k] if self.accuracy_ok else True)

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The instance groups a call may be routed to (one per route with instances)."""
        return tuple(r.instances for r in self.routes if r.instances)

    def sizes(self, prompt_scale: float, output_scale: float) -> tuple[int, int]:
        """One call's (prompt, output) tokens for a request scaled by its own token counts."""
        p, o = round(self.prompt_tokens * prompt_scale), round(self.output_tokens * output_scale)
        return (p if p > 1 else 1), (o if o > 1 else 1)

    def size_columns(self, prompt_scale: np.ndarray, output_scale: np.ndarray) -> tuple[list[int], list[int]]:
        """:meth:`sizes` of every request at once (the same rounding, half to even)."""
        def col(tokens: int, scale: np.ndarray) -> list[int]:
            return np.maximum(np.rint(tokens * np.asarray(scale, dtype=float)), 1).astype(np.int64).tolist()

        return col(self.prompt_tokens, prompt_scale), col(self.output_tokens, output_scale)


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


#: what every call of a stage shares: the stage, the instances its calls go to (None: several
#: routes, picked per request) and whether their model meets the accuracy SLO, each request's
#: call sizes (prompt, output tokens; ``SimStage.sizes``)
_StagePlan = tuple[SimStage, "list[LLMCore] | None", bool, list[int], list[int]]


class _Req:
    __slots__ = ("i", "task", "stage", "left", "acc_ok")

    def __init__(self, i: int, task: SimTask) -> None:
        self.i, self.task = i, task
        self.stage = 0
        self.left = 0
        self.acc_ok = True


class ClusterSim:
    """Build once per (deployments, workload); ``run()`` returns per-request results."""

    def __init__(self, *, gpu: str, instances: Sequence[InstanceSpec], tasks: list[SimTask],
                 engine: EngineConfig = DEFAULT, step_override: StepTime | None = None, colocation: bool = True,
                 busy_until_s: float = float("inf"), track_busy: bool = True, router: Router | None = None,
                 share_gpus: bool = True, keep_calls: bool = False) -> None:
        """``gpu``: the GPU type of every instance; ``colocation``: charge the slowdown of
        instances sharing a GPU (off: every instance runs as if alone, the sensitivity row of
        the paper experiment); ``busy_until_s``: GPU busy time (``gpu_busy_s``) is counted up to
        this time; ``track_busy`` off: ``gpu_busy_s`` is empty; ``share_gpus`` off: no GPU is shared
        (each instance owns its GPUs, as the what-if tool's replicas): no slots at all, nothing
        tracked; ``router``: default least outstanding; ``keep_calls``: keep every call
        (``calls``, in issue order)."""
        self.tasks = tasks
        self.engine = engine
        self.sim = Simulator()
        self.gpus: dict[int, GpuSlot] = {}
        self._busy_until_s = busy_until_s
        self._track_busy = track_busy and share_gpus
        self._share = share_gpus
        self._colo = Colocation() if colocation else None   # off: GPU busy time is still kept
        self._gpu, self._step = gpu, step_override
        self.instances: dict[str, LLMCore] = {}
        self._plans: dict[int, _StagePlan] = {}     # by id(stage), the stage kept in it (_plan)
        for spec in instances:
            self.add_instance(spec)
        self._groups: dict[tuple[str, ...], list[LLMCore]] = {}
        for t in tasks:
            for s in t.stages:
                for ids in s.groups:
                    if t.placed:
                        self._groups[ids] = [self.instances[i] for i in ids]
        self.router: Router = router or LeastOutstanding()
        self.calls: list[Seq] | None = [] if keep_calls else None
        self._next_call = 0
        self._least = isinstance(self.router, LeastOutstanding)   # it picks the only instance of a group

    # ---- request flow -----------------------------------------------------------------
    def run(self, workload: Workload) -> dict[str, np.ndarray]:
        """Replay ``workload``; per request: ``done_s`` (NaN if failed), ``failed``, ``acc_ok``."""
        t0 = time.perf_counter()
        self.begin(workload)
        if len(workload):
            self._start()
        paused = gc.isenabled()
        if paused:          # the loop makes no reference cycles: the collector would only walk the heap
            gc.disable()
        try:
            self.sim.run()
        finally:
            if paused:
                # what the loop left (its calls, ~40k objects, no cycles) joins the oldest generation
                # untraversed (freeze, then unfreeze: two list splices), not walked by the young
                # collection that enabling the collector would make at the next allocation
                gc.freeze()
                gc.unfreeze()
                gc.enable()
        self.wall_s = time.perf_counter() - t0
        return {"done_s": self.done_s, "failed": self.failed, "acc_ok": self.acc_ok}

    def begin(self, workload: Workload) -> None:
        """Take ``workload`` (its results empty) without putting anything on the loop: ``run`` does
        then; a test may make requests arrive itself (:meth:`arrive_one`)."""
        self.w = workload
        n = len(workload)
        self.done_s = np.full(n, np.nan)
        self.failed = np.zeros(n, dtype=bool)
        self.acc_ok = np.ones(n, dtype=bool)
        # the workload's columns as Python numbers (one request's values read per arrival; call
        # sizes: per stage, _plan)
        self._task, self._diff = workload.task.astype(np.int64).tolist(), workload.difficulty.astype(float).tolist()
        self._arrival: list[float] = workload.arrival_s.astype(float).tolist()
        self._miss: set[int] = set()        # one-call requests whose route misses the accuracy SLO
        self._plans.clear()                 # their size columns are this workload's

    def _start(self) -> None:
        """Put the first arrival on the loop (a closed loop, ``harness.load``, sends instead)."""
        self.sim.push(Arrivals(self._arrival[0], 0, self))

    @property
    def arrival_s(self) -> Sequence[float] | np.ndarray:
        """The workload's arrival times (``core.Arrivals`` reads them; Python floats: one read per arrival)."""
        return self._arrival

    def arrive_one(self, i: int, now: float) -> Iterable[Event] | None:
        """Request ``i`` arrives (``core.Arrivals`` calls this for every request of an instant)."""
        task = self.tasks[self._task[i]]
        if not task.placed:
            self.failed[i] = True
            self.acc_ok[i] = False
            return None
        stages = task.stages
        if len(stages) == 1 and stages[0].calls == 1:     # one call: no request object (_done)
            return self._call(stages[0], i, i, now)
        req = _Req(i, task)
        req.left = stages[0].calls
        return self._call(stages[0], i, req, now)

    def _call(self, st: SimStage, i: int, owner: _Req | int, now: float) -> Iterable[Event] | None:
        """Issue one call of request ``i`` at stage ``st``; its owner: the request object, or
        for a one-call request its index (an accuracy miss then noted in ``_miss``)."""
        plan = self._plans.get(id(st)) or self._plan(st)
        group, ok = plan[1], plan[2]
        if group is None:                   # several routes: by the request's difficulty
            ids, ok = st.route(self._diff[i])
            group = self._groups[ids]
        if not ok:
            if isinstance(owner, int):
                self._miss.add(i)
            else:
                owner.acc_ok = False
        self._next_call += 1
        call = Seq(self._next_call, plan[3][i], plan[4][i], now, owner)
        if self.calls is not None:
            self.calls.append(call)
        if len(group) == 1 and self._least:     # the router's pick, known
            return group[0].submit(call, now)
        return self.router.pick(group, call).submit(call, now)

    def _plan(self, st: SimStage) -> _StagePlan:
        """What every call of stage ``st`` shares (:data:`_StagePlan`), worked out at its first call
        (the size columns in one pass over the workload, as ``SimStage.sizes`` rounds them)."""
        if len(st.routes) == 1:
            ids, ok = st.route(0.0)
            group: list[LLMCore] | None = self._groups[ids]
        else:
            group, ok = None, True
        prompt, output = st.size_columns(self.w.prompt_scale, self.w.output_scale)
        plan = self._plans[id(st)] = (st, group, ok, prompt, output)
        return plan

    def request_of(self, call: Seq) -> int:
        """The index of the request ``call`` belongs to."""
        owner = call.owner
        return owner if isinstance(owner, int) else self._req(call).i

    def stage_of(self, call: Seq) -> int:
        """The stage index of its request that ``call`` serves (read before the call is done)."""
        return 0 if isinstance(call.owner, int) else self._req(call).stage

    @staticmethod
    def _req(call: Seq) -> _Req:
        return call.owner               # type: ignore[return-value] - a call's owner not an index is its request

    def _done(self, call: Seq, now: float) -> Iterable[Event] | None:
        i = call.owner
        if i.__class__ is int:          # a one-call request: its index
            if call.state == FAILED:
                self.failed[i] = True   # type: ignore[index]
            else:
                self.done_s[i] = now    # type: ignore[index]
                if i in self._miss:
                    self.acc_ok[i] = False      # type: ignore[index]
            return None
        req = self._req(call)
        if call.state == FAILED:
            self.failed[req.i] = True
            return None
        req.left -= 1
        if req.left == 0:
            req.stage += 1
            if req.stage == len(req.task.stages):
                self.done_s[req.i] = now
                if not req.acc_ok:              # (True from the start)
                    self.acc_ok[req.i] = False
                return None
            req.left = req.task.stages[req.stage].calls
        return self._call(req.task.stages[req.stage], req.i, req, now)

    # ---- summaries --------------------------------------------------------------------
    @property
    def events(self) -> int:
        return self.sim.events_handled

    @property
    def makespan_s(self) -> float:
        return self.sim.now

    # ---- a deployment that changes while it runs (harness.adaptive) ----------------------
    def add_instance(self, spec: InstanceSpec) -> LLMCore:
        """A new, empty instance of ``spec`` from now on (:func:`build_core`, colocated with the
        instances on its GPUs); no call reaches it until a task's route lists it (:meth:`set_task`)."""
        if spec.id in self.instances:
            raise ValueError(f"instance {spec.id!r} already exists")
        gs = [self.gpus.get(g) or self.gpus.setdefault(g, GpuSlot(g, until_s=self._busy_until_s))
              for g in spec.gpus] if self._share else []
        self._plans.clear()
        inst = self.instances[spec.id] = build_core(spec, gpu=self._gpu, engine=self.engine, sink=self._done,
                                                    loop=self.sim, step=self._step, gpus=gs, colocation=self._colo)
        return inst

    def set_task(self, k: int, task: SimTask) -> None:
        """Task ``k`` follows ``task`` for requests arriving from now on; a request already under
        way keeps the routes it arrived with."""
        self._plans.clear()
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
        self._plans.clear()
        for ids in [ids for ids in self._groups if iid in ids]:
            del self._groups[ids]

    @property
    def gpu_busy_s(self) -> dict[int, float]:
        """Per GPU id: simulated time (up to ``busy_until_s``) during which at least one instance
        with a shard on it was mid-iteration (empty without ``track_busy``)."""
        return {g: s.busy_s for g, s in sorted(self.gpus.items())} if self._track_busy else {}
