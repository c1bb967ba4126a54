"""The interface of the joint selectors (spec section 11) and what they share: the skip reason
and the answer for a run."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import ClassVar

from selector.joint import TaskSet
from selector.joint_eval import JointPlan, JointRun, joint_plan
from selector.problem import Problem
from solvers.base import check_time_limit

#: time the exact check of a skipped task's reason may take (it names section 6's reason)
REASON_LIMIT_S = 10.0
#: the least time a reason check gets when the time limit has (nearly) run out
MIN_REASON_S = 0.05


class JointSelector(ABC):
    """Chooses a joint choice for a task set (spec section 11). ``select`` never raises on an
    infeasible set: a task no variant of which is feasible is skipped with its reason. It honours
    ``time_limit_s`` (wall seconds, the whole set): an exact selector stopped by it returns its
    best choice so far with status ``feasible`` (``unknown`` when that serves no task)."""

    name: ClassVar[str]
    #: True when the selector returns the unique optimum of section 11 (status ``optimal``)
    exact: ClassVar[bool] = False

    def select(self, task_set: TaskSet, *, time_limit_s: float = 60.0) -> JointPlan:
        return self._select(task_set, check_time_limit(time_limit_s))

    @abstractmethod
    def _select(self, task_set: TaskSet, time_limit_s: float) -> JointPlan:
        """Return the answer for ``task_set`` within ``time_limit_s``."""


def better(a: JointRun, b: JointRun | None) -> bool:
    """``a`` beats ``b`` on section 11's first two criteria (served, then total cost)."""
    if b is None or a.served != b.served:
        return b is None or a.served > b.served
    return a.total_cost < b.total_cost


def exact_reason(problem: Problem, *, time_limit_s: float = REASON_LIMIT_S) -> str | None:
    """Section 6's infeasibility reason of ``problem`` from the exact ``exhaustive`` selector
    (through the public registry), or None when some variant is feasible (or the check ran out
    of time: the task is then reported ``not chosen``)."""
    from solvers.registry import get_solver
    plan = get_solver("exhaustive").select(problem, time_limit_s=time_limit_s)
    return plan.reason if plan.status == "infeasible" else None


def finish(ts: TaskSet, run: JointRun, *, solver: str, t0: float, proved: bool, evaluated: int = 0,
           extra: dict | None = None, reasons: dict[int, str] | None = None,
           end: float | None = None) -> JointPlan:
    """The answer for the feasible ``run``: ``optimal`` when ``proved``, else ``feasible``, or
    ``unknown`` when it serves no task without a proof (section 11). ``reasons``: skip reasons
    already known by task index (an exact single-task answer on the cluster that task saw).
    ``end`` (``time.perf_counter`` seconds): when the whole answer is due; the reason checks
    share what is left of it (at least ``MIN_REASON_S`` each), so the time limit bounds them too."""
    known = dict(reasons or {})
    names = {p.task.name: k for k, p in enumerate(ts.tasks)}

    def why(problem: Problem) -> str | None:
        k = names[problem.task.name]
        if k in known:
            return known[k]
        left = REASON_LIMIT_S if end is None else min(REASON_LIMIT_S, end - time.perf_counter())
        return exact_reason(problem, time_limit_s=max(MIN_REASON_S, left))

    status = "optimal" if proved else ("feasible" if run.served else "unknown")
    return joint_plan(ts, run, status=status, solver=solver, elapsed_s=time.perf_counter() - t0, skip_reason=why,
                      evaluated=evaluated, extra=extra)
