"""``milp``: exact selection on OR-Tools CP-SAT (spec sections 3-5 and 9), warm-started from
``flowmaker-plus``.

Formulation (one model over all workflows; ``solvers/_exact.py`` drives it):

* Data. Per workflow ``w``, stage ``s``: the options that pass the exact per-option checks of
  ``_exact.prepare`` (accuracy, one stage's latency, one stage's reuse load, GPU count, shard
  size). Floats become integers with explicit scales chosen per problem so that the largest
  latency and memory are about ``SCALE`` units::

      LAT_SCALE = SCALE / (latency_slo_s)      # units per second
      MEM_SCALE = SCALE / (free GPU memory)    # units per GB
      UTIL_SCALE = SCALE                       # units per unit of utilisation

  Each option's ``calls * latency_s``, ``replicas * mem_gb`` and ``load / capacity_rps`` are
  rounded to these units, so a sum over ``S`` stages is off by at most ``S/2`` units.
* Variables. ``x[w]`` (workflow chosen), ``y[w, s, o]`` (option ``o`` at stage ``s``),
  integer ``Lint``, ``Mint`` and ``P = Mint * Lint``; over the workflows the driver asks for
  (it solves them one at a time, in increasing lower-bound order, see ``solvers/_exact.py``).
* Constraints.
  - one workflow: ``sum_w x[w] = 1``; one option per stage: ``sum_o y[w,s,o] = x[w]``
  - latency (2): ``Lint = sum lat[o] y <= (slo + 1e-9) LAT_SCALE + S/2``
  - reuse capacity (3), per instance ``i``: ``sum_{o reuses i} util[o] y <= (1 + 1e-9 - u_i) UTIL_SCALE + S/2``
  - placement, necessary part: ``Mint = sum mem[o] y <= (free + 1e-9) MEM_SCALE + S/2``
  - ``sharing: compute`` (section 9), in ``UTIL_SCALE`` units: per GPU ``g`` of reusable
    instances, ``sum_{o reuses an instance on g} util[o] y <= (1 + 1e-9 - busy_g) UTIL_SCALE + S/2``
    (exact: the reuse check), and the necessary ``sum cload[o] y <= room UTIL_SCALE + S/2`` with
    ``cload`` the utilisation an option adds over all its GPUs and ``room = sum_g max(0, 1 - busy_g)``,
    and the integer bin-packing rows of ``_rows.packing_rows`` (e.g. shards above one half
    cannot share a GPU), also necessary for any placement; these two only once a cut exists
  - the driver's lower bound on the workflow's cost: ``P >= bound`` (widened as below)
  - lazy cuts from the driver: ``sum_{(s, o) in cut} y[w,s,o] <= |stages in cut| - 1``
  Every bound is widened by the rounding error, so the model *relaxes* the spec: no truly
  feasible variant is lost, and the driver re-checks every answer exactly.
* Objective. ``P = Mint * Lint`` through ``add_multiplication_equality`` (CP-SAT's exact
  integer product), minimised; ``|P / (MEM_SCALE LAT_SCALE) - M L| <= M eL + L eM + eM eL`` with
  ``eL = S / (2 LAT_SCALE)``, ``eM = S / (2 MEM_SCALE)``, which is how the tie window of the
  driver is widened. For the all-reuse tie case the objective is ``Lint`` over reuse options.
* Placement. LeastLoaded is a sequential greedy rule, so it is not modelled: the driver places
  each incumbent and adds a no-good cut over the demand classes of the failing prefix.
* Tie-breaks. CP-SAT enumerates every variant of the widened cost window
  (``enumerate_all_solutions``); ``selector.evaluate.choose`` picks the spec's unique optimum.
* Warm start. ``get_solver("flowmaker-plus").select`` (the public registry, never its
  internals), the best heuristic, gives a feasible variant: it is the first incumbent, a
  solution hint, and caps ``P`` at its cost, so the driver skips every workflow whose lower
  bound cannot tie it. It gets ``min(warm_share x time limit, warm_max_s = 0.5 s)``
  (it answers in well under 0.1 s on the benchmark spaces; ``flowmaker``, the earlier warm
  start, needed 1.2-1.6 s on a 7/5/3-stage space and was cut off at 0.25 s).
* Parameters. ``time_limit_s`` shared by every solve, ``num_workers`` (default: CPU count up to 8, 1 for
  enumeration as CP-SAT requires), ``random_seed``, ``catch_sigint_signal = False`` (Ctrl-C
  stays Python's KeyboardInterrupt, see ``_solver``).
"""
from __future__ import annotations

import math
import time

from selector.index import NEW, REUSE
from selector.plan import Plan
from selector.problem import Problem, TOL
from solvers._cpsat import cp_solver
from solvers._exact import Answer, Cut, Objective, Prepared, Variant, solve_exact
from solvers._rows import compute_room_rows, packing_rows, reuse_by_gpu, type_memory_rows
from solvers.base import Selector

SCALE = 1_000_000


class MilpSelector(Selector):
    name = "milp"
    backend_modules = ("ortools.sat.python.cp_model",)
    exact = True

    def __init__(self, *, warm_start: bool = True, workers: int | None = None, seed: int = 0,
                 warm_share: float = 0.25, warm_max_s: float = 0.5, warm_solver: str = "flowmaker-plus") -> None:
        import os
        self.warm_start = warm_start
        self.workers = workers or max(1, min(8, os.cpu_count() or 1))
        self.seed = seed
        self.warm_share = warm_share
        self.warm_max_s = warm_max_s     # the heuristic answers fast or not at all; don't wait on it
        self.warm_solver = warm_solver

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        t0 = time.perf_counter()
        warm = (warm_variant(problem, min(time_limit_s * self.warm_share, self.warm_max_s), self.warm_solver)
                if self.warm_start else None)
        return solve_exact(problem, lambda data: CpSatBackend(data, workers=self.workers, seed=self.seed),
                           solver=self.name, time_limit_s=time_limit_s, warm=warm, started=t0)


def warm_variant(problem: Problem, time_limit_s: float, solver: str = "flowmaker-plus") -> Variant | None:
    """The answer of ``solver`` as (workflow, option indices), through the public registry."""
    from selector.evaluate import variant_of
    from selector.index import compile_problem
    from solvers.registry import get_solver

    plan = get_solver(solver).select(problem, time_limit_s=max(1e-3, time_limit_s))
    if not plan.solved:
        return None
    return variant_of(compile_problem(problem), plan)


class CpSatBackend:
    """The CP-SAT model of the module docstring; rebuilt per solve (cheap) with the current cuts."""

    def __init__(self, data: Prepared, *, workers: int, seed: int) -> None:
        # import here, not at the first solve: the driver may prove a problem from its bounds
        # alone, and the first import (~1 s) must not land inside a later, time-limited search
        from ortools.sat.python import cp_model  # noqa: F401
        self.data = data
        self.workers = workers
        self.seed = seed
        task = data.cp.problem.task
        s = max(1, data.max_stages)
        self.lat_max = task.latency_slo_s + TOL
        self.mem_max = data.free_total_gb + TOL
        self.ls = SCALE / self.lat_max
        self.ms = SCALE / max(self.mem_max, 1e-6)
        self.us = float(SCALE)
        # section 10's U in units of USD_SCALE per $/h: the largest workflow's dearest choices ~ SCALE
        usd_max = max((sum(max(data.opt(w, s_, o).usd_per_hour for o in opts) for s_, opts in enumerate(stages))
                       for w, stages in enumerate(data.options) if all(stages)), default=0.0)
        self.usd_scale = SCALE / max(usd_max, 1e-6)
        self.slack = s / 2 + 1e-6          # rounding error of a sum over s stages, in units
        self.e_lat = self.slack / self.ls  # seconds
        self.e_mem = self.slack / self.ms  # GB
        self._packing = packing_rows(data) if data.cp.compute else []

    # -- model -----------------------------------------------------------------------------
    def _build(self, *, reuse_only: bool, cuts: list[Cut], workflows: tuple[int, ...],
               usd_cap: float | None = None):
        from ortools.sat.python import cp_model

        d, cp = self.data, self.data.cp
        m = cp_model.CpModel()
        x = {w: m.new_bool_var(f"x[{w}]") for w in workflows}
        y = {}
        for w in workflows:
            for s, opts in enumerate(d.options[w]):
                for o in opts:
                    if reuse_only and d.opt(w, s, o).kind == NEW:
                        continue
                    y[w, s, o] = m.new_bool_var(f"y[{w},{s},{o}]")
        # one workflow; one option per stage of it
        m.add_exactly_one(x.values())
        for w in workflows:
            for s in range(len(d.options[w])):
                m.add(sum(v for (w2, s2, _), v in y.items() if (w2, s2) == (w, s)) == x[w])
        lat = {k: round(cp.workflows[k[0]].stages[k[1]].calls * d.opt(*k).latency_s * self.ls) for k in y}
        mem = {k: round(d.opt(*k).replicas * d.opt(*k).mem_gb * self.ms) for k in y}
        lat_ub = math.floor(self.lat_max * self.ls + self.slack)
        mem_ub = math.floor(self.mem_max * self.ms + self.slack)
        lint = m.new_int_var(0, lat_ub, "L")
        mint = m.new_int_var(0, mem_ub, "M")
        # L = sum lat y <= slo ; M = sum mem y <= free
        m.add(lint == sum(lat[k] * v for k, v in y.items()))
        m.add(mint == sum(mem[k] * v for k, v in y.items()))
        # reuse capacity: u_i + sum util y <= 1
        by_inst: dict[int, list] = {}
        for k, v in y.items():
            o = d.opt(*k)
            if o.kind == REUSE:
                by_inst.setdefault(o.instance, []).append(round(o.util_add * self.us) * v)
        for i, terms in by_inst.items():
            if len(terms) > 1:
                m.add(sum(terms) <= math.floor((1.0 + TOL - cp.base_util[i]) * self.us + self.slack))
        if cp.compute:
            self._compute_sharing(m, y, necessary=bool(cuts))
        for row, free in type_memory_rows(d, y):   # section 10: per GPU type, new memory <= its free memory
            m.add(sum(round(v * self.ms) * y[k] for k, v in row.items())
                  <= math.floor((free + TOL) * self.ms + self.slack))
        # section 10's U, in usd units
        self._usd = sum(round(d.opt(*k).usd_per_hour * self.usd_scale) * v for k, v in y.items())
        if usd_cap is not None:
            m.add(self._usd <= self._cap_units("usd", usd_cap))
        # lazy cuts: not every listed stage picks from its set
        for cut in cuts:
            if cut.workflow not in x:
                continue
            terms = [y[cut.workflow, s, o] for s, opts in cut.sets for o in opts if (cut.workflow, s, o) in y]
            m.add(sum(terms) <= len(cut.sets) - 1)
        self._ubs = (lat_ub, mem_ub)
        return m, x, y, lint, mint

    def _compute_sharing(self, m, y, *, necessary: bool) -> None:
        """Section 9 (``sharing: compute``), in utilisation units:
        after reuse, per GPU g of a reused instance: sum_{o reuses an instance on g} util y <= 1 - busy_g;
        necessary for placement (only once a cut exists, i.e. once the relaxation has produced a
        variant that cannot be placed: on problems where placement never binds these dense rows
        slow the search, up to 2x here and 5x for HiGHS): sum (utilisation o adds over its GPUs) y
        <= sum_g max(0, 1 - busy_g), and the packing rows."""
        d, cp = self.data, self.data.cp
        for g, terms in reuse_by_gpu(d, y).items():
            m.add(sum(round(u * self.us) * y[k] for k, u in terms)
                  <= math.floor((1.0 + TOL - cp.base_busy[g]) * self.us + self.slack))
        if not necessary:
            return
        for load, room in compute_room_rows(d, y):
            m.add(sum(round(u * self.us) * y[k] for k, u in load.items())
                  <= math.floor((room + TOL) * self.us + self.slack))
        for weights, cap in self._packing:
            terms = [c * y[k] for k, c in weights.items() if k in y]
            if terms:
                m.add(sum(terms) <= cap)

    def _widening(self) -> float:
        """Bound (GB*s) on ``|P / (MEM_SCALE LAT_SCALE) - M L|`` (module docstring)."""
        return self.mem_max * self.e_lat + self.lat_max * self.e_mem + self.e_mem * self.e_lat

    def _cap_units(self, objective: Objective, cap: float) -> int:
        if objective == "latency":
            return math.floor(cap * self.ls + self.slack)
        if objective == "usd":
            return math.floor(cap * self.usd_scale + self.slack)
        return math.floor((cap + self._widening()) * self.ms * self.ls) + 1

    def _objective(self, m, objective: Objective, lint, mint, cap: float | None, x=None,
                   bounds: dict[int, float] | None = None):
        if objective == "latency":
            target = lint
        elif objective == "usd":
            target = m.new_int_var(0, SCALE + math.ceil(2 * self.slack) + 1, "U")
            m.add(target == self._usd)
            low = {w: max(0, math.floor(b * self.usd_scale - self.slack) - 1)
                   for w, b in (bounds or {}).items() if w in x and b > 0}
            if low:
                m.add(target >= sum(v * x[w] for w, v in low.items()))
        else:
            target = m.new_int_var(0, self._ubs[0] * self._ubs[1], "P")
            m.add_multiplication_equality(target, [mint, lint])
            # P >= the driver's proved bound on M*L of the chosen workflow, widened by the rounding
            # error (so still a relaxation)
            low = {w: max(0, math.floor((b - self._widening()) * self.ms * self.ls) - 1)
                   for w, b in (bounds or {}).items() if w in x and b > 0}
            if low:
                m.add(target >= sum(v * x[w] for w, v in low.items()))
        if cap is not None:
            m.add(target <= self._cap_units(objective, cap))
        return target

    def _solver(self, deadline: float, workers: int):
        return cp_solver(deadline, workers, self.seed)

    @staticmethod
    def _variant(value, x, y) -> Variant:
        w = next(k for k, v in x.items() if value(v))
        picks = sorted((s, o) for (w2, s, o), v in y.items() if w2 == w and value(v))
        return w, tuple(o for _, o in picks)

    # -- backend protocol ---------------------------------------------------------------------
    def minimise(self, *, objective: Objective, reuse_only: bool, cap: float | None, cuts: list[Cut],
                 hint: Variant | None, deadline: float, workflows: tuple[int, ...], bound: float = 0.0,
                 usd_cap: float | None = None) -> Answer:
        from ortools.sat.python import cp_model

        m, x, y, lint, mint = self._build(reuse_only=reuse_only, cuts=cuts, workflows=workflows, usd_cap=usd_cap)
        m.minimize(self._objective(m, objective, lint, mint, cap, x, {w: bound for w in workflows}))
        if hint is not None and hint[0] in x:
            hw, hc = hint
            for w, v in x.items():
                m.add_hint(v, w == hw)
            for (w, s, o), v in y.items():
                m.add_hint(v, w == hw and hc[s] == o)
        solver = self._solver(deadline, self.workers)
        status = solver.solve(m)
        if status == cp_model.INFEASIBLE:
            return Answer("infeasible")
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Answer("unknown")
        return Answer("optimal" if status == cp_model.OPTIMAL else "feasible",
                      self._variant(solver.boolean_value, x, y))

    def enumerate(self, *, objective: Objective, reuse_only: bool, cap: float, cuts: list[Cut],
                  deadline: float, workflows: tuple[int, ...],
                  bounds: dict[int, float] | None = None, usd_cap: float | None = None,
                  reserve_s: float = 0.0) -> tuple[list[Variant], bool]:
        """Every variant of the window; the search stops once evaluating what it found
        (``reserve_s`` seconds each, the driver's estimate) would end past ``deadline``."""
        from ortools.sat.python import cp_model

        if not workflows:
            return [], True
        m, x, y, lint, mint = self._build(reuse_only=reuse_only, cuts=cuts, workflows=workflows, usd_cap=usd_cap)
        self._objective(m, objective, lint, mint, cap, x, bounds)
        found: list[Variant] = []

        class Collect(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self) -> None:
                found.append(CpSatBackend._variant(self.boolean_value, x, y))
                if time.perf_counter() + len(found) * reserve_s > deadline:
                    self.stop_search()

        solver = self._solver(deadline, 1)
        solver.parameters.enumerate_all_solutions = True
        status = solver.solve(m, Collect())
        complete = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and time.perf_counter() <= deadline
        return sorted(set(found)), complete
