"""Sequential deployment of several tasks (spec section 8).

``deploy_task`` solves one task against the current cluster and returns the plan with the
cluster after applying it; the next task sees that cluster.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from selector.errors import ProblemError
from selector.plan import Plan
from selector.problem import Cluster, Gpu, Instance, Problem, parse_problem
from selector.yamlio import load_mapping


class _Selects(Protocol):
    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan: ...


def apply_plan(problem: Problem, plan: Plan) -> Cluster:
    """The cluster after deploying ``plan``: new replicas become instances (utilisation
    ``load / (replicas * capacity)``, memory added to their GPUs), reused instances gain
    ``load / capacity``. New instances are appended in stage order, then replica order, with
    ids ``<task>/<stage>/<replica index>``."""
    cluster = problem.cluster
    if not plan.solved:
        return cluster
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp): r for r in problem.perf}
    mem = {(d.model, d.tp, d.pp): d.mem_gb for d in problem.deployments}
    calls = {s.name: s.calls for w in problem.workflows if w.name == plan.workflow for s in w.stages}
    used = {g.id: g.used_gb for g in cluster.gpus}
    util = {i.id: i.utilization for i in cluster.instances}
    added: list[Instance] = []
    for st in plan.stages:
        load = problem.task.arrival_rate_rps * calls[st.stage]
        cap = perf[(plan.workflow, st.stage, st.model, st.tp, st.pp)].capacity_rps
        if st.reuse is not None:
            util[st.reuse] += load / cap
            continue
        shard = mem[(st.model, st.tp, st.pp)] / (st.tp * st.pp)
        for r, gpus in enumerate(st.gpus):
            for g in gpus:
                used[g] += shard
            added.append(Instance(id=f"{problem.task.name}/{st.stage}/{r}", model=st.model, tp=st.tp, pp=st.pp,
                                  gpus=tuple(gpus), utilization=min(1.0, load / (st.replicas * cap))))
    gpus = tuple(Gpu(id=g.id, mem_gb=g.mem_gb, used_gb=min(g.mem_gb, used[g.id])) for g in cluster.gpus)
    old = tuple(i.model_copy(update={"utilization": min(1.0, util[i.id])}) for i in cluster.instances)
    return Cluster(gpus=gpus, instances=old + tuple(added))


def deploy_task(problem: Problem, selector: _Selects, *, time_limit_s: float = 60.0) -> tuple[Plan, Cluster]:
    """Solve ``problem`` with ``selector`` and return the plan and the cluster after it."""
    plan = selector.select(problem, time_limit_s=time_limit_s)
    return plan, apply_plan(problem, plan)


def with_cluster(task_problem: dict[str, Any] | Problem, cluster: Cluster) -> Problem:
    """A problem (mapping without ``cluster``, or a Problem) placed on ``cluster``."""
    if isinstance(task_problem, Problem):
        task_problem = {k: v for k, v in task_problem.to_dict().items() if k != "cluster"}
    return parse_problem({**task_problem, "cluster": cluster.model_dump(mode="json")})


def deploy_sequence(tasks: Sequence[dict[str, Any] | Problem], cluster: Cluster, selector: _Selects, *,
                    time_limit_s: float = 60.0) -> tuple[list[Plan], Cluster]:
    """Deploy ``tasks`` one after another; each sees the cluster the previous ones left."""
    plans = []
    for t in tasks:
        plan, cluster = deploy_task(with_cluster(t, cluster), selector, time_limit_s=time_limit_s)
        plans.append(plan)
    return plans, cluster


def load_bundle(path: str | Path) -> dict[str, Any]:
    """A deploy bundle: ``{cluster: ..., tasks: [problem without cluster, ...]}``."""
    data = load_mapping(path)
    unknown = set(data) - {"cluster", "tasks"}
    if unknown:
        raise ProblemError(sorted(unknown)[0], "unknown field (a bundle has `cluster` and `tasks`)")
    if "cluster" not in data or "tasks" not in data:
        raise ProblemError("cluster" if "cluster" not in data else "tasks", "missing required field")
    if not isinstance(data["tasks"], list) or not data["tasks"]:
        raise ProblemError("tasks", "must be a non-empty list")
    cluster = parse_problem_cluster(data["cluster"])
    problems = []
    for i, t in enumerate(data["tasks"]):
        if not isinstance(t, dict):
            raise ProblemError(f"tasks[{i}]", "must be a mapping")
        if "cluster" in t:
            raise ProblemError(f"tasks[{i}].cluster", "tasks take the bundle's cluster; remove this field")
        try:
            problems.append(with_cluster(t, cluster))
        except ProblemError as exc:
            raise ProblemError(f"tasks[{i}].{exc.field}", str(exc).split(": ", 1)[-1]) from None
    return {"cluster": cluster, "tasks": problems}


def parse_problem_cluster(raw: Any) -> Cluster:
    from pydantic import ValidationError

    from selector.problem import first_error
    try:
        return Cluster.model_validate(raw)
    except ValidationError as exc:
        err = first_error(exc)
        raise ProblemError(f"cluster.{err.field}", str(err).split(": ", 1)[-1]) from None


def deploy_bundle(bundle: dict[str, Any], selector: _Selects, *, time_limit_s: float = 60.0) -> dict:
    plans, cluster = deploy_sequence(bundle["tasks"], bundle["cluster"], selector, time_limit_s=time_limit_s)
    return {"plans": [p.to_dict() for p in plans], "cluster": cluster.model_dump(mode="json")}
