"""A task set (spec section 11): one cluster, one objective, several resolved tasks, as typed data.

``parse_task_set`` / ``load_task_set`` turn a mapping or a YAML/JSON file into a frozen
:class:`TaskSet`, rejecting bad input with a :class:`~selector.errors.ProblemError` naming the
field: the cluster is checked as section 1 (and 9, 10) says, then every task with the input
cluster and the set's objective (section 1's rules per task), then the set's own rules
(distinct task names; no input instance id of the form ``<task>/<stage>/<n>`` of its tasks; no
two tasks sharing a ``<task>/<stage>/`` prefix).

:meth:`TaskSet.on` places a task on a later cluster without checking it again (section 11:
clusters that earlier tasks produce are not checked again; such a cluster may hold instances
of models the task does not list, which it simply cannot reuse).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selector.errors import ProblemError
from selector.problem import OBJECTIVES, Cluster, Problem, parse_problem
from selector.yamlio import load_mapping

_TOP_KEYS = ("cluster", "objective", "tasks")
_REPLICA_ID = re.compile(r"^(?P<prefix>.*/)(?P<n>0|[1-9][0-9]*)$")


@dataclass(frozen=True)
class TaskSet:
    """Section 11's input: ``tasks`` in list order, each validated on the input ``cluster``."""

    cluster: Cluster
    objective: str
    tasks: tuple[Problem, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.task.name for p in self.tasks)

    def on(self, k: int, cluster: Cluster) -> Problem:
        """Task ``k`` on ``cluster`` (a cluster earlier tasks produced), not checked again."""
        p = self.tasks[k]
        return p if cluster is self.cluster else p.model_copy(update={"cluster": cluster})

    def to_dict(self) -> dict[str, Any]:
        tasks = [{k: v for k, v in p.to_dict().items() if k not in ("cluster", "objective")} for p in self.tasks]
        head = {} if self.objective == "gb_s" else {"objective": self.objective}   # gb_s: a plain bundle too
        return {"cluster": self.cluster.model_dump(mode="json"), **head, "tasks": tasks}


def load_task_set(path: str | Path) -> TaskSet:
    """Read and validate a task set from YAML or JSON."""
    return parse_task_set(load_mapping(path))


def parse_task_set(data: Any) -> TaskSet:
    """Validate a mapping ``{cluster, objective?, tasks}`` into a :class:`TaskSet`."""
    if not isinstance(data, dict):
        raise ProblemError("", "a task set must be a mapping with `cluster`, `objective` (optional) and `tasks`")
    for key in data:
        if key not in _TOP_KEYS:
            raise ProblemError(str(key), "unknown field (a task set has `cluster`, `objective` and `tasks`)")
    for key in ("cluster", "tasks"):
        if key not in data:
            raise ProblemError(key, "missing required field")
    objective = data.get("objective", "gb_s")
    if objective not in OBJECTIVES:
        raise ProblemError("objective", f"must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
    tasks = data["tasks"]
    if not isinstance(tasks, list) or not tasks:
        raise ProblemError("tasks", "must be a non-empty list of resolved problems (without `cluster`)")
    from selector.deploy import parse_problem_cluster
    cluster_raw = data["cluster"]
    parse_problem_cluster(cluster_raw)          # cluster errors name `cluster.`, not a task
    problems = tuple(_task(i, t, cluster_raw, objective) for i, t in enumerate(tasks))
    cluster = problems[0].cluster
    _check_names(problems)
    _check_ids(problems, cluster)
    return TaskSet(cluster=cluster, objective=objective, tasks=problems)


def make_task_set(cluster: Cluster, tasks: list[Problem | dict[str, Any]], objective: str = "gb_s") -> TaskSet:
    """A task set from a cluster and tasks (problems or mappings; their own cluster is replaced)."""
    raw = []
    for t in tasks:
        d = t.to_dict() if isinstance(t, Problem) else dict(t)
        raw.append({k: v for k, v in d.items() if k not in ("cluster", "objective")})
    return parse_task_set({"cluster": cluster.model_dump(mode="json"), "objective": objective, "tasks": raw})


def _task(i: int, t: Any, cluster_raw: Any, objective: str) -> Problem:
    where = f"tasks[{i}]"
    if not isinstance(t, dict):
        raise ProblemError(where, "must be a resolved problem (a mapping)")
    for key in ("cluster", "objective"):
        if key in t:
            raise ProblemError(f"{where}.{key}", f"tasks take the set's {key}; remove this field")
    data = {**t, "cluster": cluster_raw}
    if objective != "gb_s":
        data["objective"] = objective
    try:
        return parse_problem(data)
    except ProblemError as exc:
        msg = str(exc).split(": ", 1)[-1] if exc.field else str(exc)
        if exc.field.startswith("cluster") or exc.field == "objective":
            raise ProblemError(exc.field, f"{msg} (checked with {where}, task {t.get('task', {}).get('name')!r})"
                               if isinstance(t.get("task"), dict) else f"{msg} (checked with {where})") from None
        raise ProblemError(f"{where}.{exc.field}" if exc.field else where, msg) from None


def _check_names(problems: tuple[Problem, ...]) -> None:
    from selector.deploy import check_distinct_names
    check_distinct_names([p.task.name for p in problems])


def prefixes(p: Problem) -> dict[str, str]:
    """The ``<task>/<stage>/`` prefixes of a task's new instance ids -> the stage name."""
    return {f"{p.task.name}/{s.name}/": s.name for w in p.workflows for s in w.stages}


def _check_ids(problems: tuple[Problem, ...], cluster: Cluster) -> None:
    owner: dict[str, tuple[int, str]] = {}
    for k, p in enumerate(problems):
        for prefix, stage in prefixes(p).items():
            if prefix in owner and owner[prefix][0] != k:
                j, other = owner[prefix]
                raise ProblemError(f"tasks[{k}]", f"its stage {stage!r} gives new instance ids the prefix "
                                   f"{prefix!r}, as stage {other!r} of tasks[{j}] does")
            owner[prefix] = (k, stage)
    for i, inst in enumerate(cluster.instances):
        m = _REPLICA_ID.match(inst.id)
        if m and m["prefix"] in owner:
            k, stage = owner[m["prefix"]]
            raise ProblemError(f"cluster.instances[{i}].id", f"{inst.id!r} is a new instance id of tasks[{k}] "
                               f"({problems[k].task.name!r}, stage {stage!r}); rename the instance")
