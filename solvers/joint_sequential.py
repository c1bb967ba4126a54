"""``sequential``: section 8's greedy as a joint selector (spec section 11). Each task in list
order is solved by a single-task selector (default ``exhaustive``; any registered one, through
the public registry) on the cluster the earlier tasks left, and deployed when it is solved;
otherwise it is skipped. It is one joint choice, so the joint optimum is never worse.

Status: ``feasible`` (a heuristic's answer) when it serves a task; when it serves none, every
task saw the input cluster, so the set is proved to serve none (``optimal``) exactly when the
single-task selector is exact and proved every task infeasible; else ``unknown``."""
from __future__ import annotations

import time

from selector.joint import TaskSet
from selector.joint_eval import JointPlan, place, run_choice
from solvers.joint_base import JointSelector, finish


class SequentialJoint(JointSelector):
    name = "sequential"

    def __init__(self, *, selector: str = "exhaustive") -> None:
        from solvers.registry import get_solver
        self.selector = selector
        self._inner = get_solver(selector)

    def _select(self, task_set: TaskSet, time_limit_s: float) -> JointPlan:
        t0 = time.perf_counter()
        choice, reasons, proved = [], {}, True
        cluster = task_set.cluster
        n = len(task_set.tasks)
        for k in range(n):
            left = max(1e-3, (t0 + time_limit_s - time.perf_counter()) / (n - k))
            p = task_set.on(k, cluster)
            plan = self._inner.select(p, time_limit_s=left)
            if not plan.solved:
                choice.append(None)
                proved = proved and plan.status == "infeasible" and self._inner.exact
                if plan.status == "infeasible" and self._inner.exact:
                    reasons[k] = plan.reason
                continue
            placed, cluster = place(p, plan, cluster)
            choice.append(placed)
        run = run_choice(task_set, choice)
        assert run.feasible, f"sequential: its own choice failed re-evaluation at task {run.failed}"
        return finish(task_set, run, solver=self.name, t0=t0, proved=proved and run.served == 0,
                      reasons=reasons, extra={"selector": self.selector})
