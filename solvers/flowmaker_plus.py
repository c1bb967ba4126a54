"""``flowmaker-plus``: a stronger heuristic than the paper's (``flowmaker`` stays the reference).

FlowMaker's misses come from its parameter budget (step 2 prunes cheap assignments of larger
models with better configs) and its early stop (step 3). This heuristic keeps the idea of
searching a pruned space exactly, but prunes by what the objective rewards instead:

1. Per stage, drop options that can never be feasible (accuracy below the SLO, one stage
   alone over the latency SLO, a reused instance overloaded by one stage, more GPU slots than
   the cluster, a shard larger than the freest GPU).
2. Per stage, keep the first Pareto layers of the remaining options in (stage latency, new
   memory): cost ``M * L`` is monotone in both, so a variant using a dominated option is
   usually beaten by one using its dominator. Under ``objective: usd_per_hour`` (spec section
   10) the layers are in (stage latency, stage ``U``): ``U`` is what is minimised and latency what
   breaks its ties. Layers are added while the workflow's restricted
   space stays within ``max_space`` variants (at least the first layer is kept).
3. Search each restricted space exactly (vectorised chunks, LeastLoaded, section-5 ties) and
   take the best over workflows.
4. Local search: from that variant, try every option of every stage of its workflow one stage
   at a time (full option lists), moving to any better variant (section-5 order), until no
   single change improves or the time limit is reached.

Status ``feasible``: fast and usually optimal, never a proof. Nothing found in the pruned
space is ``infeasible`` (its own rule found nothing); nothing found when the time limit cut
the search short is ``unknown`` (spec section 6).
"""
from __future__ import annotations

import math
import time

from selector.evaluate import Evaluation, choose, evaluate, infeasible_plan, to_plan
from selector.index import Compiled, WorkflowOptions, compile_problem
from selector.plan import Plan
from selector.problem import Problem
from selector.restrict import restrict, unrestrict, usable_options
from selector.search import BestWindow
from selector.space import chunks
from solvers.base import Selector, unknown_plan


class FlowMakerPlusSelector(Selector):
    name = "flowmaker-plus"

    def __init__(self, *, max_space: int = 100_000) -> None:
        self.max_space = max_space

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        t0 = time.perf_counter()
        deadline = t0 + time_limit_s
        cp = compile_problem(problem)
        found, evaluated, cut = [], 0, False
        for wf in cp.workflows:
            if time.perf_counter() > deadline:
                cut = True
                break
            allowed = _restricted(cp, wf, self.max_space)
            if allowed is None:
                continue
            window = BestWindow(cp, deadline=deadline)
            for ch in chunks(cp, restrict(wf, allowed)):
                window.scan(ch)
                if time.perf_counter() > deadline:
                    cut = True
                    break
            evaluated += window.evaluated
            best = choose(window.window)
            if best is not None:
                found.append(evaluate(cp, wf.index, unrestrict(best.choice, allowed)))
            if cut:
                break
        best = choose(found)
        if best is None and cut:
            return unknown_plan(cp, solver=self.name, elapsed_s=time.perf_counter() - t0, evaluated=evaluated,
                                reason=f"time limit {time_limit_s:g} s reached before a feasible variant was "
                                       f"found (search incomplete)")
        if best is None:
            return infeasible_plan(cp, solver=self.name, elapsed_s=time.perf_counter() - t0, evaluated=evaluated,
                                   reason="flowmaker-plus: no feasible variant in the pruned space (heuristic; "
                                          "an exact solver may still find one)")
        best, n = _local_search(cp, best, deadline)
        return to_plan(cp, best, status="feasible", solver=self.name, elapsed_s=time.perf_counter() - t0,
                       evaluated=evaluated + n)


def _layers(points: list[tuple[float, float, int]]) -> list[list[int]]:
    """Pareto layers (minimising both coordinates) of ``(a, b, index)`` points."""
    rest = sorted(points)
    layers = []
    while rest:
        layer, later, best_b = [], [], math.inf
        for a, b, i in rest:
            if b < best_b:
                layer.append(i)
                best_b = b
            else:
                later.append((a, b, i))
        layers.append(layer)
        rest = later
    return layers


def _restricted(cp: Compiled, wf: WorkflowOptions, max_space: int) -> list[list[int]] | None:
    usable = usable_options(cp, wf)
    if not all(usable):
        return None
    layers = []
    for st, opts in zip(wf.stages, usable):
        a = st.arrays
        second = a["usd"] if cp.usd else a["mem"]
        layers.append(_layers([(float(a["lat"][i]), float(second[i]), i) for i in opts]))
    depth = [1] * len(layers)
    allowed = [sorted(L[0]) for L in layers]
    grew = True
    while grew:      # add one layer to each stage in turn while the space fits
        grew = False
        for s, L in enumerate(layers):
            if depth[s] >= len(L):
                continue
            trial = allowed[:s] + [sorted(allowed[s] + L[depth[s]])] + allowed[s + 1:]
            if math.prod(len(x) for x in trial) <= max_space:
                allowed, depth[s], grew = trial, depth[s] + 1, True
    return allowed


def _local_search(cp: Compiled, start: Evaluation, deadline: float) -> tuple[Evaluation, int]:
    best, n = start, 0
    stages = cp.workflows[start.workflow].stages
    improved = True
    while improved and time.perf_counter() <= deadline:
        improved = False
        for s, st in enumerate(stages):
            for o in range(len(st.options)):
                if o == best.choice[s]:
                    continue
                if time.perf_counter() > deadline:    # a pass over every option can take longer than the limit
                    return best, n
                choice = best.choice[:s] + (o,) + best.choice[s + 1:]
                ev = evaluate(cp, best.workflow, choice)
                n += 1
                if ev.feasible and choose([best, ev]) is ev:
                    best, improved = ev, True
    return best, n
