"""``murakkab``: a fixed workflow; model and config chosen per stage by the spec's objective;
reuse decided offline.

Rules (docs/baselines.md): the developer's workflow (first multi-stage candidate); within it
the exact optimum of the spec (``exhaustive``) on a copy of the problem where each deployed
instance's utilisation is its offline estimate: ``peak`` (default) multiplies it by
``peak_factor`` (2.0), ``average`` keeps it. When no variant of that workflow meets the
SLOs it deploys the cheapest one that meets accuracy, capacity and placement, ignoring the
latency SLO (Murakkab must serve the task); if none, the task is not placed. Under
``sharing: compute`` the offline copy keeps the mode, so its placement is compute-aware with the
offline (peak) utilisations; its spec face is its variant evaluated on the real cluster.
"""
from __future__ import annotations

import time
from dataclasses import replace

from selector.evaluate import evaluate, variant_of
from selector.index import compile_problem
from selector.plan import Plan
from selector.problem import Problem
from solvers.base import Selector
from solvers.baselines.common import compiled_copy, developer_workflow, edited, only_workflow, spec_face


class MurakkabSelector(Selector):
    name = "murakkab"

    def __init__(self, *, reuse_load: str = "peak", peak_factor: float = 2.0) -> None:
        if reuse_load not in ("peak", "average"):
            raise KeyError(f"unknown reuse_load '{reuse_load}'; known: peak, average")
        self.reuse_load, self.peak_factor = reuse_load, peak_factor

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        from solvers.registry import get_solver
        t0 = time.perf_counter()
        cp = compile_problem(problem)
        wi = developer_workflow(problem)
        rule = f"murakkab/{self.reuse_load}"
        factor = self.peak_factor if self.reuse_load == "peak" else 1.0
        offline = _offline(problem, cp, wi, factor)
        exact = get_solver("exhaustive")
        deadline = t0 + time_limit_s           # one limit for both searches, not one each
        plan = exact.select(offline, time_limit_s=max(1e-3, deadline - time.perf_counter()))
        if plan.solved:
            # the face: its variant judged on the real cluster (under compute sharing the offline
            # utilisations steer LeastLoaded, so its GPUs there may differ from the deployment's)
            ev = evaluate(cp, *variant_of(cp, plan))
            return spec_face(cp, ev, solver=self.name, t0=t0, rule=rule, deploy=replace(plan.deployment, rule=rule))
        left = deadline - time.perf_counter()
        if left <= 0:
            return spec_face(cp, None, solver=self.name, t0=t0, rule=rule, deploy=None, why=plan.reason,
                             unplaced_reason=f"time limit {time_limit_s:g} s reached before the search "
                                             "without the latency SLO")
        no_slo = edited(offline, task=offline.task.model_copy(update={"latency_slo_s": 1e12}))
        compiled_copy(cp, no_slo, [wi])
        relaxed = exact.select(no_slo, time_limit_s=max(1e-3, deadline - time.perf_counter()))
        deploy = replace(relaxed.deployment, rule=rule) if relaxed.deployment is not None else None
        return spec_face(cp, None, solver=self.name, t0=t0, rule=rule, deploy=deploy, why=plan.reason,
                         unplaced_reason=relaxed.reason)


def _offline(problem: Problem, cp, wi: int, factor: float) -> Problem:
    """The developer's workflow alone, each instance's utilisation its offline estimate; its
    compiled form is ``cp``'s (the options do not depend on utilisations), so the exact search
    does not compile it again (issue 28: the dump, parse and second compile took 0.3-0.5 s of a
    0.5 s limit on a loaded machine)."""
    one = only_workflow(problem, problem.workflows[wi].name)
    instances = tuple(i.model_copy(update={"utilization": min(1.0, i.utilization * factor)})
                      for i in problem.cluster.instances)
    offline = edited(one, cluster=one.cluster.model_copy(update={"instances": instances}))
    compiled_copy(cp, offline, [wi])
    return offline
