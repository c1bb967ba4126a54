"""``local``: a local search for a task set (spec section 11) from section 8's greedy answer; a
heuristic (status ``feasible``), of our own design (issue 29's optional fourth solver).

Section 8's greedy loses where an earlier task's cheapest variant deploys instances no later task
can reuse, while a slightly dearer one would have served a later task for free. The search
tries exactly that move. Start: the ``sequential`` answer (``exhaustive`` per task). A move at
task ``k``: keep tasks ``1..k-1`` as they are, give task ``k`` another of its feasible variants on
the cluster it sees (or ``skip``), and re-solve tasks ``k+1..n`` greedily (section 8, each at its
own optimum) on the clusters that follow. Task ``k``'s candidates: its feasible variants grouped by
what they create (the multiset of (model, TP, PP, GPU type) of their new stages; reuse-only
variants form one group), the cheapest of each group, the ``width`` cheapest groups. A pass tries
the tasks in list order and takes the best improving move (most served, then least total cost)
of the first task that has one; passes repeat until none improves or the time limit comes.

Every answer is one joint choice re-evaluated by section 8 (``selector.joint_eval.run_choice``),
so it is never worse than the greedy start; it is not proved optimal (``feasible``), except that
the start's proof that no task can be served (``optimal``) carries over: no move can serve one.
"""
from __future__ import annotations

import time

from selector.index import NEW, compile_problem
from selector.joint import TaskSet
from selector.joint_eval import JointPlan, JointRun, choice_from_plan, choice_of, place, run_choice
from selector.problem import Cluster
from solvers.joint_base import JointSelector, better, finish


class LocalJoint(JointSelector):
    name = "local"

    def __init__(self, *, width: int = 6) -> None:
        from solvers.registry import get_solver
        self.width = width
        self._inner = get_solver("exhaustive")

    def _select(self, task_set: TaskSet, time_limit_s: float) -> JointPlan:
        from solvers.joint_registry import get_joint_solver
        t0 = time.perf_counter()
        end = t0 + time_limit_s
        deadline = end - min(0.1 * time_limit_s, 0.2 + 0.03 * len(task_set.tasks))
        start = get_joint_solver("sequential").select(task_set, time_limit_s=0.3 * time_limit_s)
        best = run_choice(task_set, choice_from_plan(task_set, start))
        if start.status == "optimal":          # no task can be served at all
            return finish(task_set, best, solver=self.name, t0=t0, proved=True, end=end)
        moves = passes = 0
        while time.perf_counter() < deadline:
            passes += 1
            found = self._pass(task_set, best, deadline)
            if found is None:
                break
            best, moves = found, moves + 1
        return finish(task_set, best, solver=self.name, t0=t0, proved=False, end=end,
                      extra={"passes": passes, "moves": moves})

    def _pass(self, ts: TaskSet, best: JointRun, deadline: float) -> JointRun | None:
        """The best improving move at the first task (in list order) that has one, or None."""
        for k in range(len(ts.tasks)):
            prefix = list(best.choice[:k])
            cluster = run_choice(ts, prefix + [None] * (len(ts.tasks) - k)).cluster
            top = None
            for cand in self._candidates(ts, k, cluster, best.choice[k]):
                if time.perf_counter() > deadline:
                    return top
                run = self._complete(ts, prefix + [cand], deadline)
                if run is not None and better(run, top or best):
                    top = run
            if top is not None:
                return top
        return None

    def _candidates(self, ts: TaskSet, k: int, cluster: Cluster, current) -> list:
        from solvers.joint_exhaustive import feasible_variants
        cp = compile_problem(ts.on(k, cluster))
        groups: dict[tuple, object] = {}
        for ev in feasible_variants(cp, ts.objective):          # cheapest first
            made = tuple(sorted((o.model, o.tp, o.pp, o.gpu_type) for o in ev.options if o.kind == NEW))
            groups.setdefault(made, ev)
        out = [choice_of(cp, ev) for ev in list(groups.values())[: self.width]]
        return [c for c in out + [None] if c != current]

    def _complete(self, ts: TaskSet, prefix: list, deadline: float) -> JointRun | None:
        """``prefix`` and then section 8's greedy for the tasks after it (None: out of time)."""
        choice = list(prefix)
        cluster = run_choice(ts, choice + [None] * (len(ts.tasks) - len(choice))).cluster
        for k in range(len(prefix), len(ts.tasks)):
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            p = ts.on(k, cluster)
            plan = self._inner.select(p, time_limit_s=left)
            if not plan.solved:
                choice.append(None)
                continue
            placed, cluster = place(p, plan, cluster)
            choice.append(placed)
        run = run_choice(ts, choice)
        return run if run.feasible else None

