"""``milp-pulp``: a second, independent exact formulation, a linear MILP on PuLP + HiGHS.

Where ``milp`` (CP-SAT) rounds to integers and multiplies exactly, this model keeps the float
data and *linearises* the product ``M * L``:

* Variables. ``x[w]``, ``y[w,s,o]`` binary as in ``milp``, over the workflows the driver asks
  for (one at a time, in increasing lower-bound order); continuous ``L >= 0`` (latency of the
  chosen workflow) and ``z[w,s,o] >= 0``, meant to equal ``y[w,s,o] * L``.
* Constraints.
  - ``sum_w x[w] = 1``; ``sum_o y[w,s,o] = x[w]``
  - latency (2): ``L = sum lat[o] y <= latency_slo_s + 1e-9``
  - reuse capacity (3): ``u_i + sum_{o reuses i} util[o] y <= 1 + 1e-9``
  - memory (necessary for placement): ``sum mem[o] y <= free + 1e-9``
  - ``sharing: compute`` (section 9): per GPU ``g`` of reusable instances
    ``busy_g + sum_{o reuses an instance on g} util[o] y <= 1 + 1e-9`` (exact: the reuse check),
    and the necessary ``sum cload[o] y <= sum_g max(0, 1 + 1e-9 - busy_g)`` (``cload``: the
    utilisation an option adds over all its GPUs), and the integer bin-packing rows of
    ``_rows.packing_rows``
  - the driver's lower bound on the workflow's cost (``solvers/_exact.py``):
    ``cost >= bound (1 - WINDOW_REL)``
  - product linearisation (big-M with ``U = latency_slo_s``):
    ``z[w,s,o] >= L - U (1 - y[w,s,o])``, ``z <= U y``, and the aggregated
    ``sum_o z[w,s,o] >= L - U (1 - x[w])`` that tightens the LP relaxation.
  - lazy cuts from ``solvers/_exact.py`` (placement prefixes, exact no-goods).
* Objective. ``cost = sum mem[o] z[w,s,o]``; at an integral point this is exactly ``M * L``
  (``z`` is pushed down to ``y * L`` because memory is positive). For the all-reuse tie case
  the objective is ``L`` over reuse options only.
* Tie window. HiGHS has no solution enumeration, so the window is listed by re-solving with
  a no-good cut on each variant found, until the optimum exceeds the window (widened by a
  relative ``WINDOW_REL`` for HiGHS's feasibility tolerances); ``choose`` finishes.
* Parameters. HiGHS through ``pulp.HiGHS`` (the ``highspy`` API; no binary needed),
  ``mip_rel_gap = 0``, ``mip_abs_gap = 1e-9``, one time limit shared by every solve. No warm
  start: this model is the independent check on ``milp``, so its first incumbent comes from
  its own solve of the workflow with the smallest lower bound.
"""
from __future__ import annotations

import time

from selector.index import NEW, REUSE
from selector.plan import Plan
from selector.problem import Problem, TOL
from solvers._exact import Answer, Cut, Objective, Prepared, Variant, no_good, solve_exact
from solvers._rows import compute_room_rows, packing_rows, reuse_by_gpu, type_memory_rows
from solvers.base import Selector

WINDOW_REL = 1e-6


class MilpPulpSelector(Selector):
    name = "milp-pulp"
    backend_modules = ("pulp", "highspy")
    exact = True

    def __init__(self, *, threads: int = 1) -> None:
        self.threads = threads

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        _silence_banner()
        return solve_exact(problem, lambda data: PulpBackend(data, threads=self.threads), solver=self.name,
                           time_limit_s=time_limit_s)


_BANNER_DONE = False


def _silence_banner() -> None:
    """HiGHS prints a banner on stdout the first time a ``Highs`` is built in a process, which
    would corrupt ``--json`` output; build that first one with file descriptor 1 on /dev/null."""
    global _BANNER_DONE
    if _BANNER_DONE:
        return
    import os
    import sys

    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _BANNER_DONE = True


class PulpBackend:
    """The linearised MILP of the module docstring, rebuilt per solve with the current cuts."""

    def __init__(self, data: Prepared, *, threads: int) -> None:
        import pulp  # noqa: F401 - imported before the search, like milp's CP-SAT (see there)
        self.data = data
        self.threads = threads
        self.build_s = 0.0      # the slowest model build so far: PuLP builds (and hands HiGHS) in Python
        self.u = data.cp.problem.task.latency_slo_s + TOL
        self._packing = packing_rows(data) if data.cp.compute else []

    def _build(self, *, objective: Objective, reuse_only: bool, cap: float | None, cuts: list[Cut],
               workflows: tuple[int, ...], bounds: dict[int, float] | None = None, usd_cap: float | None = None):
        import pulp

        d, cp = self.data, self.data.cp
        lp = pulp.LpProblem("selection", pulp.LpMinimize)
        x = {w: lp.add_variable(f"x_{w}", cat="Binary") for w in workflows}
        y, z = {}, {}
        for w in workflows:
            for s, opts in enumerate(d.options[w]):
                for o in opts:
                    if reuse_only and d.opt(w, s, o).kind == NEW:
                        continue
                    y[w, s, o] = lp.add_variable(f"y_{w}_{s}_{o}", cat="Binary")
                    if objective == "cost":
                        z[w, s, o] = lp.add_variable(f"z_{w}_{s}_{o}", lowBound=0)
        lat = {k: cp.workflows[k[0]].stages[k[1]].calls * d.opt(*k).latency_s for k in y}
        mem = {k: d.opt(*k).replicas * d.opt(*k).mem_gb for k in y}
        by_stage: dict[tuple[int, int], list] = {}
        for k in y:
            by_stage.setdefault(k[:2], []).append(k)
        # one workflow, one option per stage of it
        lp += pulp.lpSum(x.values()) == 1
        for w in workflows:
            for s in range(len(d.options[w])):
                lp += pulp.lpSum(y[k] for k in by_stage.get((w, s), [])) == x[w]
        big_l = lp.add_variable("L", lowBound=0)
        # L = sum lat y <= slo ; sum mem y <= free
        lp += big_l == pulp.lpSum(lat[k] * v for k, v in y.items())
        lp += big_l <= self.u
        lp += pulp.lpSum(mem[k] * v for k, v in y.items()) <= d.free_total_gb + TOL
        # reuse capacity: u_i + sum util y <= 1
        by_inst: dict[int, list] = {}
        for k, v in y.items():
            o = d.opt(*k)
            if o.kind == REUSE:
                by_inst.setdefault(o.instance, []).append(o.util_add * v)
        for i, terms in by_inst.items():
            if len(terms) > 1:
                lp += pulp.lpSum(terms) <= 1.0 + TOL - float(cp.base_util[i])
        if cp.compute:
            self._compute_sharing(lp, y, necessary=bool(cuts))
        for row, free in type_memory_rows(d, y):   # section 10: per GPU type, new memory <= its free memory
            lp += pulp.lpSum(v * y[k] for k, v in row.items()) <= free + TOL
        usd = pulp.lpSum(d.opt(*k).usd_per_hour * v for k, v in y.items())   # section 10's U
        if usd_cap is not None:
            lp += usd <= usd_cap * (1 + WINDOW_REL) + WINDOW_REL
        for cut in cuts:
            if cut.workflow not in x:
                continue
            terms = [y[cut.workflow, s, o] for s, opts in cut.sets for o in opts if (cut.workflow, s, o) in y]
            lp += pulp.lpSum(terms) <= len(cut.sets) - 1
        if objective == "cost":
            # z = y * L, linearised; cost = sum mem z = M * L at integral points
            for k, v in z.items():
                lp += v >= big_l - self.u * (1 - y[k])
                lp += v <= self.u * y[k]
            for (w, s), keys in by_stage.items():
                lp += pulp.lpSum(z[k] for k in keys) >= big_l - self.u * (1 - x[w])
            target = pulp.lpSum(mem[k] * v for k, v in z.items())
            low = {w: b * (1 - WINDOW_REL) for w, b in (bounds or {}).items() if w in x and b > 0}
            if len(low) == 1 and len(x) == 1:
                lp += target >= next(iter(low.values()))
            elif low:
                lp += target >= pulp.lpSum(b * x[w] for w, b in low.items())
        elif objective == "usd":
            target = usd
            low = {w: b * (1 - WINDOW_REL) for w, b in (bounds or {}).items() if w in x and b > 0}
            if low:
                lp += target >= pulp.lpSum(b * x[w] for w, b in low.items())
        else:
            target = big_l
        lp += target
        if cap is not None:
            lp += target <= cap * (1 + WINDOW_REL) + WINDOW_REL
        return lp, x, y

    def _compute_sharing(self, lp, y, *, necessary: bool) -> None:
        """Section 9's reuse check per GPU, and (once a cut exists: see milp's) its necessary rows."""
        import pulp

        d, cp = self.data, self.data.cp
        for g, terms in reuse_by_gpu(d, y).items():
            lp += pulp.lpSum(u * y[k] for k, u in terms) <= 1.0 + TOL - float(cp.base_busy[g])
        if not necessary:
            return
        for load, room in compute_room_rows(d, y):
            lp += pulp.lpSum(u * y[k] for k, u in load.items()) <= room + TOL
        for weights, cap in self._packing:
            terms = [c * y[k] for k, c in weights.items() if k in y]
            if terms:
                lp += pulp.lpSum(terms) <= cap

    def _solve(self, lp, deadline: float):
        import highspy
        import pulp

        # HiGHS's clock starts after PuLP has handed it the model (about as long as building it):
        # keep that out of its limit, or a 24-instance model overran 2 s by 0.6 s (issue 28)
        left = deadline - time.perf_counter() - self.build_s
        if left <= 0:
            return "unknown"
        solver = pulp.HiGHS(msg=False, timeLimit=left, gapRel=0.0, gapAbs=1e-9, threads=self.threads)
        stats = lp.solve(solver)
        status = lp.solverModel.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            return "optimal"
        if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            return "infeasible"
        if status == highspy.HighsModelStatus.kSolveError:
            return "error"
        has = getattr(stats, "has_solution", None)     # PuLP 4 returns the stats, 3 an int status
        if has is None:
            has = lp.sol_status == pulp.LpSolutionIntegerFeasible
        return "feasible" if has else "unknown"

    def _solve_built(self, build, bounds: dict[int, float] | None, deadline: float):
        """Build (``build(bounds)``) and solve; on a HiGHS solve error (seen when the bound row is
        tight at the optimum) solve once more without the driver's bound rows, which are only a
        help. Returns ``(status, x, y, lp)``: keep ``lp`` while reading ``x`` and ``y`` (PuLP 4's
        variables hold only a weak reference to their problem and refuse values without it)."""
        lp, x, y = self._timed_build(build, bounds, deadline)
        status = "unknown" if lp is None else self._solve(lp, deadline)
        if status == "error" and bounds:
            lp, x, y = self._timed_build(build, None, deadline)
            status = "unknown" if lp is None else self._solve(lp, deadline)
        return ("unknown" if status == "error" else status), x, y, lp

    def _timed_build(self, build, bounds: dict[int, float] | None, deadline: float):
        """``build(bounds)``, or ``(None, None, None)`` when the slowest build so far would end past
        ``deadline`` (a build cannot be interrupted)."""
        t0 = time.perf_counter()
        if t0 + self.build_s > deadline:
            return None, None, None
        out = build(bounds)
        self.build_s = max(self.build_s, time.perf_counter() - t0)
        return out

    @staticmethod
    def _variant(x, y) -> Variant:
        w = next(k for k, v in x.items() if (v.value() or 0) > 0.5)
        picks = sorted((s, o) for (w2, s, o), v in y.items() if w2 == w and (v.value() or 0) > 0.5)
        return w, tuple(o for _, o in picks)

    def minimise(self, *, objective: Objective, reuse_only: bool, cap: float | None, cuts: list[Cut],
                 hint: Variant | None, deadline: float, workflows: tuple[int, ...], bound: float = 0.0,
                 usd_cap: float | None = None) -> Answer:
        status, x, y, _lp = self._solve_built(
            lambda b: self._build(objective=objective, reuse_only=reuse_only, cap=cap, cuts=cuts,
                                  workflows=workflows, bounds=b, usd_cap=usd_cap), {w: bound for w in workflows},
            deadline)
        if status in ("infeasible", "unknown"):
            return Answer(status)
        return Answer(status, self._variant(x, y))

    def enumerate(self, *, objective: Objective, reuse_only: bool, cap: float, cuts: list[Cut],
                  deadline: float, workflows: tuple[int, ...],
                  bounds: dict[int, float] | None = None, usd_cap: float | None = None,
                  reserve_s: float = 0.0) -> tuple[list[Variant], bool]:
        # reserve_s (the driver's evaluation cost per variant) is not needed: one HiGHS solve per
        # variant finds a handful, never thousands, and the driver stops evaluating at the deadline
        found: list[Variant] = []
        if not workflows:
            return found, True
        while True:
            more = cuts + [no_good(v) for v in found]
            status, x, y, _lp = self._solve_built(
                lambda b, more=more: self._build(objective=objective, reuse_only=reuse_only, cap=cap, cuts=more,
                                                 workflows=workflows, bounds=b, usd_cap=usd_cap), bounds, deadline)
            if status == "infeasible":
                return found, True
            if status != "optimal":
                return found, False
            found.append(self._variant(x, y))
