"""Evaluating one variant (spec sections 3-4, 9, 10) and choosing the unique optimum (sections 5
and 10).

Every selector builds its answer through :func:`evaluate` and :func:`choose`, so the
numbers a plan reports and the tie-breaks between equal-cost variants are computed in one
place, in stage order, exactly as the spec states. :func:`objective_value` is the one
definition of what a variant's objective is worth (``cost`` under ``gb_s``, ``U`` under
``usd_per_hour``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from selector.deployment import Serving, Work, add_work, build_deployment, stage_work
from selector.index import NEW, REUSE, Compiled, Option
from selector.placement import (StageDemand, free_memory, gpu_types, place, reuse_busy, reused_fair_ok, reused_gpus_ok,
                                reused_work_ok, tenant_utils)
from selector.plan import Plan, StagePlan
from selector.problem import TOL, objective_value

# constraint names, in the order of spec section 4
ACCURACY, LATENCY, CAPACITY, PLACEMENT = "accuracy", "latency", "capacity", "placement"


@dataclass(frozen=True)
class Evaluation:
    """Derived quantities of one variant; ``violated`` is the first failed constraint or None."""

    workflow: int
    choice: tuple[int, ...]             # option index per stage
    options: tuple[Option, ...]
    accuracy: float
    latency_s: float
    new_mem_gb: float
    new_gpus: int
    violated: str | None
    gpus: tuple[tuple[tuple[int, ...], ...], ...] | None   # per new stage, per replica
    usd_per_hour: float = 0.0   # section 10's U (0.0 without prices)
    objective: str = "gb_s"     # the problem's objective (section 10)

    @property
    def feasible(self) -> bool:
        return self.violated is None

    @property
    def cost_gb_s(self) -> float:
        return self.new_mem_gb * self.latency_s

    @property
    def value(self) -> float:
        """The objective's value: :func:`objective_value`."""
        return objective_value(self.objective, self.cost_gb_s, self.usd_per_hour)

    @property
    def key(self) -> tuple:
        return (self.workflow, *(o.key for o in self.options))


def demands(options: Sequence[Option]) -> list[StageDemand]:
    """The placement demand of the variant's new stages, in stage order; each restricted to its
    config's GPU type (section 10)."""
    return [StageDemand(o.replicas, o.shards, o.mem_gb / o.shards, o.replica_util, o.gpu_type)
            for o in options if o.kind == NEW]


def routed(options: Sequence[Option]) -> dict[int, float]:
    """Utilisation the variant routes to each reused instance (index -> sum of ``load / capacity``)."""
    out: dict[int, float] = {}
    for o in options:
        if o.kind == REUSE:
            out[o.instance] = out.get(o.instance, 0.0) + o.util_add
    return out


def routed_work(options: Sequence[Option]) -> dict[int, Work]:
    """Fair share's work rule: per reused instance, the call time the variant routes to it per
    second (sum of ``load x latency_s``) and the least ``latency_s x capacity_rps`` among the
    stages routed there (``selector.placement.reused_work_ok``)."""
    out: dict[int, Work] = {}
    for o in options:
        if o.kind == REUSE:
            add_work(out, o.instance, stage_work(o.util_add * o.capacity_rps, o.latency_s, o.capacity_rps))
    return out


def placement(cp: Compiled, options: Sequence[Option]) -> list[list[list[int]]] | None:
    """Constraint 4 under the problem's sharing mode: LeastLoaded's GPUs per new stage and
    replica, or None. Under ``sharing: compute`` (section 9) reuse is applied first, a reused
    instance's GPU above 1 fails the variant, and placement skips GPUs without compute room;
    ``sharing: fair-share`` adds the work rule on reuse (``selector.placement.reused_work_ok``) and
    the fair-share check to both (``selector.placement.fair_room``)."""
    cluster = cp.problem.cluster
    if not cluster.compute:
        return place(free_memory(cluster), demands(options), types=gpu_types(cluster))
    to = routed(options)
    busy = reuse_busy(cluster, to)
    if not reused_gpus_ok(cluster, to, busy):
        return None
    if cluster.fair_share and not reused_work_ok(cluster, routed_work(options)):
        return None
    tenants = tenant_utils(cluster, to) if cluster.fair_share else None
    if tenants is not None and not reused_fair_ok(cluster, to, tenants):
        return None
    return place(free_memory(cluster), demands(options), busy, types=gpu_types(cluster), tenants=tenants)


def capacity_ok(cp: Compiled, options: Sequence[Option]) -> bool:
    util = {}
    for o in options:
        if o.kind == REUSE:
            util[o.instance] = util.get(o.instance, cp.base_util[o.instance]) + o.util_add
    return all(u <= 1.0 + TOL for u in util.values())


def evaluate(cp: Compiled, workflow: int, choice: Sequence[int], *, do_placement: bool = True) -> Evaluation:
    """Evaluate ``choice`` (an option index per stage of ``workflow``) against every constraint."""
    stages = cp.workflows[workflow].stages
    opts = tuple(s.options[c] for s, c in zip(stages, choice, strict=True))
    acc = min(o.accuracy for o in opts)
    lat = 0.0
    mem = 0.0
    usd = 0.0
    gpus = 0
    for s, o in zip(stages, opts):
        lat += s.calls * o.latency_s
        if o.kind == NEW:
            mem += o.replicas * o.mem_gb
            gpus += o.replicas * o.shards
            usd += o.usd_per_hour
    task = cp.problem.task
    violated, placed = None, None
    if acc < task.accuracy_slo - TOL:
        violated = ACCURACY
    elif lat > task.latency_slo_s + TOL:
        violated = LATENCY
    elif not capacity_ok(cp, opts):
        violated = CAPACITY
    elif do_placement:
        result = placement(cp, opts)
        if result is None:
            violated = PLACEMENT
        else:
            placed = tuple(tuple(tuple(r) for r in st) for st in result)
    return Evaluation(workflow, tuple(choice), opts, acc, lat, mem, gpus, violated, placed, usd,
                      cp.problem.objective)


def choose(feasible: Iterable[Evaluation]) -> Evaluation | None:
    """The unique optimum of sections 5 and 10 among feasible evaluations (the objective's value,
    then L, then G, then key)."""
    cands = list(feasible)
    if not cands:
        return None
    cmin = min(e.value for e in cands)
    cands = [e for e in cands if e.value <= cmin + TOL * max(1.0, cmin)]
    lmin = min(e.latency_s for e in cands)
    cands = [e for e in cands if e.latency_s <= lmin + TOL * max(1.0, lmin)]
    gmin = min(e.new_gpus for e in cands)
    return min((e for e in cands if e.new_gpus == gmin), key=lambda e: e.key)


def variant_of(cp: Compiled, plan: Plan) -> tuple[int, tuple[int, ...]]:
    """The variant ``(workflow index, option index per stage)`` a solved plan of this problem names
    (KeyError/StopIteration when it names options the problem does not have)."""
    p = cp.problem
    w = next(i for i, wf in enumerate(p.workflows) if wf.name == plan.workflow)
    inst = {i.id: k for k, i in enumerate(p.cluster.instances)}
    models = {m.name: k for k, m in enumerate(p.models)}
    choice = []
    for st, sp in zip(cp.workflows[w].stages, plan.stages, strict=True):
        if sp.reuse is not None:
            key: tuple = (REUSE, inst[sp.reuse])
        else:
            key = (NEW, models[sp.model], next(k for k, c in enumerate(p.configs)
                                               if c.key == (sp.tp, sp.pp, sp.gpu_type)))
        choice.append(next(k for k, o in enumerate(st.options) if o.key == key))
    return w, tuple(choice)


def to_plan(cp: Compiled, ev: Evaluation, *, status: str, solver: str, elapsed_s: float,
            evaluated: int, extra: dict | None = None) -> Plan:
    """Turn a feasible evaluation into the plan of section 6."""
    p = cp.problem
    w = p.workflows[ev.workflow]
    placed = iter(ev.gpus or ())
    stages = []
    for st, o in zip(w.stages, ev.options):
        model = p.models[o.model].name
        if o.kind == REUSE:
            inst = p.cluster.instances[o.instance]
            stages.append(StagePlan(st.name, model, inst.tp, inst.pp, inst.id, 0, (), o.gpu_type))
        else:
            stages.append(StagePlan(st.name, model, o.tp, o.pp, None, o.replicas, next(placed), o.gpu_type))
    dep = build_deployment(p, w.name, [[Serving(s.model, s.tp, s.pp, s.reuse, s.gpus, gpu_type=s.gpu_type)]
                                       for s in stages])
    return Plan(status=status, solver=solver, task=p.task.name, variant_space=cp.variant_space,
                elapsed_s=elapsed_s, variants_evaluated=evaluated, workflow=w.name, stages=tuple(stages),
                cost_gb_s=ev.cost_gb_s, latency_s=ev.latency_s, new_mem_gb=ev.new_mem_gb,
                new_gpus=ev.new_gpus, accuracy=ev.accuracy, extra=extra or {}, deployment=dep,
                usd_per_hour=ev.usd_per_hour if cp.priced else None)


def infeasible_plan(cp: Compiled, *, solver: str, reason: str, elapsed_s: float, evaluated: int) -> Plan:
    return Plan(status="infeasible", solver=solver, task=cp.problem.task.name, reason=reason,
                variant_space=cp.variant_space, elapsed_s=elapsed_s, variants_evaluated=evaluated)
