"""``exhaustive``: exact search over every variant, vectorised in numpy chunks.

Options that no feasible variant can use are dropped first (``usable_options``: each implies a
violation whatever the other stages choose, so the search stays exact; ``variant_space`` still
counts them). Each chunk (up to 65,536 variants of one workflow) gets constraints 1-3 and necessary
placement conditions checked as arrays. Survivors are visited in increasing (cost, key)
order and only the few that can still tie the best cost are placed with LeastLoaded
(placements are cached by the variant's demand). Memory stays bounded by the chunk size,
and the time limit is checked between chunks: a search cut short returns its best variant
so far with status ``feasible``, or ``unknown`` when it had found none (spec section 6). The
diagnosis of a proved-infeasible problem gets at most ``DIAGNOSE_GRACE_S`` past the limit.
"""
from __future__ import annotations

import time

from selector.diagnose import empty_space_reason, infeasibility_reason
from selector.evaluate import choose, evaluate, infeasible_plan, to_plan
from selector.index import compile_problem
from selector.plan import Plan
from selector.problem import Problem
from selector.restrict import restrict, unrestrict, usable_options
from selector.search import BestWindow
from selector.space import DEFAULT_CHUNK, chunks
from solvers.base import Selector, unknown_plan

DIAGNOSE_GRACE_S = 0.1   # the reason of a proof may overrun the limit by this much, no more


class ExhaustiveSelector(Selector):
    name = "exhaustive"
    exact = True

    def __init__(self, *, chunk: int = DEFAULT_CHUNK) -> None:
        self.chunk = chunk

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        t0 = time.perf_counter()
        deadline = t0 + time_limit_s
        cp = compile_problem(problem)
        if (reason := empty_space_reason(cp)) is not None:
            return infeasible_plan(cp, solver=self.name, reason=reason, elapsed_s=time.perf_counter() - t0,
                                   evaluated=0)
        search = BestWindow(cp, deadline=deadline)
        complete = True
        allowed = [usable_options(cp, wf) for wf in cp.workflows]
        for wf, keep in zip(cp.workflows, allowed):
            if not all(keep):
                continue
            for ch in chunks(cp, restrict(wf, keep), chunk=self.chunk):
                search.scan(ch)
                if time.perf_counter() > deadline:
                    complete = False
                    break
            if not complete:
                break
        best = choose(search.window)
        if best is None and not complete:
            return unknown_plan(cp, solver=self.name, elapsed_s=time.perf_counter() - t0, evaluated=search.evaluated,
                                reason=f"time limit {time_limit_s:g} s reached before any feasible variant was found "
                                       f"(search incomplete)")
        if best is None:
            reason = infeasibility_reason(cp, deadline=deadline + min(time_limit_s, DIAGNOSE_GRACE_S))
            return infeasible_plan(cp, solver=self.name, reason=reason, elapsed_s=time.perf_counter() - t0,
                                   evaluated=search.evaluated)
        ev = evaluate(cp, best.key[0], unrestrict(best.choice, allowed[best.key[0]]))
        assert ev.feasible, "exhaustive: chosen variant failed re-evaluation"
        return to_plan(cp, ev, status="optimal" if complete else "feasible", solver=self.name,
                       elapsed_s=time.perf_counter() - t0, evaluated=search.evaluated)
