"""One CP-SAT solver set-up for the exact solvers (single-task ``milp`` and the joint ``milp``)."""
from __future__ import annotations

import time


def cp_solver(deadline: float, workers: int, seed: int, *, probing_level: int | None = None):
    """A ``CpSolver`` that stops at ``deadline`` (``time.perf_counter`` seconds). CP-SAT's own
    SIGINT handler resets SIGINT to the default action when the solver is destroyed, after which
    Ctrl-C kills the process without running ``finally`` blocks: it is switched off."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(1e-3, deadline - time.perf_counter())
    solver.parameters.catch_sigint_signal = False
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    if probing_level is not None:
        solver.parameters.cp_model_probing_level = probing_level
    return solver
