"""Evaluating a joint choice under section 8's semantics and choosing the unique optimum (spec
section 11), and the joint answer's JSON.

A *joint choice* gives, per task in list order, ``None`` (``skip``) or a :data:`TaskChoice`:
``(workflow index, option ident per stage)``, where an option ident is ``("reuse", instance
id)`` or ``("new", model index, config index)``. Idents, unlike option indices, do not depend
on the cluster a task sees (a reuse names its instance by id, and earlier tasks' new instances
keep their ids), so one choice means the same thing whatever the earlier tasks chose.

:func:`run_choice` evaluates a choice task by task: task ``k`` is compiled on the cluster tasks
``1..k-1`` left (``selector.index.compile_problem``), its variant is evaluated by
``selector.evaluate.evaluate`` (sections 3-4, 9, 10) and, when feasible, applied with the
plan's :class:`~selector.deployment.Deployment` (section 8). Every solver's answer goes
through it, so the numbers and the cluster an answer reports are computed in one place.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from selector.evaluate import Evaluation, evaluate, to_plan, variant_of
from selector.index import NEW, Compiled, Option, compile_problem
from selector.joint import TaskSet
from selector.plan import Plan
from selector.problem import TOL, Cluster, Problem, objective_value

Ident = tuple
TaskChoice = tuple[int, tuple[Ident, ...]]
JointChoice = tuple[TaskChoice | None, ...]
#: section 11: ``skip`` sorts after every variant of its task (a variant key starts with an int)
SKIP_KEY = (math.inf,)


def ident(cp: Compiled, o: Option) -> Ident:
    """The cluster-independent name of an option (module docstring)."""
    if o.kind == NEW:
        return ("new", o.model, o.config)
    return ("reuse", cp.problem.cluster.instances[o.instance].id)


def task_cost(ev: Evaluation, objective: str) -> float:
    """``C_k`` of section 11: section 5's ``cost`` (GB*s) or section 10's ``U`` ($/h)."""
    return objective_value(objective, ev.cost_gb_s, ev.usd_per_hour)


def choice_of(cp: Compiled, ev: Evaluation) -> TaskChoice:
    """The :data:`TaskChoice` of an evaluated variant."""
    return ev.workflow, tuple(ident(cp, o) for o in ev.options)


def indices(cp: Compiled, choice: TaskChoice) -> tuple[int, ...] | None:
    """Option indices of ``choice`` in ``cp`` (None when an option does not exist there, e.g. a
    reuse of an instance this cluster does not hold)."""
    w, ids = choice
    out = []
    for st, want in zip(cp.workflows[w].stages, ids, strict=True):
        k = next((i for i, o in enumerate(st.options) if ident(cp, o) == want), None)
        if k is None:
            return None
        out.append(k)
    return tuple(out)


def apply(cp: Compiled, ev: Evaluation, cluster: Cluster) -> Cluster:
    """The cluster after task ``cp`` deploys the feasible variant ``ev`` (section 8)."""
    plan = to_plan(cp, ev, status="feasible", solver="", elapsed_s=0.0, evaluated=0)
    return plan.deployment.apply(cluster)


@dataclass(frozen=True)
class Step:
    """One task of a run: the task on the cluster it saw, compiled, and its evaluation (None: skipped)."""

    problem: Problem
    compiled: Compiled
    evaluation: Evaluation | None


@dataclass(frozen=True)
class JointRun:
    """A joint choice evaluated by section 8; ``failed``: the first task whose variant is not
    feasible on the cluster it saw (``violated`` names the constraint), the run stops there."""

    steps: tuple[Step, ...]
    cluster: Cluster
    objective: str
    failed: int | None = None
    violated: str | None = None

    @property
    def feasible(self) -> bool:
        return self.failed is None

    @property
    def served(self) -> int:
        return sum(s.evaluation is not None for s in self.steps)

    @property
    def total_cost(self) -> float:
        return sum(task_cost(s.evaluation, self.objective) for s in self.steps if s.evaluation is not None)

    @property
    def total_latency_s(self) -> float:
        return sum(s.evaluation.latency_s for s in self.steps if s.evaluation is not None)

    @property
    def total_gpus(self) -> int:
        return sum(s.evaluation.new_gpus for s in self.steps if s.evaluation is not None)

    @property
    def key(self) -> tuple:
        return tuple(SKIP_KEY if s.evaluation is None else s.evaluation.key for s in self.steps)

    @property
    def choice(self) -> JointChoice:
        return tuple(None if s.evaluation is None else choice_of(s.compiled, s.evaluation) for s in self.steps)


def place(p: Problem, plan: Plan, cluster: Cluster) -> tuple[TaskChoice, Cluster]:
    """One task's solved single-task ``plan`` (for ``p``, the task on ``cluster``) placed: its choice
    and the cluster it leaves (the step of section 8's greedy that the joint solvers repeat)."""
    cp = compile_problem(p)
    ev = evaluate(cp, *variant_of(cp, plan))
    return choice_of(cp, ev), apply(cp, ev, cluster)


#: prefixes already evaluated: ``choice[:k]`` -> (its steps, the cluster after them, task ``k``
#: on that cluster and compiled)
Memo = dict[tuple, tuple[tuple[Step, ...], Cluster, Problem, Compiled]]


def run_choice(ts: TaskSet, choice: Sequence[TaskChoice | None], memo: Memo | None = None) -> JointRun:
    """Evaluate ``choice`` (one entry per task) by section 8 (module docstring). ``memo``: shared by
    calls on the same ``ts`` (e.g. the many tie candidates of one answer), so that a prefix of
    tasks is compiled and evaluated once; the run is the same with or without it."""
    choice = tuple(choice)
    memo = {} if memo is None else memo
    start = next((k for k in range(len(choice) - 1, -1, -1) if choice[:k] in memo), 0)
    steps: list[Step] = list(memo[choice[:start]][0]) if choice[:start] in memo else []
    cluster = memo[choice[:start]][1] if choice[:start] in memo else ts.cluster
    for k in range(start, len(choice)):
        c = choice[k]
        if choice[:k] in memo:
            _, _, p, cp = memo[choice[:k]]
        else:
            p = ts.on(k, cluster)
            cp = compile_problem(p)
            memo[choice[:k]] = (tuple(steps), cluster, p, cp)
        if c is None:
            steps.append(Step(p, cp, None))
            continue
        idx = indices(cp, c)
        if idx is None:
            return JointRun(tuple(steps), cluster, ts.objective, k, "reuse of an instance the cluster does not hold")
        ev = evaluate(cp, c[0], idx)
        if not ev.feasible:
            return JointRun(tuple(steps), cluster, ts.objective, k, ev.violated)
        steps.append(Step(p, cp, ev))
        cluster = apply(cp, ev, cluster)
    return JointRun(tuple(steps), cluster, ts.objective)


def choose_joint(cands: Iterable[JointRun]) -> JointRun | None:
    """Section 11's unique optimum among feasible runs: most served, then least total cost, least
    total latency (each within ``1e-9 * max(1, min)``), fewest new GPUs, first key."""
    runs = [r for r in cands if r.feasible]
    if not runs:
        return None
    most = max(r.served for r in runs)
    runs = [r for r in runs if r.served == most]
    for attr in ("total_cost", "total_latency_s"):
        low = min(getattr(r, attr) for r in runs)
        runs = [r for r in runs if getattr(r, attr) <= low + TOL * max(1.0, low)]
    fewest = min(r.total_gpus for r in runs)
    return min((r for r in runs if r.total_gpus == fewest), key=lambda r: r.key)


# -- the answer ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class JointPlan:
    """Section 11's output. Units: ``total_cost`` GB*s (``gb_s``) or $/h (``usd_per_hour``),
    ``total_latency_s`` s (sum over served tasks), ``elapsed_s`` wall seconds."""

    status: str
    solver: str
    objective: str
    served: int
    total_cost: float
    total_latency_s: float
    elapsed_s: float
    plans: tuple[Plan, ...]
    cluster: Cluster
    extra: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return {"status": self.status, "solver": self.solver, "objective": self.objective, "served": self.served,
                "total_cost": self.total_cost, "total_latency_s": self.total_latency_s,
                "elapsed_s": self.elapsed_s, **self.extra, "plans": [p.to_dict() for p in self.plans],
                "cluster": self.cluster.model_dump(mode="json")}

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)


SkipReason = Callable[[Problem], "str | None"]


def joint_plan(ts: TaskSet, run: JointRun, *, status: str, solver: str, elapsed_s: float,
               skip_reason: SkipReason, evaluated: int = 0, extra: dict | None = None) -> JointPlan:
    """The answer for a feasible ``run``. ``skip_reason(problem)``: section 6's infeasibility reason
    of a skipped task on the cluster it saw, or None when some variant of it is feasible there
    (the reason is then ``"not chosen"``)."""
    plans = []
    for s in run.steps:
        if s.evaluation is None:
            why = skip_reason(s.problem) or "not chosen"
            plans.append(Plan(status="skipped", solver=solver, task=s.problem.task.name, reason=why,   # type: ignore[arg-type]
                              variant_space=s.compiled.variant_space, elapsed_s=elapsed_s))
        else:
            plans.append(to_plan(s.compiled, s.evaluation, status=status, solver=solver, elapsed_s=elapsed_s,
                                 evaluated=evaluated))
    return JointPlan(status=status, solver=solver, objective=ts.objective, served=run.served,
                     total_cost=run.total_cost, total_latency_s=run.total_latency_s, elapsed_s=elapsed_s,
                     plans=tuple(plans), cluster=run.cluster, extra=extra or {})


def choice_from_plan(ts: TaskSet, plan: JointPlan) -> JointChoice:
    """The joint choice a joint answer names (its plans' workflows and stages)."""
    out: list[TaskChoice | None] = []
    for p, sp in zip(ts.tasks, plan.plans, strict=True):
        if not sp.solved:
            out.append(None)
            continue
        w = next(i for i, wf in enumerate(p.workflows) if wf.name == sp.workflow)
        models = {m.name: i for i, m in enumerate(p.models)}
        idents = []
        for st in sp.stages:
            if st.reuse is not None:
                idents.append(("reuse", st.reuse))
                continue
            c = next(i for i, c in enumerate(p.configs)
                     if c.key == (st.tp, st.pp, st.gpu_type))
            idents.append(("new", models[st.model], c))
        out.append((w, tuple(idents)))
    return tuple(out)


def all_skipped(ts: TaskSet) -> JointRun:
    """The run that skips every task."""
    return run_choice(ts, [None] * len(ts.tasks))
