"""The exactness driver shared by the two mathematical-programming selectors.

A backend (``milp`` on CP-SAT, ``milp-pulp`` on HiGHS) answers two questions about the
*relaxed* problem R, restricted to a set of workflows: constraints 1-3 of spec section 4
(with float data rounded or toleranced, always so that R contains every truly feasible
variant), necessary placement conditions (section 9's too under ``sharing: compute``), and
the cuts collected so far:

* ``minimise(objective, workflows, bound, ...)``: a variant of R minimising cost ``M*L`` (or
  latency ``L``); ``bound`` is a proved lower bound on the cost there (the backend may use it);
* ``enumerate(objective, cap, workflows, bounds, ...)``: every variant of R whose objective is at
  most ``cap`` (a superset: the backend widens ``cap`` by its own rounding error); ``bounds``:
  per workflow, a proved lower bound on the cost of its variants.

The driver turns these into the spec's unique optimum:

0. **Incumbent and workflow bounds.** A warm start (a variant from a heuristic) is evaluated
   exactly and, when feasible, is the first incumbent. Each workflow gets a lower bound on the
   cost of its variants (:func:`lower_bound`: the exact minimum of ``M*L`` over its variants
   meeting constraints 1-2, by a Pareto sweep over its stages, pruned by the incumbent).
   Workflows are searched one at a time in increasing bound order, each capped at the
   incumbent's cost; a workflow whose bound cannot tie the incumbent is skipped (proved: none
   of its variants can win or tie).
1. **Lazy placement cuts.** Minimise cost; evaluate the answer exactly with
   ``selector.evaluate.evaluate`` (LeastLoaded is a sequential greedy rule, not a free
   assignment, so it is checked, not modelled). If placement fails at stage ``j``, every
   variant whose stages ``1..j`` have the same demand classes (same reuse-or-new, same
   replicas, shards and shard size) fails identically, in any workflow: cut them all and
   re-solve. Under ``sharing: compute`` the outcome also depends on each replica's ``u_s`` and
   on the utilisation routed to reused instances in *every* stage (section 9 applies reuse
   first), so the classes carry ``u_s``, later stages keep their reuse (same GPUs and load)
   or any new option, and the cut spans all stages. A variant that fails 1-3 (or section 9's
   reuse check) only through rounding gets an exact no-good cut.
2. **Tie window.** With a feasible incumbent of cost ``c`` every variant tying the optimum
   has cost ``<= c + 1e-9*max(1, c)``; enumerate all of them in R (over the workflows whose
   bound reaches the window), evaluate exactly and finish with ``selector.evaluate.choose``
   (cost, latency, GPUs, key). When ``c == 0`` the ties are exactly the feasible all-reuse
   variants (checked: any new stage costs more than 1e-9), so the window is taken on latency
   among all-reuse variants instead.

The window's evaluation is inside the limit: the enumeration keeps ``reserve_s`` per variant
found (:meth:`_State.reserve_s`) and :func:`_evaluate_until` stops at the deadline.

Status ``optimal`` only when every solve proved its answer and the window enumeration (and its
evaluation) was complete; otherwise the best exact-feasible variant found is returned as ``feasible``, and
when none was found and nothing was proved, ``unknown`` (spec section 6), never ``infeasible``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol

import numpy as np

from selector.diagnose import empty_space_reason, infeasibility_reason
from selector.evaluate import PLACEMENT, Evaluation, choose, demands, evaluate, infeasible_plan, routed, to_plan
from selector.index import NEW, Compiled, Option
from selector.pareto import front, suffix_minima
from selector.placement import free_memory, gpu_types, place, reuse_busy, reused_gpus_ok
from selector.plan import Plan
from selector.problem import TOL, Problem
from selector.restrict import usable_options
from solvers.base import unknown_plan

DIAGNOSE_GRACE_S = 0.1   # the reason of a proof may overrun the limit by this much, no more
FRONT_LIMIT = 50_000     # Pareto points kept per stage by lower_bound before it settles for a weaker bound
Objective = Literal["cost", "latency", "usd"]   # usd: section 10's U (objective usd_per_hour)
Variant = tuple[int, tuple[int, ...]]            # (workflow, option index per stage)


@dataclass(frozen=True)
class Cut:
    """Not all of these stages of ``workflow`` pick an option of their set."""

    workflow: int
    sets: tuple[tuple[int, frozenset[int]], ...]   # (stage, option indices)


@dataclass
class Answer:
    status: Literal["optimal", "feasible", "infeasible", "unknown"]   # unknown: timed out, no answer
    variant: Variant | None = None


class Backend(Protocol):
    """``usd_cap`` (section 10): only variants whose ``U`` is at most it (widened like ``cap``);
    ``reserve_s``: seconds per variant found to leave before ``deadline`` for evaluating it."""

    def minimise(self, *, objective: Objective, reuse_only: bool, cap: float | None, cuts: list[Cut],
                 hint: Variant | None, deadline: float, workflows: tuple[int, ...],
                 bound: float = 0.0, usd_cap: float | None = None) -> Answer: ...

    def enumerate(self, *, objective: Objective, reuse_only: bool, cap: float, cuts: list[Cut],
                  deadline: float, workflows: tuple[int, ...],
                  bounds: dict[int, float] | None = None, usd_cap: float | None = None,
                  reserve_s: float = 0.0) -> tuple[list[Variant], bool]: ...


@dataclass(frozen=True)
class Prepared:
    """Per workflow and stage, the option indices that pass every per-option necessary check."""

    cp: Compiled
    options: tuple[tuple[tuple[int, ...], ...], ...]
    free_total_gb: float
    max_stages: int

    def opt(self, w: int, s: int, o: int) -> Option:
        return self.cp.workflows[w].stages[s].options[o]


def prepare(cp: Compiled) -> Prepared:
    """Drop options no feasible variant can use (``selector.restrict.usable_options``)."""
    free = free_memory(cp.problem.cluster)
    out = [tuple(tuple(keep) for keep in usable_options(cp, wf)) for wf in cp.workflows]
    return Prepared(cp, tuple(out), sum(free.values()), max((len(w.stages) for w in cp.workflows), default=0))


def primary(cp: Compiled) -> Objective:
    """What the driver minimises first: ``cost`` (section 5) or ``usd`` (section 10's ``U``)."""
    return "usd" if cp.usd else "cost"


def _demand_class(o: Option) -> tuple:
    return ("reuse",) if o.kind != NEW else ("new", o.replicas, o.shards, o.mem_gb, o.gpu_type)


def _reuse_class(cp: Compiled, o: Option) -> tuple:
    """Section 9: what a reused stage changes for placement: its instance's GPUs and the load."""
    return ("reuse", tuple(cp.problem.cluster.instances[o.instance].gpus), o.util_add)


def _failing_stage(data: Prepared, ev: Evaluation) -> int | None:
    """The first stage whose new replicas LeastLoaded cannot place, given the stages before it
    (and, under compute sharing, every stage's reuse); None when section 9's reuse check fails."""
    cluster = data.cp.problem.cluster
    free = free_memory(cluster)
    busy = None
    if cluster.compute:
        to = routed(ev.options)
        busy = reuse_busy(cluster, to)
        if not reused_gpus_ok(cluster, to, busy):
            return None
    types = gpu_types(cluster)
    for j, o in enumerate(ev.options):
        if o.kind == NEW and place(free, demands(ev.options[: j + 1]), busy, types=types) is None:
            return j
    return len(ev.options) - 1


def placement_cuts(data: Prepared, ev: Evaluation) -> list[Cut]:
    """Cuts for a variant that LeastLoaded cannot place (see module docstring, step 1)."""
    fail = _failing_stage(data, ev)
    if fail is None:
        return [no_good((ev.workflow, ev.choice))]
    if data.cp.problem.cluster.compute:
        return _compute_cuts(data, ev, fail)
    classes = [_demand_class(o) for o in ev.options[: fail + 1]]
    return _class_cuts(data, fail, lambda o, s: _demand_class(o), lambda s: classes[s], every_stage=False)


def _compute_cuts(data: Prepared, ev: Evaluation, fail: int) -> list[Cut]:
    """Section 9's cuts: stages ``1..fail`` in the same demand classes (``u_s`` included, reuse
    by GPUs and load), every later stage reusing the same way or deploying anything new."""
    cp = data.cp

    def cls(o: Option, s: int) -> tuple:
        if o.kind != NEW:
            return _reuse_class(cp, o)
        return ("new", o.replicas, o.shards, o.mem_gb, o.replica_util, o.gpu_type) if s <= fail else ("new",)

    classes = [cls(o, s) for s, o in enumerate(ev.options)]
    return _class_cuts(data, fail, cls, lambda s: classes[s] if s < len(classes) else ("new",), every_stage=True)


def _class_cuts(data: Prepared, fail: int, cls: Callable[[Option, int], tuple], want: Callable[[int], tuple], *,
                every_stage: bool) -> list[Cut]:
    """One cut per workflow longer than ``fail`` stages: its stage ``s`` (``0..fail``, or every
    stage) restricted to the options of class ``want(s)``; no cut where a stage has none."""
    cuts = []
    for w, wf in enumerate(data.cp.workflows):
        if len(wf.stages) <= fail:
            continue
        sets = []
        for s in range(len(wf.stages) if every_stage else fail + 1):
            same = frozenset(o for o in data.options[w][s] if cls(data.opt(w, s, o), s) == want(s))
            if not same:
                break
            sets.append((s, same))
        else:
            cuts.append(Cut(w, tuple(sets)))
    return cuts


def lower_bound(data: Prepared, w: int, cap: float | None) -> float:
    """A lower bound on the cost ``M*L`` of workflow ``w``'s feasible variants (``inf``: none can
    cost at most ``cap``). Exact over constraints 1-2: ``selector.pareto.front`` keeps the Pareto
    front of partial (latency, memory) sums, dropping those that, completed with every later
    stage's smallest latency and memory, break the latency SLO or exceed ``cap``. Without a cap,
    or if the front outgrows ``FRONT_LIMIT``, the bound uses those per-stage minima instead."""
    cp = data.cp
    wf = cp.workflows[w]
    opts = data.options[w]
    if not all(opts):
        return math.inf
    if cp.usd:
        return _usd_bound(data, w, cap)
    lat = [np.array([wf.stages[s].calls * data.opt(w, s, o).latency_s for o in keep]) for s, keep in enumerate(opts)]
    mem = [np.array([data.opt(w, s, o).replicas * data.opt(w, s, o).mem_gb for o in keep]) for s, keep in enumerate(opts)]
    slo = cp.problem.task.latency_slo_s + TOL
    low_l, low_m = suffix_minima(lat, mem, 0)
    if low_l > slo * (1 + 1e-12):
        return math.inf
    if cap is None:
        return low_l * low_m
    fl, fm, done = front(lat, mem, slo, cap=cap, limit=FRONT_LIMIT)
    if fl.size == 0:
        return math.inf
    rest_l, rest_m = suffix_minima(lat, mem, done)
    return float(((fl + rest_l) * (fm + rest_m)).min())


def _usd_bound(data: Prepared, w: int, cap: float | None) -> float:
    """Section 10: ``U`` is a sum over stages, so the sum of each stage's least ``U`` bounds it
    (``inf`` when the stages' least latencies already break the SLO or the bound exceeds ``cap``)."""
    wf = data.cp.workflows[w]
    lat = sum(min(wf.stages[s].calls * data.opt(w, s, o).latency_s for o in keep)
              for s, keep in enumerate(data.options[w]))
    if lat > data.cp.problem.task.latency_slo_s + TOL:
        return math.inf
    low = sum(min(data.opt(w, s, o).usd_per_hour for o in keep) for s, keep in enumerate(data.options[w]))
    return math.inf if cap is not None and low > cap else low


def no_good(variant: Variant) -> Cut:
    w, choice = variant
    return Cut(w, tuple((s, frozenset([o])) for s, o in enumerate(choice)))


@dataclass
class _State:
    cuts: list[Cut] = field(default_factory=list)
    proved: bool = True
    evaluated: int = 0
    pruned: int = 0          # workflows skipped because their bound could not tie the incumbent
    eval_min_s: float = math.inf   # the quickest exact evaluation so far, for the enumeration's reserve

    def evaluate(self, cp: Compiled, variant: Variant) -> Evaluation:
        """``selector.evaluate.evaluate``, counted and timed."""
        t = time.perf_counter()
        ev = evaluate(cp, *variant)
        self.eval_min_s = min(self.eval_min_s, time.perf_counter() - t)
        self.evaluated += 1
        return ev

    def reserve_s(self) -> float:
        """Seconds to keep per enumerated variant for evaluating it before the deadline: the
        quickest evaluation so far, an estimate from below, so the enumeration stops early only
        where evaluating everything it found would have ended past the deadline anyway (no answer
        given within the limit changes); :func:`_evaluate_until` stops at the deadline itself."""
        return self.eval_min_s if math.isfinite(self.eval_min_s) else 0.0


def _incumbent(data: Prepared, backend: Backend, st: _State, *, objective: Objective, reuse_only: bool,
               cap: float | None, hint: Variant | None, deadline: float, workflows: tuple[int, ...],
               bound: float = 0.0, usd_cap: float | None = None) -> Evaluation | None:
    """Minimise, evaluate exactly, cut and repeat until an exactly feasible answer (or none)."""
    while True:
        ans = backend.minimise(objective=objective, reuse_only=reuse_only, cap=cap, cuts=st.cuts, hint=hint,
                               deadline=deadline, workflows=workflows, bound=bound, usd_cap=usd_cap)
        if ans.status in ("unknown", "feasible"):
            st.proved = False
        if ans.variant is None:
            return None
        ev = st.evaluate(data.cp, ans.variant)
        if ev.feasible:
            return ev
        st.cuts.extend(placement_cuts(data, ev) if ev.violated == PLACEMENT else [no_good(ans.variant)])
        if time.perf_counter() > deadline:
            st.proved = False
            return None


def positive_cost_floor(data: Prepared) -> float:
    """A lower bound on the objective value (cost, or ``U`` under section 10's ``usd_per_hour``)
    of any variant with at least one new stage."""
    if data.cp.usd:
        return min((data.opt(w, s, o).usd_per_hour for w, stages in enumerate(data.options)
                    for s, opts in enumerate(stages) for o in opts if data.opt(w, s, o).kind == NEW),
                   default=float("inf"))
    lat, mem = float("inf"), float("inf")
    for w, wf in enumerate(data.cp.workflows):
        per_stage = [min((wf.stages[s].calls * data.opt(w, s, o).latency_s for o in opts), default=float("inf"))
                     for s, opts in enumerate(data.options[w])]
        lat = min(lat, sum(per_stage))
        for s, opts in enumerate(data.options[w]):
            mem = min([mem] + [data.opt(w, s, o).replicas * data.opt(w, s, o).mem_gb for o in opts
                               if data.opt(w, s, o).kind == NEW])
    return lat * mem


def solve_exact(problem: Problem, make_backend, *, solver: str, time_limit_s: float,
                warm: Variant | None = None, started: float | None = None) -> Plan:
    """Run the driver with ``make_backend(prepared)``; see the module docstring. The limit runs
    from ``started`` (a ``time.perf_counter()`` value; default: now), so a caller's own work
    before the call, such as a warm start, comes out of it."""
    t0 = time.perf_counter() if started is None else started
    deadline = t0 + time_limit_s
    from selector.index import compile_problem
    cp = compile_problem(problem)
    if (reason := empty_space_reason(cp)) is not None:
        return infeasible_plan(cp, solver=solver, reason=reason, elapsed_s=time.perf_counter() - t0, evaluated=0)
    data = prepare(cp)
    backend = make_backend(data)
    st = _State()
    best = _search(cp, data, backend, st, warm, deadline)
    extra = {"cuts": len(st.cuts), "workflows_pruned": st.pruned}
    if best is None and not st.proved:
        return unknown_plan(cp, solver=solver, elapsed_s=time.perf_counter() - t0, evaluated=st.evaluated,
                            reason=f"time limit {time_limit_s:g} s reached before a feasible variant was found "
                                   f"(search incomplete)")
    if best is None:
        reason = infeasibility_reason(cp, deadline=deadline + min(time_limit_s, DIAGNOSE_GRACE_S))
        return infeasible_plan(cp, solver=solver, reason=reason, elapsed_s=time.perf_counter() - t0,
                               evaluated=st.evaluated)
    return to_plan(cp, best, status="optimal" if st.proved else "feasible", solver=solver,
                   elapsed_s=time.perf_counter() - t0, evaluated=st.evaluated, extra=extra)


def _window(c: float) -> float:
    return c + TOL * max(1.0, c)


def _search(cp: Compiled, data: Prepared, backend: Backend, st: _State, warm: Variant | None,
            deadline: float) -> Evaluation | None:
    found: list[Evaluation] = []
    if warm is not None:
        ev = st.evaluate(cp, warm)
        if ev.feasible:
            found.append(ev)
    everything = tuple(range(len(cp.workflows)))
    for w in sorted(everything, key=lambda w: (lower_bound(data, w, None), w)):
        best = choose(found)
        cap = None if best is None else _window(best.value)
        bound = lower_bound(data, w, cap)
        if not math.isfinite(bound):
            st.pruned += 1
            continue
        if time.perf_counter() > deadline:        # a workflow left unsearched: no proof
            st.proved = False
            break
        hint = (best.workflow, best.choice) if best is not None and best.workflow == w else None
        inc = _incumbent(data, backend, st, objective=primary(cp), reuse_only=False, cap=cap, hint=hint,
                         deadline=deadline, workflows=(w,), bound=bound)
        if inc is not None:
            found.append(inc)
    if not found:
        return None
    best = choose(found)
    if not st.proved:
        return best
    c = best.value
    if c == 0.0 and positive_cost_floor(data) > TOL * 1.000001:
        lat_inc = _incumbent(data, backend, st, objective="latency", reuse_only=True, cap=None, hint=None,
                             deadline=deadline, workflows=everything)
        lat = min(best.latency_s, lat_inc.latency_s if lat_inc is not None else best.latency_s)
        variants, complete = backend.enumerate(objective="latency", reuse_only=True, cap=_window(lat),
                                               cuts=st.cuts, deadline=deadline, workflows=everything,
                                               reserve_s=st.reserve_s())
    elif cp.usd:
        variants, complete = _usd_window(data, backend, st, best, deadline)
    else:
        bounds = {w: lower_bound(data, w, _window(c)) for w in everything}
        live = tuple(w for w in everything if math.isfinite(bounds[w]))
        variants, complete = backend.enumerate(objective="cost", reuse_only=False, cap=_window(c), cuts=st.cuts,
                                               deadline=deadline, workflows=live,
                                               bounds={w: bounds[w] for w in live}, reserve_s=st.reserve_s())
    evs, evaluated_all = _evaluate_until(cp, st, variants, deadline)
    st.proved &= complete and evaluated_all
    return choose(found + [e for e in evs if e.feasible])


def _evaluate_until(cp: Compiled, st: _State, variants: list[Variant], deadline: float) -> tuple[list[Evaluation], bool]:
    """Evaluate the window's variants in order until the deadline; True when all were."""
    evs = []
    for v in variants:
        if time.perf_counter() > deadline:
            return evs, False
        evs.append(st.evaluate(cp, v))
    return evs, True


def _usd_window(data: Prepared, backend: Backend, st: _State, best: Evaluation,
                deadline: float) -> tuple[list[Variant], bool]:
    """Section 10's tie window: ``U`` ties are common (a stage's model changes no price), so the
    window is cut by latency first: the least ``L`` among variants with ``U`` in the window (a
    placed incumbent), then every variant with ``U`` and ``L`` both in their windows."""
    everything = tuple(range(len(data.cp.workflows)))
    cap = _window(best.value)
    bounds = {w: lower_bound(data, w, cap) for w in everything}
    live = tuple(w for w in everything if math.isfinite(bounds[w]))
    fast = _incumbent(data, backend, st, objective="latency", reuse_only=False, cap=None, hint=None,
                      deadline=deadline, workflows=live, usd_cap=cap)
    lat = best.latency_s if fast is None else min(best.latency_s, fast.latency_s)
    return backend.enumerate(objective="latency", reuse_only=False, cap=_window(lat), cuts=st.cuts,
                             deadline=deadline, workflows=live, usd_cap=cap, reserve_s=st.reserve_s())
