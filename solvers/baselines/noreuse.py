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

from selector.index import compile_problem
from selector.plan import Plan
from selector.problem import Model, Problem
from solvers.base import Selector
from solvers.baselines.common import compiled_copy, edited


def without_reuse(problem: Problem) -> Problem:
    """``problem`` with no reuse options (module docstring); a copy of the validated problem, not
    a dump parsed again (issue 28: the round trip took 0.15-0.3 s of a 0.5 s limit)."""
    cluster = problem.cluster
    if not cluster.compute:
        return edited(problem, cluster=cluster.model_copy(update={"instances": ()}))
    names = {m.name for m in problem.models}
    stand_in = next(f"(deployed{k or ''})" for k in range(len(names) + 1) if f"(deployed{k or ''})" not in names)
    instances = tuple(i.model_copy(update={"model": stand_in}) for i in cluster.instances)
    return edited(problem, models=problem.models + (Model(name=stand_in, accuracy=0.0, active_params_b=1.0),),
                  cluster=cluster.model_copy(update={"instances": instances}))


class FlowMakerNoReuseSelector(Selector):
    name = "flowmaker-noreuse"

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        from solvers.registry import get_solver
        t0 = time.perf_counter()
        cp = compile_problem(problem)      # first: its time comes out of the limit (issue 28)
        copy = without_reuse(problem)
        compiled_copy(cp, copy, range(len(cp.workflows)), reuse=False)   # flowmaker does not compile it again
        left = max(1e-3, time_limit_s - (time.perf_counter() - t0))
        plan = get_solver("flowmaker").select(copy, time_limit_s=left)
        dep = None if plan.deployment is None else replace(plan.deployment, rule=self.name)
        if plan.status == "unknown":
            plan = replace(plan, reason=f"time limit {time_limit_s:g} s reached before a feasible variant was found "
                                        f"(search incomplete)")
        return replace(plan, solver=self.name, variant_space=cp.variant_space, elapsed_s=time.perf_counter() - t0,
                       deployment=dep)
