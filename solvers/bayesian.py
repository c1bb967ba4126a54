"""``bayesian``: black-box Bayesian optimisation over variants (the paper's Aquatope-style baseline).

Optuna's TPE sampler (multivariate, grouped, seeded) proposes one variant per trial; the
trial budget defaults to 200 sequential trials, as in the FlowMaker paper. The time limit stops
the study before a trial that would not fit (the slowest trial so far is the estimate).

Encoding. A trial first draws ``workflow`` (categorical over the workflows), then, for each
stage ``s`` of that workflow, ``w<w>.s<s>``: a categorical over the indices of that stage's
options (``selector.index`` order: reuse of each instance, then new model x config) whose
model meets the accuracy SLO; accuracy is known before any trial, so the encoding leaves out
what can never be feasible. Parameters of other workflows are not drawn (a conditional
space, which ``group=True`` lets the multivariate TPE model).

Objective and infeasible trials. A trial is evaluated with ``selector.evaluate.evaluate``.
Feasible: its cost ``M * L`` (GB*s). Infeasible: a penalty above every feasible cost,
``BIG * (1 + excess)``, where ``BIG = (free GPU memory) * latency_slo_s`` bounds every
feasible cost and ``excess`` grows with the violation (relative latency excess, capacity
overload, or 1 for a placement failure), so TPE is steered towards feasibility. Repeated
proposals reuse the cached evaluation. The answer is the section-5 best (``choose``) of the
feasible variants seen, with status ``feasible`` (never a proof). None seen after the whole
trial budget gives ``infeasible`` (its own rule found nothing; the reason says it was a
sample); none seen when the time limit stopped it first gives ``unknown`` (spec section 6).
"""
from __future__ import annotations

import time
import warnings

from selector.evaluate import CAPACITY, LATENCY, Evaluation, choose, evaluate, infeasible_plan, to_plan
from selector.index import compile_problem
from selector.plan import Plan
from selector.problem import TOL, Problem
from solvers.base import Selector, unknown_plan


class BayesianSelector(Selector):
    name = "bayesian"
    backend_modules = ("optuna",)

    def __init__(self, *, n_trials: int = 200, seed: int = 0, n_startup_trials: int = 10) -> None:
        self.n_trials = n_trials
        self.seed = seed
        self.n_startup_trials = n_startup_trials

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        import optuna

        t0 = time.perf_counter()
        cp = compile_problem(problem)
        task = problem.task
        choices = [[[i for i, o in enumerate(st.options) if o.accuracy >= task.accuracy_slo - TOL]
                    for st in wf.stages] for wf in cp.workflows]
        workflows = [w for w, stages in enumerate(choices) if all(stages)]
        if not workflows:
            why = ("variant space is empty" if cp.variant_space == 0 else
                   f"accuracy: no variant reaches accuracy_slo {task.accuracy_slo}")
            return infeasible_plan(cp, solver=self.name, reason=why, elapsed_s=time.perf_counter() - t0, evaluated=0)
        big = _penalty_scale(cp)
        seen: dict[tuple, Evaluation] = {}

        def objective(trial) -> float:
            w = trial.suggest_categorical("workflow", workflows) if len(workflows) > 1 else workflows[0]
            choice = tuple(trial.suggest_categorical(f"w{w}.s{s}", opts) for s, opts in enumerate(choices[w]))
            if (w, choice) not in seen:
                seen[w, choice] = evaluate(cp, w, choice)
            ev = seen[w, choice]
            return ev.value if ev.feasible else big * (1.0 + _excess(cp, ev))

        # ERROR: optuna logs a failed trial (Ctrl-C included) as a warning with its traceback before it
        # re-raises the error, which reaches the caller anyway: one line on Ctrl-C, not 46
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=self.seed, multivariate=True, group=True,
                                                 n_startup_trials=self.n_startup_trials)
            study = optuna.create_study(direction="minimize", sampler=sampler)
            study.optimize(objective, n_trials=self.n_trials, timeout=max(1e-3, t0 + time_limit_s - time.perf_counter()),
                           callbacks=[_Deadline(t0 + time_limit_s)])
        best = choose(e for e in seen.values() if e.feasible)
        elapsed = time.perf_counter() - t0
        extra = {"trials": len(study.trials)}
        if best is None and len(study.trials) < self.n_trials:
            return unknown_plan(cp, solver=self.name, elapsed_s=elapsed, evaluated=len(seen),
                                reason=f"time limit {time_limit_s:g} s reached after {len(study.trials)} of "
                                       f"{self.n_trials} trials, none feasible (search incomplete)")
        if best is None:
            return infeasible_plan(cp, solver=self.name, elapsed_s=elapsed, evaluated=len(seen),
                                   reason=f"bayesian: no feasible variant among {len(study.trials)} trials "
                                          f"(a sample, not a proof; an exact solver may still find one)")
        return to_plan(cp, best, status="feasible", solver=self.name, elapsed_s=elapsed, evaluated=len(seen),
                       extra=extra)


class _Deadline:
    """Optuna checks its ``timeout`` only after a trial, and a TPE trial over a long history can
    take a tenth of a second (seconds over 200 stages): stop when one and a half of the slowest
    trial so far would no longer fit."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.last = time.perf_counter()
        self.slowest = 0.0

    def __call__(self, study, trial) -> None:
        now = time.perf_counter()
        self.slowest = max(self.slowest, now - self.last)
        self.last = now
        if now + 1.5 * self.slowest > self.deadline:     # trials grow slower as the history grows
            study.stop()


def _penalty_scale(cp) -> float:
    """Above any feasible variant's objective value: 10x the free GB times the latency SLO
    (cost), or under ``usd_per_hour`` 10x every GPU priced once per stage of the longest
    workflow (a feasible ``U`` counts a GPU at most once per stage: a stage's replicas never share one)."""
    cluster, task = cp.problem.cluster, cp.problem.task
    if cp.usd:
        stages = max((len(wf.stages) for wf in cp.workflows), default=1)
        return max(1.0, stages * sum(cluster.price(g.type) for g in cluster.gpus)) * 10.0
    free = sum(g.mem_gb - g.used_gb for g in cluster.gpus)
    return max(1.0, free * task.latency_slo_s) * 10.0


def _excess(cp, ev: Evaluation) -> float:
    task = cp.problem.task
    if ev.violated == LATENCY:
        return ev.latency_s / task.latency_slo_s - 1.0
    if ev.violated == CAPACITY:
        util: dict[int, float] = {}
        for o in ev.options:
            if o.instance >= 0:
                util[o.instance] = util.get(o.instance, float(cp.base_util[o.instance])) + o.util_add
        return max(util.values()) - 1.0
    return 1.0
