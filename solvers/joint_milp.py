"""``milp``: the joint optimum of a task set (spec section 11) from one CP-SAT model of all tasks,
with LeastLoaded checked lazily as the single-task ``milp`` does (``solvers/_exact.py``).

* Data (``solvers/_joint_data.py``): per task, its usable options on the input cluster, and the
  reuse of earlier tasks' new replicas (*virtual instances*). Floats become integers with one
  scale per quantity shared by all tasks, so the per-task terms add up::

      LAT_SCALE = SCALE / max_k latency_slo_s      # units per second
      MEM_SCALE = SCALE / free GPU memory           # units per GB
      UTIL_SCALE = SCALE                            # units per unit of utilisation
      USD_SCALE = SCALE / (GPUs x max price x stages)  # units per $/h (usd_per_hour)

* Variables: ``z[k]`` (task ``k`` skipped), ``x[k, w]`` (workflow), ``y[k, w, s, o]`` (an option on
  the input cluster), ``v[r]`` (virtual reuse ``r``), and per task ``L[k]`` and ``P[k] = M[k] * L[k]``
  (``gb_s``; a sum over the task's workflows: linear ``mem_o lat_o y_o`` for a one-stage workflow,
  ``M[k, w] * L[k, w]`` for a longer one) or ``U[k]`` (``usd_per_hour``).
* Constraints:
  - ``z[k] + sum_w x[k, w] = 1``; per stage ``sum y + sum v = x[k, w]``
  - a virtual reuse needs its creator: ``v[r] <= y[creator]``
  - latency (2) per task: ``L[k] = sum lat (y + v) <= (slo_k + 1e-9) LAT_SCALE + S/2``
  - reuse capacity (3), over all tasks: per input instance ``i``, ``sum util y <= 1 - u_i``; per
    virtual instance, ``sum util v <= (1 - u_v) y[creator]`` (section 8 adds every task's load; the
    last task to reuse an instance checks them all; the creator's literal tightens the LP)
  - placement, necessary: ``sum_k M[k] <= free`` (per GPU type, section 10); under ``sharing:
    compute`` the per-task reuse rows of ``_exact.reuse_by_gpu`` and all the utilisation the set
    adds ``<= sum_g max(0, 1 - busy_g)`` (every GPU a task touches ends at most 1)
  - lazy cuts (below); every bound widened by its rounding error, so the model relaxes the spec.
* Objective, lexicographic in two solves: the most tasks the relaxation serves (``min sum z``),
  then, with ``sum z`` fixed there, the least ``sum_k P[k]`` (or ``U[k]``).
* Lazy placement cuts: each answer is evaluated exactly (``selector.joint_eval.run_choice``). If
  task ``f`` fails LeastLoaded at stage ``j``, then under ``sharing: memory`` every choice in which
  each earlier task picks the same workflow with the same demand class per stage (reuse of any
  instance, or new with the same replicas, shards, memory and GPU type; ``skip`` as it was) and
  task ``f`` the same classes at stages ``1..j`` (in any workflow) fails the same way: cut them
  all. Under ``sharing: compute``, or when a check fails only through rounding, an exact no-good
  over tasks ``1..f``.
* Ties: with the best exact answer (``S`` served, total ``c``), every choice serving ``S`` with
  total cost within ``c + 1e-9 max(1, c)`` (plus the rounding error) is enumerated
  (``enumerate_all_solutions``, at most ``enumerate_max``), evaluated exactly (within the time
  limit), and ``choose_joint`` picks the unique optimum. Under ``usd_per_hour`` with prices whole in
  0.0001 $/h the dollars are summed exactly, so that window holds exact cost ties only (many: GPU
  counts tie often); a latency phase first finds an exactly feasible member of least total latency
  and the enumeration keeps to the latency window above it as well.
* Warm start: the joint ``sequential`` answer (public registry) is the first incumbent and hint;
  then, before the first cost solve, the model restricted to each task's workflows of fewest
  stages (``solvers/_joint_quick.py``: small, solved in hundredths of a second) gives a better
  one when its answer is exactly feasible. The cost solve then mostly proves (for the seven
  tasks: about 1/8 of the search time it took from the greedy's hint). Every run of the answer
  shares one memo of evaluated prefixes (``run_choice``'s ``memo``).

Status ``optimal`` only when every solve proved its answer and the window enumeration finished;
otherwise the best exact answer is ``feasible`` with ``gap`` (relative, from the larger of CP-SAT's
bound and the sum of the served tasks' own cost bounds, ``solvers/_joint_bound.py``).

Time: the limit bounds the whole answer. The searches (warm start, model build, cut rounds, tie
window) stop ``min(10% of the limit, ANSWER_S + ANSWER_PER_TASK_S * tasks)`` before it; the rest
is kept for the plans and the skip reasons (``joint_base.finish`` with ``end``).
"""
from __future__ import annotations

import time

from selector.evaluate import placement as ll_placement
from selector.index import NEW, REUSE, compile_problem
from selector.joint import TaskSet
from selector.joint_eval import JointPlan, JointRun, Memo, choice_from_plan, choose_joint, indices, run_choice
from solvers._joint_bound import gap
from solvers._joint_data import JointData, prepare_joint
from solvers._joint_model import JointModel
from solvers._joint_quick import quick_incumbent
from solvers._joint_window import enumerate_window, least_latency
from solvers.joint_base import JointSelector, better, finish


#: time kept from the limit for the answer: a fixed part and a part per task (at most 10% of the limit)
ANSWER_S = 0.2
ANSWER_PER_TASK_S = 0.03


class MilpJoint(JointSelector):
    name = "milp"
    exact = True

    def __init__(self, *, warm_start: bool = True, warm_share: float = 0.3, workers: int | None = None,
                 seed: int = 0, enumerate_max: int = 20_000, quick: bool = True) -> None:
        import os
        self.quick = quick
        self.warm_start = warm_start
        self.warm_share = warm_share
        self.workers = workers or max(1, min(8, os.cpu_count() or 1))
        self.seed = seed
        self.enumerate_max = enumerate_max

    def _select(self, task_set: TaskSet, time_limit_s: float) -> JointPlan:
        t0 = time.perf_counter()
        end = t0 + time_limit_s
        # the searches stop at `deadline`; what is left is kept for the answer (plans, skip reasons)
        deadline = end - min(0.1 * time_limit_s, ANSWER_S + ANSWER_PER_TASK_S * len(task_set.tasks))
        ts = task_set
        memo: Memo = {}          # every run below shares the evaluation of common prefixes
        inc = run_choice(ts, [None] * len(ts.tasks), memo)
        if self.warm_start:
            from solvers.joint_registry import get_joint_solver
            warm = get_joint_solver("sequential").select(ts, time_limit_s=time_limit_s * self.warm_share)
            inc = run_choice(ts, choice_from_plan(ts, warm), memo)
        extra: dict = {"solves": 0, "cuts": 0}
        model = None
        if time.perf_counter() < deadline:
            model = JointModel(prepare_joint(ts), workers=self.workers, seed=self.seed)
        if model is None or time.perf_counter() >= deadline:
            extra.update(gap(model, inc) if model else {"gap": None})
            return finish(ts, inc, solver=self.name, t0=t0, proved=False, extra=extra, end=end)
        proved, inc = self._search(ts, model, inc, deadline, extra, memo)
        if proved:
            runs, complete = self._window(ts, model, extra.pop("_cuts"), inc, deadline, memo)
            inc = choose_joint([inc, *runs])
            proved = complete
            if not complete:        # served and total proved; the tie-breaks among equals not settled
                extra.update({"served_bound": inc.served, "gap": 0.0, "ties": "unsettled"})
        else:
            extra.pop("_cuts")
            extra.update(gap(model, inc))
        return finish(ts, inc, solver=self.name, t0=t0, proved=proved, extra=extra, end=end)

    def _search(self, ts: TaskSet, model: JointModel, inc: JointRun, deadline: float,
                extra: dict, memo: Memo) -> tuple[bool, JointRun]:
        """The lazy-cut rounds: (proved, the best exact run); counts and the cuts go to ``extra``."""
        proved, cuts = True, []
        while True:
            most = model.most_served(cuts=cuts, incumbent=inc, deadline=deadline)
            if most is None:
                proved = False
                break
            if self.quick and not extra["solves"]:
                inc = quick_incumbent(ts, model, cuts=cuts, served=most, incumbent=inc, deadline=deadline, memo=memo)
            ans = model.minimise(cuts=cuts, served=most, incumbent=inc, deadline=deadline)
            extra["solves"] += 2
            if ans.choice is None:      # "infeasible" cannot happen: `most` is served by some relaxed choice
                proved = False
                break
            run = run_choice(ts, ans.choice, memo)
            if run.feasible:
                if better(run, inc):
                    inc = run
                proved = proved and ans.status == "optimal"
                break
            cuts.extend(failure_cuts(model.data, model, ans.literals, run))
            if time.perf_counter() > deadline:
                proved = False
                break
        extra.update({"cuts": len(cuts), "_cuts": cuts})
        return proved, inc

    def _window(self, ts: TaskSet, model: JointModel, cuts, inc: JointRun, deadline: float, memo: Memo):
        """Every exactly feasible choice that can tie ``inc`` (module docstring, "Ties"). With exact
        dollar units the cost window holds exact ties only, so a latency phase first finds a
        member of least latency and the enumeration keeps to the latency window too."""
        latency, extra = None, []
        if model.usd_exact:
            while True:
                ans = least_latency(model, cuts=cuts, served=inc.served, cost=inc.total_cost, deadline=deadline)
                if ans.choice is None or ans.status != "optimal":
                    return [], False
                run = run_choice(ts, ans.choice, memo)
                if run.feasible:
                    latency, extra = run.total_latency_s, [run]
                    break
                cuts.extend(failure_cuts(model.data, model, ans.literals, run))
        choices, complete = enumerate_window(model, cuts=cuts, served=inc.served, cost=inc.total_cost,
                                             deadline=deadline, limit=self.enumerate_max, latency=latency)
        runs = list(extra)
        for c in choices:
            if time.perf_counter() > deadline:
                return runs, False
            run = run_choice(ts, c, memo)
            if run.feasible:
                runs.append(run)
        return runs, complete


def failure_cuts(data: JointData, model: JointModel, literals: list[list], run: JointRun) -> list:
    """Cuts for a relaxed answer whose task ``run.failed`` is infeasible (module docstring)."""
    f = run.failed
    ts = data.ts
    if run.violated in ("accuracy", "latency"):
        return [model.no_good(literals[f:f + 1])]
    if run.violated != "placement" or ts.cluster.compute:
        return [model.no_good(literals[: f + 1])]
    cp = compile_problem(ts.on(f, run.cluster))
    choice = model.last_choice[f]
    opts = [cp.workflows[choice[0]].stages[s].options[o] for s, o in enumerate(indices(cp, choice))]
    fail = next((j for j, o in enumerate(opts) if o.kind == NEW and ll_placement(cp, opts[: j + 1]) is None),
                len(opts) - 1)
    return model.class_cuts(f, fail, [demand_class(o) for o in opts[: fail + 1]])


def demand_class(o) -> tuple:
    """What LeastLoaded sees of an option under ``sharing: memory``."""
    return ("reuse",) if o.kind == REUSE else ("new", o.replicas, o.shards, o.mem_gb, o.gpu_type)

