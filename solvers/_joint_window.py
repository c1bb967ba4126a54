"""The tie window of the joint ``milp`` (``solvers/joint_milp.py``, "Ties"): every relaxed choice
that serves as many tasks as the best exact answer at a total within its 1e-9 window (plus the
rounding), and, under exact dollars, the least total latency among them first."""
from __future__ import annotations

import math
import time

from selector.problem import TOL
from solvers._joint_model import Answer, Cut, JointModel


def _window_model(model: JointModel, cuts: list[Cut], served: int, cost: float):
    m = model.m.clone()
    model._add_cuts(m, cuts)
    m.add(sum(model.var["z", k] for k in range(model.n)) == model.n - served)
    m.add(sum(model.cost) <= model._units(cost + TOL * max(1.0, cost)))
    return m


def least_latency(model: JointModel, *, cuts: list[Cut], served: int, cost: float, deadline: float) -> Answer:
    """The least total latency (units) among relaxed choices of the cost window."""
    from ortools.sat.python import cp_model
    m = _window_model(model, cuts, served, cost)
    m.minimize(sum(ints[0] for ints in model.ints.values()))
    solver = model._solver(deadline, model.workers)
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Answer("infeasible" if status == cp_model.INFEASIBLE else "unknown")
    choice, literals = model._read(solver.boolean_value)
    model.last_choice, model._last_literals = list(choice), literals
    return Answer("optimal" if status == cp_model.OPTIMAL else "feasible", choice, literals)


def enumerate_window(model: JointModel, *, cuts: list[Cut], served: int, cost: float, deadline: float,
                     limit: int, latency: float | None = None) -> tuple[list[tuple], bool]:
    """Every relaxed choice of the cost window (and, given ``latency``, of total latency at
    most ``latency + 1e-9 max(1, latency)`` plus the rounding)."""
    from ortools.sat.python import cp_model
    m = _window_model(model, cuts, served, cost)
    if latency is not None:
        cap = math.floor((latency + TOL * max(1.0, latency)) * model.ls + model.n * model.slack)
        m.add(sum(ints[0] for ints in model.ints.values()) <= cap)
    found: list[tuple] = []
    seen = [0]
    window = cost + TOL * max(1.0, cost)
    limit_cost = window + 1e-9 * max(1.0, window)      # float sums in another order: kept, then evaluated

    class Collect(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            choice, literals = model._read(self.boolean_value)
            if model.exact_cost(literals) <= limit_cost:      # the others cannot tie (rounding only)
                found.append(choice)
            seen[0] += 1
            if time.perf_counter() > deadline or seen[0] >= limit:
                model.stop_search()

    solver = model._solver(deadline, 1)
    solver.parameters.enumerate_all_solutions = True
    status = solver.solve(m, Collect())
    complete = (status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and seen[0] < limit
                and time.perf_counter() <= deadline)
    return sorted(set(found), key=repr), complete
