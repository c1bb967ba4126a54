"""``flowmaker``: the paper's three-stage pruning heuristic (spec section 7), as the reference.

1. Accuracy filter: keep models with ``accuracy >= accuracy_slo``.
2. Parameter budget: ``B_w`` = sum over stages of the smallest ``active_params_b`` among kept
   models with a perf row for that stage. Per-stage assignments (a kept model deployed new,
   or a reusable instance of a kept model) whose reuse-aware size (new stages' parameters;
   reused stages count 0) is at most ``B_w`` are kept. They are generated lazily in
   increasing (size, key) order by a best-first walk over the per-stage choice lists, so the
   deadline is checked between assignments and memory grows only with the assignments tried
   (a cluster of 12 reusable instances gives 12^6 size-0 assignments to a 6-stage workflow).
3. In increasing reuse-aware size (ties: assignment key order), enumerate the configs of
   the assignment's new stages, drop latency and capacity violations, place with
   LeastLoaded, keep the cheapest (section-5 tie-breaks). A workflow's first assignment
   with a feasible config ends its search; the best over workflows is returned.

Not guaranteed optimal: step 2 can prune the optimum and step 3 stops early.
"""
from __future__ import annotations

import heapq
import time
from collections.abc import Iterator

from selector.evaluate import choose, evaluate, infeasible_plan, to_plan
from selector.index import NEW, REUSE, Compiled, WorkflowOptions, compile_problem
from selector.plan import Plan
from selector.problem import Problem, TOL
from selector.restrict import restrict, unrestrict
from selector.search import BestWindow, Candidate
from selector.space import chunks
from solvers.base import Selector, unknown_plan

Assignment = tuple[tuple[int, int], ...]   # per stage: (REUSE, instance) or (NEW, model)


class FlowMakerSelector(Selector):
    name = "flowmaker"

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        t0 = time.perf_counter()
        deadline = t0 + time_limit_s
        cp = compile_problem(problem)
        slo = problem.task.accuracy_slo
        kept = {i for i, m in enumerate(problem.models) if m.accuracy >= slo - TOL}
        best: list[Candidate] = []
        evaluated, timed_out = 0, False
        for wf in cp.workflows:
            found, n, timed_out = _search_workflow(cp, wf, kept, deadline)
            evaluated += n
            if found is not None:
                best.append(found)
            if timed_out:
                break
        winner = choose(best)
        elapsed = time.perf_counter() - t0
        if winner is None and timed_out:
            return unknown_plan(cp, solver=self.name, elapsed_s=elapsed, evaluated=evaluated,
                                reason=f"time limit {time_limit_s:g} s reached before a feasible variant was found "
                                       f"(search incomplete)")
        if winner is None:
            return infeasible_plan(cp, solver=self.name, reason=_reason(problem, kept), elapsed_s=elapsed,
                                   evaluated=evaluated)
        ev = evaluate(cp, winner.key[0], winner.choice)
        return to_plan(cp, ev, status="feasible", solver=self.name, elapsed_s=time.perf_counter() - t0,
                       evaluated=evaluated)


def _reason(problem: Problem, kept: set[int]) -> str:
    if not kept:
        best = max((m.accuracy for m in problem.models), default=float("nan"))
        return f"accuracy: no model reaches accuracy_slo {problem.task.accuracy_slo} (best {best})"
    return ("flowmaker: no assignment within the parameter budget has a config meeting latency, "
            "capacity and placement (heuristic; an exact solver may still find a variant)")


def _search_workflow(cp: Compiled, wf: WorkflowOptions, kept: set[int],
                     deadline: float) -> tuple[Candidate | None, int, bool]:
    """The workflow's first assignment with a feasible config, the variants evaluated, and
    whether the deadline stopped the search."""
    evaluated = 0
    by_choice = [_options_by_choice(st) for st in wf.stages]
    for assignment in _assignments(cp, wf, kept):
        if time.perf_counter() > deadline:
            return None, evaluated, True
        allowed = [idx[a] for idx, a in zip(by_choice, assignment)]
        window = BestWindow(cp, deadline=deadline)
        for ch in chunks(cp, restrict(wf, allowed)):
            window.scan(ch)
            if time.perf_counter() > deadline:   # best so far in this assignment (still feasible)
                break
        evaluated += window.evaluated
        best = choose(window.window)
        if best is not None:
            return best._replace(choice=unrestrict(best.choice, allowed)), evaluated, False
        if time.perf_counter() > deadline:
            return None, evaluated, True
    return None, evaluated, False


def _options_by_choice(st) -> dict[tuple[int, int], list[int]]:
    """Option indices of one stage per assignment choice ``(REUSE, instance)`` / ``(NEW, model)``."""
    out: dict[tuple[int, int], list[int]] = {}
    for i, o in enumerate(st.options):
        out.setdefault((REUSE, o.instance) if o.kind == REUSE else (NEW, o.model), []).append(i)
    return out


def _assignments(cp: Compiled, wf: WorkflowOptions, kept: set[int]) -> Iterator[Assignment]:
    """Kept per-stage assignments in increasing (reuse-aware size, key) order, lazily.

    Best-first over index vectors into per-stage lists sorted by (size, choice): a vector's
    successors raise one index at or after the position its parent raised last, so every
    vector is reached once and never before its parent, which is never larger; the heap holds
    at most ``stages`` entries per assignment yielded.
    """
    problem = cp.problem
    per_stage: list[list[tuple[float, tuple[int, int]]]] = []
    budget = 0.0
    for st in wf.stages:
        with_row = {o.model for o in st.options if o.model in kept}   # kept models with a perf row here
        if not with_row:
            return
        budget += min(problem.models[m].active_params_b for m in with_row)
        choices = {(REUSE, o.instance): 0.0 for o in st.options if o.kind == REUSE and o.model in kept}
        choices.update({(NEW, o.model): problem.models[o.model].active_params_b
                        for o in st.options if o.kind == NEW and o.model in kept})
        per_stage.append(sorted((size, a) for a, size in choices.items()))
    limit = budget + TOL * max(1.0, budget)

    def entry(idx: tuple[int, ...], last: int) -> tuple[float, Assignment, tuple[int, ...], int]:
        size = 0.0
        for s, k in enumerate(idx):      # stage order, as the sum was always taken
            size += per_stage[s][k][0]
        return size, tuple(per_stage[s][k][1] for s, k in enumerate(idx)), idx, last

    root = entry(tuple(0 for _ in per_stage), 0)
    heap = [root] if root[0] <= limit else []
    while heap:
        _, assignment, idx, last = heapq.heappop(heap)
        yield assignment
        for j in range(last, len(idx)):
            if idx[j] + 1 < len(per_stage[j]):
                child = entry(idx[:j] + (idx[j] + 1,) + idx[j + 1:], j)
                if child[0] <= limit:    # a larger child's own children are larger still
                    heapq.heappush(heap, child)
