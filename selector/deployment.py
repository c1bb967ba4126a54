"""What a plan deploys: the one :class:`Deployment` type every consumer reads.

A selector's :class:`~selector.plan.Plan` carries ``plan.deployment``: the instances the task
starts (id, model, config, GPUs, memory, planned utilisation), per stage of its workflow the
routes its calls take (instance ids and the share of requests each route gets), and the
utilisation each reused instance gains. The cluster update of spec section 8
(:meth:`Deployment.apply`), the simulator, the servers backend, the launchers and every
experiment consume this one object; nothing else turns a plan into instances.

Who builds it:

- a spec selector: :func:`build_deployment` from its chosen variant (``selector.evaluate.to_plan``);
  a spec-infeasible or unknown answer has ``deployment = None``, so section 8 leaves the
  cluster unchanged;
- a baseline: its own rules (docs/baselines.md), whatever the spec says of its choice, so a
  baseline plan may be ``infeasible`` in the spec's terms and still carry the deployment it
  really makes (``None``: it could not place anything).

Routes: a request of difficulty ``d`` in [0, 1) takes, at every stage, the first route whose
cumulative share exceeds ``d`` (RouteLLM: the weak model's route first with share
``threshold``, then the strong one). A plain stage has one route of share 1.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from selector.errors import ProblemError
from selector.problem import DEFAULT_GPU_TYPE, TOL, Cluster, Instance, Problem


K = TypeVar("K")

#: fair share's work rule per instance: (call time routed to it per second in erlangs, work cap)
Work = tuple[float, float]


def stage_work(routed_rps: float, latency_s: float, capacity_rps: float) -> Work:
    """Fair share's work rule for one stage routed to an instance at ``routed_rps`` calls per
    second: its call time per second (``routed_rps x latency_s``, erlangs) and its work cap
    (``latency_s x capacity_rps``). The one place the selectors (``selector.evaluate.routed_work``)
    and the deployment record (:func:`build_deployment`) compute them; the check is
    ``selector.placement.reused_work_ok``."""
    return routed_rps * latency_s, latency_s * capacity_rps


def add_work(work: dict[K, Work], key: K, stage: Work) -> None:
    """Route a stage's work (:func:`stage_work`) to instance ``key``: the call times add up,
    the cap is the least among the stages routed there."""
    w, c = work.get(key, (0.0, math.inf))
    work[key] = (w + stage[0], min(c, stage[1]))


def work_after(work_erlangs: float, work_cap_erlangs: float | None, add: float, cap: float) -> Work:
    """An instance's work and work cap once a variant adds ``add`` erlangs to it under the stage
    cap ``cap`` (its own cap None: no record yet)."""
    return work_erlangs + add, cap if work_cap_erlangs is None else min(cap, work_cap_erlangs)


@dataclass(frozen=True)
class InstanceSpec:
    """One new instance: ``mem_gb`` on all its ``tp*pp`` GPUs together (``mem_gb / (tp*pp)``
    per GPU); ``utilization``: the load share it is planned to carry (``load / (replicas *
    capacity)``; a baseline that overloads may plan above 1, the cluster records at most 1)."""

    id: str
    model: str
    tp: int
    pp: int
    gpus: tuple[int, ...]
    mem_gb: float
    utilization: float = 0.0
    gpu_type: str = DEFAULT_GPU_TYPE   # spec section 10: the type of its GPUs
    #: fair-share's work rule (``selector.placement.reused_work_ok``), recorded under ``sharing:
    #: fair-share`` only: its call time per second and the most its stage lets it carry
    work_erlangs: float = 0.0
    work_cap_erlangs: float | None = None

    @property
    def shard_gb(self) -> float:
        return self.mem_gb / (self.tp * self.pp)

    def gpu_name(self, default: str | None) -> str | None:
        """The catalog GPU it runs on: its own ``gpu_type`` (spec section 10), or ``default`` for
        an instance of an untyped plan."""
        return default if self.gpu_type == DEFAULT_GPU_TYPE else self.gpu_type

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "model": self.model, "tp": self.tp, "pp": self.pp, "gpu_type": self.gpu_type,
               "gpus": list(self.gpus), "mem_gb": self.mem_gb, "utilization": self.utilization}
        if self.work_cap_erlangs is not None:
            out |= {"work_erlangs": self.work_erlangs, "work_cap_erlangs": self.work_cap_erlangs}
        return out


@dataclass(frozen=True)
class Route:
    """Where a share of a stage's requests goes: ``instances`` (ids; new or reused)."""

    instances: tuple[str, ...]
    share: float = 1.0


def route_index(shares: Sequence[float], difficulty: float) -> int:
    """The route a request of ``difficulty`` in [0, 1) takes: the first whose cumulative share
    exceeds it; past the end (round-off), the last route with a positive share."""
    acc = 0.0
    for k, share in enumerate(shares):
        acc += share
        if difficulty < acc - TOL:
            return k
    return next((k for k in reversed(range(len(shares))) if shares[k] > 0), len(shares) - 1)


@dataclass(frozen=True)
class StageRoute:
    stage: str
    calls: int
    routes: tuple[Route, ...]

    def route_for(self, difficulty: float) -> Route:
        """The route a request of ``difficulty`` takes (:func:`route_index`)."""
        return self.routes[route_index([r.share for r in self.routes], difficulty)]

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(i for r in self.routes for i in r.instances)


@dataclass(frozen=True)
class Deployment:
    """A task's deployment (module docstring). ``reuse``: ``(instance id, utilisation gained)``
    for the deployed instances it routes to; ``rule``: who decided it (``spec`` or a baseline's
    rule name)."""

    task: str
    workflow: str
    instances: tuple[InstanceSpec, ...]
    stages: tuple[StageRoute, ...]
    reuse: tuple[tuple[str, float], ...] = ()
    rule: str = "spec"
    #: fair-share's work rule: ``(instance id, work gained, work cap of the stage)`` per reused
    #: instance (erlangs; ``sharing: fair-share`` only, else empty)
    reuse_work: tuple[tuple[str, float, float], ...] = ()

    @property
    def mem_gb(self) -> float:
        """New GPU memory (GB) of all its instances."""
        return sum(i.mem_gb for i in self.instances)

    def stage(self, name: str) -> StageRoute:
        return next(s for s in self.stages if s.stage == name)

    def apply(self, cluster: Cluster) -> Cluster:
        """The cluster after this deployment (spec section 8): new instances appended in order,
        their shards' memory added to their GPUs, reused instances' utilisation raised; both
        capped at 1 (and ``used_gb`` at ``mem_gb``) against round-off and overloading baselines.
        Every other field of ``cluster`` (e.g. its sharing mode) is kept."""
        existing = {i.id for i in cluster.instances}
        clash = [i.id for i in self.instances if i.id in existing]
        if clash:
            raise ProblemError("cluster.instances", f"task {self.task}: new instance id {clash[0]!r} "
                               "already exists on the cluster")
        used = {g.id: g.used_gb for g in cluster.gpus}
        for inst in self.instances:
            for g in inst.gpus:
                used[g] += inst.shard_gb
        add = dict(self.reuse)
        work = {k: (w, c) for k, w, c in self.reuse_work}
        old = tuple(i.model_copy(update={"utilization": min(1.0, i.utilization + add.get(i.id, 0.0)),
                                         **_work_update(i, work.get(i.id))})
                    if i.id in add else i for i in cluster.instances)
        new = tuple(Instance(id=i.id, model=i.model, tp=i.tp, pp=i.pp, gpus=i.gpus,
                             utilization=min(1.0, max(0.0, i.utilization)), work_erlangs=i.work_erlangs,
                             work_cap_erlangs=i.work_cap_erlangs) for i in self.instances)
        gpus = tuple(g.model_copy(update={"used_gb": min(g.mem_gb, used[g.id])}) for g in cluster.gpus)
        return cluster.model_copy(update={"gpus": gpus, "instances": old + new})

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "workflow": self.workflow, "rule": self.rule,
                "instances": [i.to_dict() for i in self.instances],
                "stages": [{"stage": s.stage, "calls": s.calls,
                            "routes": [{"instances": list(r.instances), "share": r.share} for r in s.routes]}
                           for s in self.stages],
                "reuse": [{"instance": k, "utilization_add": v} for k, v in self.reuse],
                **({"reuse_work": [{"instance": k, "work_erlangs_add": w, "work_cap_erlangs": c}
                                   for k, w, c in self.reuse_work]} if self.reuse_work else {})}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Deployment:
        """Inverse of :meth:`to_dict`; ProblemError naming the field on malformed input."""
        try:
            insts = tuple(InstanceSpec(str(i["id"]), str(i["model"]), int(i["tp"]), int(i["pp"]),
                                       tuple(int(g) for g in i["gpus"]), float(i["mem_gb"]),
                                       float(i.get("utilization", 0.0)), str(i.get("gpu_type", DEFAULT_GPU_TYPE)),
                                       float(i.get("work_erlangs", 0.0)), _opt_float(i.get("work_cap_erlangs")))
                          for i in d["instances"])
            stages = tuple(StageRoute(str(s["stage"]), int(s["calls"]),
                                      tuple(Route(tuple(str(x) for x in r["instances"]), float(r["share"]))
                                            for r in s["routes"])) for s in d["stages"])
            reuse = tuple((str(r["instance"]), float(r["utilization_add"])) for r in d.get("reuse", ()))
            work = tuple((str(r["instance"]), float(r["work_erlangs_add"]), float(r["work_cap_erlangs"]))
                         for r in d.get("reuse_work", ()))
            return Deployment(str(d["task"]), str(d["workflow"]), insts, stages, reuse, str(d.get("rule", "spec")),
                              work)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProblemError("deployment", f"malformed deployment ({type(exc).__name__}: {exc})") from None


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def _work_update(inst: Instance, gained: Work | None) -> dict[str, Any]:
    """Fair-share's work rule after reuse: the instance's call time grows by what the stage
    routes, its cap is the tighter of its own and the stage's (None: nothing recorded)."""
    if gained is None:
        return {}
    work, cap = work_after(inst.work_erlangs, inst.work_cap_erlangs, *gained)
    return {"work_erlangs": work, "work_cap_erlangs": cap}


@dataclass(frozen=True)
class Serving:
    """How one route of one stage is served, the input of :func:`build_deployment`: ``reuse``
    (an instance id) or ``replicas`` new instances of ``model`` on ``tp x pp``, one GPU list
    per replica; ``share``: the share of the stage's requests it takes; ``tag`` prefixes the
    replica index in new ids (``<task>/<stage>/<tag><r>``); ``gpu_type``: the config's GPU type
    (spec section 10; for ``reuse`` it is the instance's, read from the cluster)."""

    model: str
    tp: int
    pp: int
    reuse: str | None = None
    gpus: tuple[tuple[int, ...], ...] = ()
    share: float = 1.0
    tag: str = ""
    gpu_type: str = DEFAULT_GPU_TYPE


def build_deployment(problem: Problem, workflow: str, serving: Sequence[Sequence[Serving]], *,
                     rule: str = "spec") -> Deployment:
    """The deployment of ``serving`` (per stage of ``workflow``, its routes in order) on
    ``problem``: new replicas become instances ``<task>/<stage>/<tag><r>`` with utilisation
    ``share * load / (replicas * capacity)``; a reused instance gains ``share * load /
    capacity`` (spec sections 3 and 8; load = arrival rate x calls)."""
    wf = next(w for w in problem.workflows if w.name == workflow)
    if len(serving) != len(wf.stages):
        raise ValueError(f"{len(serving)} stage servings for {len(wf.stages)} stages of {workflow}")
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r for r in problem.perf}
    fair = problem.cluster.fair_share
    mem = {(d.model, d.tp, d.pp, d.gpu_type): d.mem_gb for d in problem.deployments}
    inst_type = {i.id: problem.cluster.instance_type(i) for i in problem.cluster.instances}
    insts: list[InstanceSpec] = []
    routes: list[StageRoute] = []
    reuse: dict[str, float] = {}
    work: dict[str, Work] = {}
    for st, ways in zip(wf.stages, serving):
        load = problem.task.arrival_rate_rps * st.calls
        stage_routes = []
        for s in ways:
            gpu_type = inst_type[s.reuse] if s.reuse is not None else s.gpu_type
            row = perf[(workflow, st.name, s.model, s.tp, s.pp, gpu_type)]
            cap = row.capacity_rps
            if s.reuse is not None:
                reuse[s.reuse] = reuse.get(s.reuse, 0.0) + s.share * load / cap
                if fair:
                    add_work(work, s.reuse, stage_work(s.share * load, row.latency_s, cap))
                stage_routes.append(Route((s.reuse,), s.share))
                continue
            ids = []
            n = len(s.gpus)
            erl, work_cap = stage_work(s.share * load, row.latency_s, cap) if fair else (0.0, None)
            for r, gpus in enumerate(s.gpus):
                iid = f"{problem.task.name}/{st.name}/{s.tag}{r}"
                insts.append(InstanceSpec(iid, s.model, s.tp, s.pp, tuple(gpus), mem[(s.model, s.tp, s.pp, gpu_type)],
                                          s.share * load / (n * cap), gpu_type, erl / n, work_cap))
                ids.append(iid)
            stage_routes.append(Route(tuple(ids), s.share))
        routes.append(StageRoute(st.name, st.calls, tuple(stage_routes)))
    return Deployment(problem.task.name, workflow, tuple(insts), tuple(routes), tuple(reuse.items()), rule,
                      tuple((k, w, c) for k, (w, c) in work.items()))

