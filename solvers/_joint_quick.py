"""A quick first answer for the joint ``milp`` (``solvers/joint_milp.py``, "Warm start"): the same
CP-SAT model with every task restricted to its workflows of fewest stages.

Section 8's greedy answer is often far from the joint optimum (an early task picks the variant
cheapest for itself, not the one a later task could reuse), and CP-SAT, hinted with it, spends
most of its time finding better choices rather than proving them. Restricted to the shortest
workflows (for the seven tasks: one stage each), the model is a fraction of the size (no products,
few reuse options) and CP-SAT solves it in a few hundredths of deterministic seconds; its answer,
evaluated exactly, is the incumbent and hint of the full solve, which then mostly proves.

It is a heuristic: it never replaces a proof. Its solution is a relaxed choice of the full model,
so only an exactly feasible answer that beats the incumbent is kept (``selector.joint_eval``).
"""
from __future__ import annotations

from selector.joint import TaskSet
from selector.joint_eval import JointRun, Memo, run_choice
from solvers._joint_model import Cut, JointModel

#: share of the time left that the quick solve may take
QUICK_SHARE = 0.25


def shortest_workflows(model: JointModel, *, cuts: list[Cut], served: int, incumbent: JointRun,
                       deadline: float) -> tuple | None:
    """The least-cost relaxed choice serving ``served`` tasks with each task on its workflows of
    fewest stages (capped at the incumbent's cost when it serves as many), or None."""
    from ortools.sat.python import cp_model
    m = model.m.clone()
    model._add_cuts(m, cuts)
    m.add(sum(model.var["z", k] for k in range(model.n)) == model.n - served)
    live = [key for key in model.var if key[0] == "x"]
    for k in range(model.n):
        mine = [key for key in live if key[1] == k]
        fewest = min((model.data.stages(k, key[2]) for key in mine), default=0)
        for key in mine:
            if model.data.stages(k, key[2]) > fewest:
                m.add(model.var[key] == 0)
    if incumbent.served == served:
        m.add(sum(model.cost) <= model._units(incumbent.total_cost))
        model._hint(m, incumbent)
    m.minimize(sum(model.cost))
    solver = model._solver(deadline, 1)
    if solver.solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return model._read(solver.boolean_value)[0]


def quick_incumbent(ts: TaskSet, model: JointModel, *, cuts: list[Cut], served: int, incumbent: JointRun,
                    deadline: float, memo: Memo) -> JointRun:
    """The better of ``incumbent`` and the exact run of :func:`shortest_workflows`' answer."""
    import time
    stop = time.perf_counter() + QUICK_SHARE * max(0.0, deadline - time.perf_counter())
    choice = shortest_workflows(model, cuts=cuts, served=served, incumbent=incumbent, deadline=stop)
    if choice is None:
        return incumbent
    run = run_choice(ts, choice, memo)
    from solvers.joint_base import better
    return run if run.feasible and better(run, incumbent) else incumbent
