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
from selector.problem import Cluster, Problem, parse_problem
from selector.yamlio import load_mapping


class _Selects(Protocol):
    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan: ...


def deploy_task(problem: Problem, selector: _Selects, *, time_limit_s: float = 60.0) -> tuple[Plan, Cluster]:
    """Solve ``problem`` with ``selector`` and return the plan and the cluster after it: the
    plan's :class:`~selector.deployment.Deployment` applied (spec section 8), or the cluster
    unchanged when the plan deploys nothing. A baseline's plan deploys what its own rules
    chose even when its spec status is ``infeasible`` (docs/baselines.md)."""
    plan = selector.select(problem, time_limit_s=time_limit_s)
    if plan.deployment is None:
        return plan, problem.cluster
    return plan, plan.deployment.apply(problem.cluster)


def with_cluster(task_problem: dict[str, Any] | Problem, cluster: Cluster) -> Problem:
    """A problem (mapping without ``cluster``, or a Problem) placed on ``cluster``."""
    if isinstance(task_problem, Problem):
        task_problem = {k: v for k, v in task_problem.to_dict().items() if k != "cluster"}
    return parse_problem({**task_problem, "cluster": cluster.model_dump(mode="json")})


def deploy_sequence(tasks: Sequence[dict[str, Any] | Problem], cluster: Cluster, selector: _Selects, *,
                    time_limit_s: float = 60.0) -> tuple[list[Plan], Cluster]:
    """Deploy ``tasks`` one after another; each sees the cluster the previous ones left. Task
    names must be distinct (spec section 8): a repeated one is a ProblemError.

    Every task is checked by section 1 against the input ``cluster``, all before the first is
    solved; the clusters earlier tasks produce are not checked again (as spec section 11 says of
    a task set): such a cluster may hold instances of models a later task does not list, which
    that task simply cannot reuse. So ``deploy`` and ``joint --solver sequential`` answer alike."""
    check_distinct_names([_task_name(t) for t in tasks])
    problems = [with_cluster(t, cluster) for t in tasks]
    plans = []
    for p in problems:
        plan, cluster = deploy_task(p.model_copy(update={"cluster": cluster}), selector, time_limit_s=time_limit_s)
        plans.append(plan)
    return plans, cluster


def _task_name(t: dict[str, Any] | Problem) -> str | None:
    if isinstance(t, Problem):
        return t.task.name
    task = t.get("task")
    return task.get("name") if isinstance(task, dict) else None


def check_distinct_names(names: Sequence[str | None]) -> None:
    """ProblemError ``tasks[i].task.name`` at the first name seen before (spec section 8)."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ProblemError(f"tasks[{i}].task.name", f"duplicate task name '{name}' (task names in one "
                               "deployment sequence must be distinct)")
        if name is not None:
            seen.add(name)


def load_bundle(path: str | Path) -> dict[str, Any]:
    """A deploy bundle: ``{cluster: ..., tasks: [...]}`` (docs/your-own-task.md).

    ``cluster`` is a cluster name or file (``configs/clusters``), a mapping in the cluster-file
    layout (``nodes:``) or in the problem's layout (``gpus:``, spec section 1). Each task is a
    task name or file (``configs/tasks``; resolved on the bundle's cluster with the analytic
    model) or a resolved problem without ``cluster``."""
    data = load_mapping(path)
    unknown = set(data) - {"cluster", "tasks"}
    if unknown:
        raise ProblemError(sorted(unknown)[0], "unknown field (a bundle has `cluster` and `tasks`)")
    if "cluster" not in data or "tasks" not in data:
        raise ProblemError("cluster" if "cluster" not in data else "tasks", "missing required field")
    if not isinstance(data["tasks"], list) or not data["tasks"]:
        raise ProblemError("tasks", "must be a non-empty list")
    cluster, gpu = bundle_cluster(data["cluster"])
    problems = []
    for i, t in enumerate(data["tasks"]):
        if isinstance(t, str):
            if gpu is None:
                raise ProblemError(f"tasks[{i}]", "a task name needs a cluster file (a name, a path or "
                                   "`nodes:`), not a resolved cluster, to resolve it on")
            from selector.resolve import resolve_task
            t = {k: v for k, v in resolve_task(t, cluster=cluster, gpu=gpu).to_dict().items() if k != "cluster"}
        if not isinstance(t, dict):
            raise ProblemError(f"tasks[{i}]", "must be a task name, a task file or a resolved problem (a mapping)")
        if "cluster" in t:
            raise ProblemError(f"tasks[{i}].cluster", "tasks take the bundle's cluster; remove this field")
        try:
            problems.append(with_cluster(t, cluster))
        except ProblemError as exc:
            raise ProblemError(f"tasks[{i}].{exc.field}", str(exc).split(": ", 1)[-1]) from None
    check_distinct_names([p.task.name for p in problems])
    return {"cluster": cluster, "tasks": problems}


def bundle_cluster(raw: Any) -> tuple[Cluster, str | None]:
    """A bundle's ``cluster``: a name or file, a cluster-file mapping (``nodes:``), or a problem
    cluster (``gpus:``); with the GPU type when it is known (not for a problem cluster)."""
    if isinstance(raw, str):
        from selector.clusterfile import load_cluster_file
        return load_cluster_file(raw)
    if isinstance(raw, dict) and "nodes" in raw:
        from profiler.catalog import CatalogError
        from selector.clusterfile import cluster_from_spec
        try:
            return cluster_from_spec(raw, where="bundle")
        except CatalogError as exc:
            raise ProblemError("", str(exc)) from None
    return parse_problem_cluster(raw), None


def parse_problem_cluster(raw: Any) -> Cluster:
    from pydantic import ValidationError

    from selector.problem import first_error
    try:
        return Cluster.model_validate(raw)
    except ValidationError as exc:
        err = first_error(exc, Cluster)
        raise ProblemError(f"cluster.{err.field}", str(err).split(": ", 1)[-1]) from None


def deploy_bundle(bundle: dict[str, Any], selector: _Selects, *, time_limit_s: float = 60.0) -> dict:
    plans, cluster = deploy_sequence(bundle["tasks"], bundle["cluster"], selector, time_limit_s=time_limit_s)
    return {"plans": [p.to_dict() for p in plans], "cluster": cluster.model_dump(mode="json")}
