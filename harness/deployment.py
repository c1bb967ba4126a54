"""What a plan deploys, in the form the cluster simulator runs.

A :class:`TaskDeployment` lists the instances a task adds (id, model, config, GPUs, memory)
and, per stage of its workflow, the instances its calls may go to. It comes from either

- a spec plan (``selector.plan.Plan``): new replicas become instances
  ``<task>/<stage>/<r>`` on the plan's GPUs; a reused stage routes to the named instance; or
- a baseline's own deployment in ``plan.extra["deployment"]`` (docs/baselines.md): used
  whatever the plan's status, because a baseline deploys by its own rules even where the
  spec would call its choice infeasible (LangChain packs GPUs; RouteLLM deploys a strong and
  a weak model per stage). ``extra["deployment"] = None`` means the task could not be placed.

``apply_deployment`` returns the cluster the next task sees (memory and utilisation added).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selector.plan import Plan
from selector.problem import Cluster, Gpu, Instance, Problem


@dataclass(frozen=True)
class InstanceSpec:
    id: str
    model: str
    tp: int
    pp: int
    gpus: tuple[int, ...]
    mem_gb: float       # allocated on all its GPUs together (its shards are mem_gb / (tp*pp) each)


@dataclass(frozen=True)
class StageRoute:
    stage: str
    calls: int
    strong: tuple[str, ...]          # instance ids serving the stage
    weak: tuple[str, ...] = ()       # RouteLLM: the weak model's instances


@dataclass(frozen=True)
class TaskDeployment:
    task: str
    workflow: str | None
    placed: bool
    instances: tuple[InstanceSpec, ...]        # new instances of this task
    stages: tuple[StageRoute, ...]
    util_add: tuple[tuple[str, float], ...] = ()   # utilisation each instance gains
    routing: dict[str, Any] | None = None      # RouteLLM: {"strong", "weak", "threshold", "setting"}
    reason: str | None = None                  # why it is not placed


def _perf(problem: Problem) -> dict:
    return {(r.workflow, r.stage, r.model, r.tp, r.pp): r for r in problem.perf}


def deployment_of(problem: Problem, plan: Plan) -> TaskDeployment:
    """The deployment ``plan`` makes on ``problem``'s cluster (see the module docstring)."""
    if "deployment" in plan.extra:
        return _from_extra(problem, plan.extra["deployment"], plan)
    if not plan.solved:
        return TaskDeployment(problem.task.name, None, False, (), (), reason=plan.reason)
    wf = next(w for w in problem.workflows if w.name == plan.workflow)
    mem = {(d.model, d.tp, d.pp): d.mem_gb for d in problem.deployments}
    perf = _perf(problem)
    insts: list[InstanceSpec] = []
    routes: list[StageRoute] = []
    util: dict[str, float] = {}
    for st, sp in zip(wf.stages, plan.stages, strict=True):
        load = problem.task.arrival_rate_rps * st.calls
        cap = perf[(wf.name, st.name, sp.model, sp.tp, sp.pp)].capacity_rps
        if sp.reuse is not None:
            routes.append(StageRoute(st.name, st.calls, (sp.reuse,)))
            util[sp.reuse] = util.get(sp.reuse, 0.0) + load / cap
            continue
        ids = []
        for r, gpus in enumerate(sp.gpus):
            iid = f"{problem.task.name}/{st.name}/{r}"
            insts.append(InstanceSpec(iid, sp.model, sp.tp, sp.pp, tuple(gpus), mem[(sp.model, sp.tp, sp.pp)]))
            util[iid] = load / (sp.replicas * cap)
            ids.append(iid)
        routes.append(StageRoute(st.name, st.calls, tuple(ids)))
    return TaskDeployment(problem.task.name, wf.name, True, tuple(insts), tuple(routes), tuple(util.items()))


def _from_extra(problem: Problem, d: dict | None, plan: Plan) -> TaskDeployment:
    if d is None:
        return TaskDeployment(problem.task.name, None, False, (), (),
                              reason=plan.extra.get("unplaced_reason") or plan.reason)
    insts = tuple(InstanceSpec(i["id"], i["model"], int(i["tp"]), int(i["pp"]), tuple(i["gpus"]),
                               float(i["mem_gb"])) for i in d["instances"])
    calls = {s.name: s.calls for w in problem.workflows if w.name == d["workflow"] for s in w.stages}
    routes = tuple(StageRoute(s["stage"], calls[s["stage"]], tuple(s["strong"]), tuple(s.get("weak", ())))
                   for s in d["stages"])
    return TaskDeployment(problem.task.name, d["workflow"], True, insts, routes,
                          tuple((k, float(v)) for k, v in d.get("util_add", {}).items()), d.get("routing"))


def apply_deployment(problem: Problem, dep: TaskDeployment) -> Cluster:
    """The cluster after ``dep``: new instances appended (memory on their GPUs), utilisation added
    (capped at 1, as ``selector.deploy.apply_plan`` does)."""
    cluster = problem.cluster
    if not dep.placed:
        return cluster
    used = {g.id: g.used_gb for g in cluster.gpus}
    for inst in dep.instances:
        for g in inst.gpus:
            used[g] += inst.mem_gb / (inst.tp * inst.pp)
    add = dict(dep.util_add)
    old = tuple(i.model_copy(update={"utilization": min(1.0, i.utilization + add.get(i.id, 0.0))})
                for i in cluster.instances)
    new = tuple(Instance(id=i.id, model=i.model, tp=i.tp, pp=i.pp, gpus=i.gpus,
                         utilization=min(1.0, add.get(i.id, 0.0))) for i in dep.instances)
    gpus = tuple(Gpu(id=g.id, mem_gb=g.mem_gb, used_gb=min(g.mem_gb, used[g.id])) for g in cluster.gpus)
    return Cluster(gpus=gpus, instances=old + new)
