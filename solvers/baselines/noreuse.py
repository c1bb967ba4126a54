"""``flowmaker-noreuse``: the ``flowmaker`` heuristic on the problem without deployed instances
(every stage deploys new replicas; GPU memory already used stays used). Its deployment is
flowmaker's on that problem; applied to the real cluster, the deployed instances stay and
carry on (they are simply not reused)."""
from __future__ import annotations

import time
from dataclasses import replace

from selector.plan import Plan
from selector.problem import Problem, parse_problem
from solvers.base import Selector
from solvers.baselines.common import compile_problem


class FlowMakerNoReuseSelector(Selector):
    name = "flowmaker-noreuse"

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        from solvers.registry import get_solver
        t0 = time.perf_counter()
        d = problem.to_dict()
        d["cluster"]["instances"] = []
        plan = get_solver("flowmaker").select(parse_problem(d), time_limit_s=time_limit_s)
        dep = None if plan.deployment is None else replace(plan.deployment, rule=self.name)
        return replace(plan, solver=self.name, variant_space=compile_problem(problem).variant_space,
                       elapsed_s=time.perf_counter() - t0, deployment=dep)
