"""``flowmaker-noreuse``: the ``flowmaker`` heuristic on the problem without reusable instances
(every stage deploys new replicas; GPU memory already used stays used). Its deployment is
flowmaker's on that problem; applied to the real cluster, the deployed instances stay and
carry on (they are simply not reused).

Under ``sharing: compute`` the deployed instances also keep working on their GPUs (spec
section 9's ``busy_g``), so they are kept on the copy as instances of a stand-in model that has
no perf rows: nothing can reuse them, and their utilisation still counts. In memory mode the
copy simply has no instances, as before (the two copies give the same answer there)."""
from __future__ import annotations

import time
from dataclasses import replace

from selector.plan import Plan
from selector.problem import Problem, parse_problem
from solvers.base import Selector
from solvers.baselines.common import compile_problem


def without_reuse(problem: Problem) -> Problem:
    """``problem`` with no reuse options (module docstring)."""
    d = problem.to_dict()
    if not problem.cluster.compute:
        d["cluster"]["instances"] = []
        return parse_problem(d)
    names = {m["name"] for m in d["models"]}
    stand_in = next(f"(deployed{k or ''})" for k in range(len(names) + 1) if f"(deployed{k or ''})" not in names)
    d["models"].append({"name": stand_in, "accuracy": 0.0, "active_params_b": 1.0})
    for inst in d["cluster"]["instances"]:
        inst["model"] = stand_in
    return parse_problem(d)


class FlowMakerNoReuseSelector(Selector):
    name = "flowmaker-noreuse"

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        from solvers.registry import get_solver
        t0 = time.perf_counter()
        space = compile_problem(problem).variant_space   # first: its time comes out of the limit (issue 28)
        left = max(1e-3, time_limit_s - (time.perf_counter() - t0))
        plan = get_solver("flowmaker").select(without_reuse(problem), time_limit_s=left)
        dep = None if plan.deployment is None else replace(plan.deployment, rule=self.name)
        if plan.status == "unknown":
            plan = replace(plan, reason=f"time limit {time_limit_s:g} s reached before a feasible variant was found "
                                        f"(search incomplete)")
        return replace(plan, solver=self.name, variant_space=space, elapsed_s=time.perf_counter() - t0, deployment=dep)
