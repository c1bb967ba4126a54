"""The exactness driver shared by the two mathematical-programming selectors.

A backend (``milp`` on CP-SAT, ``milp-pulp`` on HiGHS) answers two questions about the
*relaxed* problem R: constraints 1-3 of spec section 4 (with float data rounded or
toleranced, always so that R contains every truly feasible variant), necessary placement
conditions, and the cuts collected so far:

* ``minimise(objective, ...)``: a variant of R minimising cost ``M*L`` (or latency ``L``);
* ``enumerate(objective, cap, ...)``: every variant of R whose objective is at most ``cap``
  (a superset: the backend widens ``cap`` by its own rounding error).

The driver turns these into the spec's unique optimum:

1. **Lazy placement cuts.** Minimise cost; evaluate the answer exactly with
   ``selector.evaluate.evaluate`` (LeastLoaded is a sequential greedy rule, not a free
   assignment, so it is checked, not modelled). If placement fails at stage ``j``, every
   variant whose stages ``1..j`` have the same demand classes (same reuse-or-new, same
   replicas, shards and shard size) fails identically, in any workflow: cut them all and
   re-solve. A variant that fails 1-3 only through rounding gets an exact no-good cut.
2. **Tie window.** With a feasible incumbent of cost ``c`` every variant tying the optimum
   has cost ``<= c + 1e-9*max(1, c)``; enumerate all of them in R, evaluate exactly and
   finish with ``selector.evaluate.choose`` (cost, latency, GPUs, key). When ``c == 0`` the
   ties are exactly the feasible all-reuse variants (checked: any new stage costs more than
   1e-9), so the window is taken on latency among all-reuse variants instead.

Status ``optimal`` only when every solve proved its answer and the window enumeration was
complete; otherwise the best exact-feasible variant found is returned as ``feasible``, and
when none was found and nothing was proved, ``unknown`` (spec section 6), never ``infeasible``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

from selector.diagnose import empty_space_reason, infeasibility_reason
from selector.evaluate import PLACEMENT, Evaluation, choose, demands, evaluate, infeasible_plan, to_plan
from selector.index import NEW, Compiled, Option
from selector.placement import free_memory, place
from selector.plan import Plan
from selector.problem import Problem
from selector.restrict import usable_options
from solvers.base import unknown_plan

TOL = 1e-9
DIAGNOSE_GRACE_S = 0.1   # the reason of a proof may overrun the limit by this much, no more
Objective = Literal["cost", "latency"]
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
    def minimise(self, *, objective: Objective, reuse_only: bool, cap: float | None, cuts: list[Cut],
                 hint: Variant | None, deadline: float) -> Answer: ...

    def enumerate(self, *, objective: Objective, reuse_only: bool, cap: float, cuts: list[Cut],
                  deadline: float) -> tuple[list[Variant], bool]: ...


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


def _demand_class(o: Option) -> tuple:
    return ("reuse",) if o.kind != NEW else ("new", o.replicas, o.shards, o.mem_gb)


def placement_cuts(data: Prepared, ev: Evaluation) -> list[Cut]:
    """Cuts for a variant that LeastLoaded cannot place (see module docstring, step 1)."""
    free = free_memory(data.cp.problem.cluster)
    fail = len(ev.options) - 1
    for j, o in enumerate(ev.options):
        if o.kind == NEW and place(free, demands(ev.options[: j + 1])) is None:
            fail = j
            break
    classes = [_demand_class(o) for o in ev.options[: fail + 1]]
    cuts = []
    for w, wf in enumerate(data.cp.workflows):
        if len(wf.stages) <= fail:
            continue
        sets = []
        for s, cls in enumerate(classes):
            same = frozenset(o for o in data.options[w][s] if _demand_class(data.opt(w, s, o)) == cls)
            if not same:
                break
            sets.append((s, same))
        else:
            cuts.append(Cut(w, tuple(sets)))
    return cuts


def no_good(variant: Variant) -> Cut:
    w, choice = variant
    return Cut(w, tuple((s, frozenset([o])) for s, o in enumerate(choice)))


@dataclass
class _State:
    cuts: list[Cut] = field(default_factory=list)
    proved: bool = True
    evaluated: int = 0


def _incumbent(data: Prepared, backend: Backend, st: _State, *, objective: Objective, reuse_only: bool,
               cap: float | None, hint: Variant | None, deadline: float) -> Evaluation | None:
    """Minimise, evaluate exactly, cut and repeat until an exactly feasible answer (or none)."""
    while True:
        ans = backend.minimise(objective=objective, reuse_only=reuse_only, cap=cap, cuts=st.cuts, hint=hint,
                               deadline=deadline)
        if ans.status in ("unknown", "feasible"):
            st.proved = False
        if ans.variant is None:
            return None
        ev = evaluate(data.cp, *ans.variant)
        st.evaluated += 1
        if ev.feasible:
            return ev
        st.cuts.extend(placement_cuts(data, ev) if ev.violated == PLACEMENT else [no_good(ans.variant)])
        if time.perf_counter() > deadline:
            st.proved = False
            return None


def positive_cost_floor(data: Prepared) -> float:
    """A lower bound on the cost of any variant with at least one new stage."""
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
    extra = {"cuts": len(st.cuts)}
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


def _search(cp: Compiled, data: Prepared, backend: Backend, st: _State, warm: Variant | None,
            deadline: float) -> Evaluation | None:
    found: list[Evaluation] = []
    cap = None
    if warm is not None:
        ev = evaluate(cp, *warm)
        st.evaluated += 1
        if ev.feasible:
            found.append(ev)
            cap = ev.cost_gb_s + TOL * max(1.0, ev.cost_gb_s)
    inc = _incumbent(data, backend, st, objective="cost", reuse_only=False, cap=cap, hint=warm, deadline=deadline)
    if inc is not None:
        found.append(inc)
    if not found:
        return None
    if not st.proved:
        return choose(found)
    best = choose(found)
    c = best.cost_gb_s
    if c == 0.0 and positive_cost_floor(data) > TOL * 1.000001:
        lat_inc = _incumbent(data, backend, st, objective="latency", reuse_only=True, cap=None, hint=None,
                             deadline=deadline)
        lat = min(best.latency_s, lat_inc.latency_s if lat_inc is not None else best.latency_s)
        variants, complete = backend.enumerate(objective="latency", reuse_only=True,
                                               cap=lat + TOL * max(1.0, lat), cuts=st.cuts, deadline=deadline)
    else:
        variants, complete = backend.enumerate(objective="cost", reuse_only=False, cap=c + TOL * max(1.0, c),
                                               cuts=st.cuts, deadline=deadline)
    st.proved &= complete
    evs = [evaluate(cp, *v) for v in variants]
    st.evaluated += len(evs)
    return choose(found + [e for e in evs if e.feasible])
