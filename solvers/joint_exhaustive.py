"""``exhaustive``: exact joint search for small task sets (spec section 11), a depth-first
branch and bound over the product of the tasks' variant spaces.

At task ``k``, with the cluster tasks ``1..k-1`` left, every variant of task ``k`` is checked
(constraints 1-3 and necessary placement conditions as numpy chunks, ``selector.space``; the
survivors evaluated exactly with LeastLoaded, ``selector.evaluate``); each feasible one, cheapest
first, and then ``skip`` are tried in turn. A branch is pruned when even serving every later task
at cost 0 cannot reach the best served count, or tie the best total cost within ``1e-9``. Every
complete choice that ties the best (served, cost) is kept, and ``selector.joint_eval.choose_joint``
picks the unique optimum among them (latency, GPUs, key). Options no feasible variant can use on
the input cluster are dropped first (``selector.restrict.usable_options``: later clusters are
only fuller, so they stay unusable). The time limit is checked at every node."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from selector.evaluate import Evaluation, evaluate
from selector.index import Compiled, compile_problem
from selector.joint import TaskSet
from selector.joint_eval import JointPlan, apply, choice_of, choose_joint, run_choice, task_cost
from selector.problem import TOL, Cluster
from selector.restrict import restrict, unrestrict, usable_options
from selector.space import chunks
from solvers.joint_base import JointSelector, finish


def feasible_variants(cp: Compiled, objective: str) -> list[Evaluation]:
    """Every feasible variant of ``cp``, sorted by (cost, latency, GPUs, key)."""
    task = cp.problem.task
    out = []
    for wf in cp.workflows:
        keep = usable_options(cp, wf)
        if not all(keep):
            continue
        for ch in chunks(cp, restrict(wf, keep)):
            ok = ((ch.acc >= task.accuracy_slo - TOL) & (ch.lat <= task.latency_slo_s + TOL)
                  & (ch.max_util <= 1.0 + TOL) & ch.fits_hint)
            for row in np.flatnonzero(ok):
                ev = evaluate(cp, wf.index, unrestrict(tuple(int(x) for x in ch.choice[row]), keep))
                if ev.feasible:
                    out.append(ev)
    return sorted(out, key=lambda e: (task_cost(e, objective), e.latency_s, e.new_gpus, e.key))


@dataclass
class _Search:
    ts: TaskSet
    deadline: float
    best_served: int = -1
    best_cost: float = float("inf")
    nodes: int = 0
    complete: bool = True

    def __post_init__(self) -> None:
        self.leaves: list[tuple[int, float, tuple]] = []

    def window(self, served_ub: int, cost: float) -> bool:
        """Can a branch with this bound still tie or beat the best?"""
        if served_ub != self.best_served:
            return served_ub > self.best_served
        return cost <= self.best_cost + TOL * max(1.0, self.best_cost)

    def leaf(self, served: int, cost: float, choice: tuple) -> None:
        if served > self.best_served or (served == self.best_served and cost < self.best_cost):
            self.best_served, self.best_cost = served, cost
            lim = cost + TOL * max(1.0, cost)
            self.leaves = [x for x in self.leaves if x[0] == served and x[1] <= lim]
        if self.window(served, cost):
            self.leaves.append((served, cost, choice))

    def dfs(self, k: int, cluster: Cluster, served: int, cost: float, prefix: tuple) -> None:
        n = len(self.ts.tasks)
        if k == n:
            self.leaf(served, cost, prefix)
            return
        if time.perf_counter() > self.deadline:
            self.complete = False
            return
        self.nodes += 1
        cp = compile_problem(self.ts.on(k, cluster))
        for ev in feasible_variants(cp, self.ts.objective):
            c = cost + task_cost(ev, self.ts.objective)
            if not self.window(served + (n - k), c):
                break
            self.dfs(k + 1, apply(cp, ev, cluster), served + 1, c, prefix + (choice_of(cp, ev),))
            if not self.complete:
                return
        if self.window(served + (n - k) - 1, cost):
            self.dfs(k + 1, cluster, served, cost, prefix + (None,))


class ExhaustiveJoint(JointSelector):
    name = "exhaustive"
    exact = True

    def _select(self, task_set: TaskSet, time_limit_s: float) -> JointPlan:
        t0 = time.perf_counter()
        search = _Search(task_set, t0 + time_limit_s)
        search.dfs(0, task_set.cluster, 0, 0.0, ())
        memo: dict = {}
        runs = [run_choice(task_set, choice, memo) for _, _, choice in search.leaves]
        best = choose_joint(runs)
        if best is None:     # stopped before the first leaf
            best = run_choice(task_set, [None] * len(task_set.tasks))
        assert best.feasible
        return finish(task_set, best, solver=self.name, t0=t0, proved=search.complete, evaluated=search.nodes,
                      extra={"nodes": search.nodes})
