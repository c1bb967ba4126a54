"""The CP-SAT model of ``solvers/joint_milp.py`` (its module docstring states the mathematics).

Built once per task set; a solve adds the cuts found so far and the incumbent's cap, the window
enumeration (``solvers/_joint_window.py``) works on a clone; the gap is ``solvers/_joint_bound.gap``. Variable keys: ``("z", k)``, ``("x", k, w)``, ``("y", k, w, s, o)``
(an option of task ``k`` on the input cluster) and ``("v", r)`` (virtual reuse ``r``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from selector.index import NEW, REUSE
from selector.joint_eval import JointRun, TaskChoice, ident
from selector.placement import free_memory
from selector.problem import TOL
from solvers._joint_bound import task_bounds
from solvers._joint_data import JointData
from solvers._joint_rows import capacity_rows, compute_rows
from solvers._cpsat import cp_solver

SCALE = 100_000
USD_EXACT = 10_000       # units per $/h when every price is a whole number of 0.0001 $/h
Cut = tuple[tuple[tuple, ...], ...]      # groups of variable keys; not every group picks one


@dataclass
class Answer:
    status: str                          # optimal | feasible | infeasible | unknown
    choice: tuple | None = None          # a joint choice (idents), or None
    literals: list | None = None         # per task, the chosen variables' keys


@dataclass(frozen=True)
class Entry:
    key: tuple
    lat: int
    mem: int
    usd: int
    kind: int                            # REUSE or NEW
    cls: tuple                           # demand class (sharing: memory)
    gpu_type: str
    ident: tuple
    exact: tuple[float, float, float] = (0.0, 0.0, 0.0)    # (memory GB, latency s, $/h) unrounded


class JointModel:
    def __init__(self, data: JointData, *, workers: int, seed: int) -> None:
        from ortools.sat.python import cp_model
        self.data, self.workers, self.seed = data, workers, seed
        ts = data.ts
        self.n = len(ts.tasks)
        self.usd = ts.objective == "usd_per_hour"
        self.smax = max(len(wf.stages) for cp in data.compiled for wf in cp.workflows)
        free = free_memory(ts.cluster)
        self.free_total = sum(free.values())
        self.lat_max = max(p.task.latency_slo_s for p in ts.tasks) + TOL
        self.util_scale = SCALE           # units per unit of utilisation
        self.ls = SCALE / self.lat_max
        self.ms = SCALE / max(self.free_total + TOL, 1e-6)
        prices = ts.cluster.prices or {}
        top = max(prices.values(), default=1.0) * max(1, len(ts.cluster.gpus)) * self.smax
        self.ps = SCALE / top
        # dollars whole in USD_EXACT units (0.0001 $/h) are summed without rounding: the cost
        # window then holds exact ties only, and the latency phase of the window is exact
        self.usd_exact = self.usd and all(abs(v * USD_EXACT - round(v * USD_EXACT)) < 1e-6 for v in prices.values())
        if self.usd_exact:
            self.ps = float(USD_EXACT)
        self.slack = self.smax / 2 + 1e-6
        self.entries = self._entries()
        self.task_widening = self._task_widening()
        alive = {key: [e.key for e in lst] for key, lst in self.entries.items()}
        self.task_lb = [max(0.0, b * (1 - 1e-12)) for b in task_bounds(data, alive, self.usd)]
        self.m = cp_model.CpModel()
        self._build()
        self.last_choice: list[TaskChoice | None] = []
        self._bound: float | None = None
        self._served_bound: int | None = None

    # -- data -------------------------------------------------------------------------------
    def _entries(self) -> dict[tuple[int, int, int], list[Entry]]:
        d = self.data
        out: dict[tuple[int, int, int], list[Entry]] = {}
        for k, cp in enumerate(d.compiled):
            for w, wf in enumerate(cp.workflows):
                for s, keep in enumerate(d.options[k][w]):
                    st = wf.stages[s]
                    lst = out.setdefault((k, w, s), [])
                    for o in keep:
                        op = st.options[o]
                        gtype = op.gpu_type
                        mem = op.replicas * op.mem_gb if op.kind == NEW else 0.0
                        usd = op.usd_per_hour if op.kind == NEW else 0.0
                        cls = ("reuse",) if op.kind == REUSE else ("new", op.replicas, op.shards, op.mem_gb, gtype)
                        lst.append(Entry(("y", k, w, s, o), round(st.calls * op.latency_s * self.ls),
                                         round(mem * self.ms), round(usd * self.ps), op.kind, cls, gtype,
                                         ident(cp, op), (mem, st.calls * op.latency_s, usd)))
        for r, vr in enumerate(d.virtual_reuse):
            if (vr.task, vr.workflow, vr.stage) in out:
                out[vr.task, vr.workflow, vr.stage].append(
                    Entry(("v", r), round(vr.latency_s * self.ls), 0, 0, REUSE, ("reuse",), vr.virtual.gpu_type,
                          ("reuse", vr.virtual.id), (0.0, vr.latency_s, 0.0)))
        # a workflow with a stage that has no option cannot be chosen, nor a virtual reuse whose
        # creator cannot be: drop both until nothing changes
        while True:
            dead = {(k, w) for (k, w, s), lst in out.items() if not lst}
            dead |= {(k, w) for k, cp in enumerate(d.compiled) for w, wf in enumerate(cp.workflows)
                     if any((k, w, s) not in out for s in range(len(wf.stages)))}
            out = {key: lst for key, lst in out.items() if key[:2] not in dead}
            live = {e.key for lst in out.values() for e in lst}
            pruned = {key: [e for e in lst if e.key[0] == "y" or
                            ("y", *d.virtual_reuse[e.key[1]].virtual.creator) in live] for key, lst in out.items()}
            if sum(map(len, pruned.values())) == sum(map(len, out.values())):
                return out
            out = pruned

    # -- model ------------------------------------------------------------------------------
    def _build(self) -> None:
        d, m, ts = self.data, self.m, self.data.ts
        self.var: dict[tuple, object] = {}
        for k in range(self.n):
            self.var["z", k] = m.new_bool_var(f"z[{k}]")
        for (k, w, s), lst in self.entries.items():
            if ("x", k, w) not in self.var:
                self.var["x", k, w] = m.new_bool_var(f"x[{k},{w}]")
            for e in lst:
                self.var[e.key] = m.new_bool_var(str(e.key))
        v = self.var
        # for reading answers: per task its workflow literals, per (task, workflow) its stages' entries
        self._workflow_vars: dict[int, list] = {k: [] for k in range(self.n)}
        self._stage_vars: dict[tuple[int, int], list] = {}
        for key, x in v.items():
            if key[0] == "x":
                k, w = key[1:]
                self._workflow_vars[k].append((w, x))
                self._stage_vars[k, w] = [[(e, v[e.key]) for e in self.entries[k, w, s]]
                                          for s in range(self.data.stages(k, w))]
        # one workflow or skip; one option per stage of the chosen workflow
        for k in range(self.n):
            m.add(v["z", k] + sum(x for _, x in self._workflow_vars[k]) == 1)
        for (k, w, s), lst in self.entries.items():
            m.add(sum(v[e.key] for e in lst) == v["x", k, w])
        # a virtual reuse needs its creator
        for r, vr in enumerate(d.virtual_reuse):
            if ("v", r) in v:
                m.add_implication(v["v", r], v[("y", *vr.virtual.creator)])
        self._latency_memory_cost()
        capacity_rows(self)
        if ts.cluster.compute:
            compute_rows(self)

    def _terms(self, k: int, attr: str) -> list:
        return [getattr(e, attr) * self.var[e.key] for (k2, _, _), lst in self.entries.items() if k2 == k
                for e in lst if getattr(e, attr)]

    def _latency_memory_cost(self) -> None:
        m, ts = self.m, self.data.ts
        self.mem_ub = math.floor((self.free_total + TOL) * self.ms + self.slack)
        self.cost: list = []
        self.cost_ub = 0
        self.ints: dict[int, tuple] = {}
        self.products: dict[tuple[int, int], tuple] = {}     # (k, w) of a longer workflow -> M, L, P
        for k, p in enumerate(ts.tasks):
            lat_ub = math.floor((p.task.latency_slo_s + TOL) * self.ls + self.slack)
            lk = m.new_int_var(0, lat_ub, f"L[{k}]")
            m.add(lk == sum(self._terms(k, "lat")))
            if self.usd:
                ub = sum(max((e.usd for (k2, w, s), lst in self.entries.items() if k2 == k for e in lst), default=0)
                         for _ in range(self.smax))
                uk = m.new_int_var(0, max(ub, 0), f"U[{k}]")
                m.add(uk == sum(self._terms(k, "usd")))
                self.ints[k] = (lk, uk)
                self.cost.append(uk)
                self.cost_ub += ub
                continue
            pk = m.new_int_var(0, lat_ub * self.mem_ub, f"P[{k}]")
            m.add(pk == sum(self._workflow_products(k, lat_ub)))
            self.ints[k] = (lk, pk)
            self.cost.append(pk)
            self.cost_ub += lat_ub * self.mem_ub
        self._task_lower_bounds()
        # necessary for placement: all tasks' new memory fits the free memory, per GPU type
        free_by_type: dict[str, float] = {}
        for g in ts.cluster.gpus:
            free_by_type[g.type] = free_by_type.get(g.type, 0.0) + g.mem_gb - g.used_gb
        all_slack = self.n * self.slack
        for t, free in free_by_type.items():
            terms = [e.mem * self.var[e.key] for lst in self.entries.values() for e in lst if e.mem and e.gpu_type == t]
            if terms:
                m.add(sum(terms) <= math.floor((free + TOL) * self.ms + all_slack))

    def _workflow_products(self, k: int, lat_ub: int) -> list:
        """``P[k]`` as a sum over task ``k``'s workflows (all but the chosen one are 0): a one-stage
        workflow's product is linear in its options (``mem_o lat_o y_o``, exact, so the LP is
        tight there); a longer one gets ``P[k, w] = M[k, w] * L[k, w]`` with the rows of
        :meth:`_product_bounds`. On integer points the sum is ``M[k] * L[k]``."""
        out = []
        for w in sorted({w for (k2, w, _) in self.entries if k2 == k}):
            lists = [self.entries[k, w, s] for s in range(self.data.stages(k, w))]
            if len(lists) == 1:
                out.extend(e.mem * e.lat * self.var[e.key] for e in lists[0] if e.mem and e.lat)
                continue
            mkw = self.m.new_int_var(0, self.mem_ub, f"M[{k},{w}]")
            lkw = self.m.new_int_var(0, lat_ub, f"L[{k},{w}]")
            self.m.add(mkw == sum(e.mem * self.var[e.key] for lst in lists for e in lst if e.mem))
            self.m.add(lkw == sum(e.lat * self.var[e.key] for lst in lists for e in lst if e.lat))
            pkw = self.m.new_int_var(0, lat_ub * self.mem_ub, f"P[{k},{w}]")
            self.m.add_multiplication_equality(pkw, [mkw, lkw])
            self._product_bounds(k, w, pkw)
            self.products[k, w] = (mkw, lkw, pkw)
            out.append(pkw)
        return out
    def _task_lower_bounds(self) -> None:
        """``C_k >= task_lb[k]`` when task ``k`` is served (``solvers/_joint_bound.py``), in units."""
        scale = self.ps if self.usd else self.ms * self.ls
        for k, ck in enumerate(self.cost):
            lb = math.floor((self.task_lb[k] - self.task_widening[k]) * scale) if math.isfinite(self.task_lb[k]) else 0
            if lb > 0:
                self.m.add(ck + lb * self.var["z", k] >= lb)

    def _product_bounds(self, k: int, w: int, pk) -> None:
        """Linear rows that the exact product implies, for a useful LP bound: with ``Lmin(o)`` the
        least latency (units) of a variant using option ``o`` and ``Mmin(o)`` its least memory,
        ``P = sum_o mem_o y_o L >= sum_o mem_o Lmin(o) y_o`` and likewise ``P >= sum_o lat_o Mmin(o) y_o``."""
        rows: tuple[list, list] = ([], [])
        for (k2, w2, s), lst in self.entries.items():
            if (k2, w2) != (k, w):
                continue
            others = [self.entries[k, w, t] for t in range(self.data.stages(k, w)) if t != s]
            lat_rest = sum(min(e.lat for e in o) for o in others)
            mem_rest = sum(min(e.mem for e in o) for o in others)
            for e in lst:
                if e.mem:
                    rows[0].append(e.mem * (e.lat + lat_rest) * self.var[e.key])
                if e.lat and e.mem + mem_rest:
                    rows[1].append(e.lat * (e.mem + mem_rest) * self.var[e.key])
        for row in rows:
            if row:
                self.m.add(pk >= sum(row))

    # -- rounding ---------------------------------------------------------------------------
    def widening(self) -> float:
        """Bound on ``|sum units / scale - exact total|`` over all tasks (GB*s or $/h)."""
        return sum(self.task_widening)

    def _task_widening(self) -> list[float]:
        """Per task, the bound on ``|units / scale - C_k|``: under ``gb_s``, with ``e`` the rounding
        of a sum of stage terms (``slack`` units), ``|M'L' - ML| <= M e_L + L e_M + e_L e_M`` with
        ``M`` at most the task's largest memory (and the free memory) and ``L`` at most its SLO."""
        if self.usd:
            return [0.0 if self.usd_exact else self.slack / self.ps] * self.n
        e_lat, e_mem = self.slack / self.ls, self.slack / self.ms
        out = []
        for k, p in enumerate(self.data.ts.tasks):
            per_wf: dict[int, float] = {}
            for (k2, w, _), lst in self.entries.items():
                if k2 == k:
                    per_wf[w] = per_wf.get(w, 0.0) + max(e.mem for e in lst) / self.ms + e_mem
            mem = min(self.free_total + TOL, max(per_wf.values(), default=0.0))
            lat = p.task.latency_slo_s + TOL + e_lat
            out.append(mem * e_lat + lat * e_mem + e_lat * e_mem)
        return out

    def _units(self, cost: float) -> int:
        scale = self.ps if self.usd else self.ms * self.ls
        if self.usd_exact:
            return math.floor(cost * scale + 1e-6)
        return math.floor((cost + self.widening()) * scale) + 1

    # -- cuts ---------------------------------------------------------------------------------
    def no_good(self, literals: list[list[tuple]]) -> Cut:
        return tuple((key,) for lits in literals for key in lits)

    def class_cuts(self, f: int, fail: int, classes: list[tuple]) -> list[Cut]:
        groups: list[tuple] = []
        for j in range(f):
            lits = self._last_literals[j]
            if lits == [("z", j)]:
                groups.append((("z", j),))
                continue
            w = lits[0][2] if lits[0][0] == "y" else self.data.virtual_reuse[lits[0][1]].workflow
            for s, key in enumerate(lits):
                want = self._entry[key].cls
                groups.append(tuple(e.key for e in self.entries[j, w, s] if e.cls == want))
        cuts = []
        for w in range(len(self.data.compiled[f].workflows)):
            if (f, w, fail) not in self.entries:
                continue
            mine = [tuple(e.key for e in self.entries[f, w, s] if e.cls == classes[s]) for s in range(fail + 1)]
            if all(mine):
                cuts.append(tuple(groups) + tuple(mine))
        return cuts

    def _add_cuts(self, m, cuts: list[Cut]) -> None:
        for cut in cuts:
            m.add(sum(self.var[k] for grp in cut for k in grp) <= len(cut) - 1)

    # -- solving ----------------------------------------------------------------------------
    def _solver(self, deadline: float, workers: int):
        # probing the thousands of reuse literals costs seconds and gains little here
        return cp_solver(deadline, workers, self.seed, probing_level=0)

    def _read(self, value) -> tuple[tuple, list[list[tuple]]]:
        choice, literals = [], []
        for k in range(self.n):
            if value(self.var["z", k]):
                choice.append(None)
                literals.append([("z", k)])
                continue
            w = next(w for w, x in self._workflow_vars[k] if value(x))
            picks = [next(e for e, y in stage if value(y)) for stage in self._stage_vars[k, w]]
            choice.append((w, tuple(e.ident for e in picks)))
            literals.append([e.key for e in picks])
        return tuple(choice), literals

    def exact_cost(self, literals: list[list[tuple]]) -> float:
        """The unrounded total cost of a relaxed choice (per task ``M*L`` or ``U``), as evaluation
        computes it up to the order of the float sums."""
        total = 0.0
        for lits in literals:
            picked = [self._entry[key].exact for key in lits if key in self._entry]
            if self.usd:
                total += sum(t[2] for t in picked)
            else:
                total += sum(t[0] for t in picked) * sum(t[1] for t in picked)
        return total

    @property
    def _entry(self) -> dict[tuple, Entry]:
        if not hasattr(self, "_entry_map"):
            self._entry_map = {e.key: e for lst in self.entries.values() for e in lst}
        return self._entry_map

    def most_served(self, *, cuts: list[Cut], incumbent: JointRun, deadline: float) -> int | None:
        """The most tasks the relaxation can serve (proved), or None when the limit came first."""
        from ortools.sat.python import cp_model
        if incumbent.served == self.n:
            return self.n
        m = self.m.clone()
        self._hint(m, incumbent)
        self._add_cuts(m, cuts)
        skips = sum(self.var["z", k] for k in range(self.n))
        m.minimize(skips)
        solver = self._solver(deadline, self.workers)
        if solver.solve(m) != cp_model.OPTIMAL:
            return None
        return self.n - round(solver.objective_value)

    def minimise(self, *, cuts: list[Cut], served: int, incumbent: JointRun, deadline: float) -> Answer:
        """The least total cost (units) among relaxed choices serving exactly ``served`` tasks (the
        most the relaxation serves, from :meth:`most_served`); capped at the incumbent's when it
        serves as many. Two solves instead of one weighted objective: the cost LP is then not
        drowned by the weight of the skips."""
        from ortools.sat.python import cp_model
        m = self.m.clone()
        self._add_cuts(m, cuts)
        m.add(sum(self.var["z", k] for k in range(self.n)) == self.n - served)
        if incumbent.served == served:
            m.add(sum(self.cost) <= self._units(incumbent.total_cost))
            self._hint(m, incumbent)
        m.minimize(sum(self.cost))
        solver = self._solver(deadline, self.workers)
        status = solver.solve(m)
        self._served_bound = served
        if status == cp_model.INFEASIBLE:
            return Answer("infeasible")
        if math.isfinite(solver.best_objective_bound):     # a proved bound, also at the limit
            self._bound = solver.best_objective_bound
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Answer("unknown")
        choice, literals = self._read(solver.boolean_value)
        self.last_choice, self._last_literals = list(choice), literals
        return Answer("optimal" if status == cp_model.OPTIMAL else "feasible", choice, literals)

    def _hint(self, m, inc: JointRun) -> None:
        want = set()
        for k, c in enumerate(inc.choice):
            if c is None:
                want.add(("z", k))
                continue
            w, idents = c
            want.add(("x", k, w))
            for s, idt in enumerate(idents):
                e = next((e for e in self.entries.get((k, w, s), ()) if e.ident == idt and
                          (e.key[0] == "y" or ("y", *self.data.virtual_reuse[e.key[1]].virtual.creator) in want)), None)
                if e is None:
                    return
                want.add(e.key)
        for key, var in self.var.items():
            m.add_hint(var, key in want)
        for k, ints in self.ints.items():      # L, P (or L, U) of the hinted choice, so the hint is complete
            picked = [self._entry[key] for key in want if key in self._entry and
                      (key[1] == k if key[0] == "y" else self.data.virtual_reuse[key[1]].task == k)]
            lat = sum(e.lat for e in picked)
            mem = sum(e.mem for e in picked)
            m.add_hint(ints[0], lat)
            m.add_hint(ints[1], sum(e.usd for e in picked) if self.usd else lat * mem)
            for (k2, w), prod in self.products.items():
                if k2 == k:
                    on = ("x", k, w) in want
                    for var, val in zip(prod, (mem, lat, lat * mem), strict=True):
                        m.add_hint(var, val if on else 0)
