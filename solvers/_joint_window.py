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
    window = cost + TOL * max(1.0, cost)
    limit_cost = window + 1e-9 * max(1.0, window)      # float sums in another order: kept, then evaluated
    cap = None
    if latency is not None:
        cap = math.floor((latency + TOL * max(1.0, latency)) * model.ls + model.n * model.slack)
        # exact dollars: the window holds few choices, found one least-latency solve each
        few = _one_by_one(model, _window_model(model, cuts, served, cost), cap, deadline, min(limit, FEW))
        if few is not None:
            found_few, complete = few
            return sorted({c for c, lits in found_few if model.exact_cost(lits) <= limit_cost}, key=repr), complete
    m = _window_model(model, cuts, served, cost)
    if cap is not None:
        m.add(sum(ints[0] for ints in model.ints.values()) <= cap)
    found: list[tuple] = []
    seen = [0]

    class Collect(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            choice, literals = model._read(self.boolean_value)
            if model.exact_cost(literals) <= limit_cost:      # the others cannot tie (rounding only)
                found.append(choice)
            seen[0] += 1
            if time.perf_counter() > deadline or seen[0] >= limit:
                self.stop_search()

    solver = model._solver(deadline, 1)
    solver.parameters.enumerate_all_solutions = True
    status = solver.solve(m, Collect())
    complete = (status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and seen[0] < limit
                and time.perf_counter() <= deadline)
    return sorted(set(found), key=repr), complete


#: under exact dollars, up to this many window members are found one solve each; beyond, the
#: enumeration takes over
FEW = 4


def _one_by_one(model: JointModel, m, cap: int, deadline: float, most: int) -> tuple[list, bool] | None:
    """Every relaxed choice of the cost window ``m`` with total latency at most ``cap`` (units):
    repeatedly the least latency with a no-good on each member found, until that least exceeds
    ``cap`` (a proved bound: CP-SAT is much faster at it than at enumerating the slice).
    ``(choices and literals, complete)``, or None after ``most`` members."""
    from ortools.sat.python import cp_model
    found: list = []
    m.minimize(sum(ints[0] for ints in model.ints.values()))
    while len(found) < most:
        solver = model._solver(deadline, 1)
        status = solver.solve(m)
        if status == cp_model.INFEASIBLE:
            return found, True
        if status == cp_model.FEASIBLE and solver.best_objective_bound > cap:
            return found, True
        if status != cp_model.OPTIMAL:
            return found, False
        if solver.objective_value > cap:
            return found, True
        choice, literals = model._read(solver.boolean_value)
        found.append((choice, literals))
        keys = [key for lits in literals for key in lits]
        m.add(sum(model.var[key] for key in keys) <= len(keys) - 1)
    return None
