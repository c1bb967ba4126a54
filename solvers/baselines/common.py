"""What the baselines share: their fixed workflow, their spec face (own choice or infeasible)
and the deployment they really make (``plan.deployment``, built with
``selector.deployment.build_deployment`` like every selector's).

Two faces (docs/baselines.md): a baseline deploys by its own rules even where they break the
spec (no SLO check, packed GPUs, a weak model beside the strong one). Its plan is its own
choice, status ``feasible``, when that choice meets every spec constraint; otherwise the plan
is ``infeasible`` with the broken constraint in ``reason`` and ``extra["spec_violation"]``
(never another selector's answer in its name). ``plan.deployment`` always holds what the
baseline really deploys (``None``: nothing could be placed, ``extra["unplaced_reason"]``),
and the cluster update of spec section 8 (``selector.deploy.deploy_task``) applies that.

Under ``cluster.sharing: compute`` (spec section 9) the spec face judges the choice under that
mode: its variant is evaluated with compute-aware LeastLoaded, and a deployment that the
baseline's own rules put on a GPU whose summed utilisation then exceeds 1 (section 9's rule:
packing, one instance carrying a whole stage) makes the face infeasible too
(``placement (sharing: compute) ...``), while ``plan.deployment`` stays what it really deploys.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from selector.deployment import Deployment, Serving, build_deployment
from selector.evaluate import Evaluation, evaluate, infeasible_plan, to_plan
from selector.index import NEW, Compiled, Option, compile_problem
from selector.placement import StageDemand, free_memory, gpu_busy, gpu_types, place
from selector.plan import Plan
from selector.problem import TOL, Problem, parse_problem


def developer_workflow(problem: Problem) -> int:
    """The fixed chain a developer writes: the first candidate with more than one stage (else the first)."""
    for i, w in enumerate(problem.workflows):
        if len(w.stages) > 1:
            return i
    return 0


def only_workflow(problem: Problem, name: str, **task_update) -> Problem:
    """``problem`` with one candidate workflow (and its perf rows); ``task_update`` edits the task."""
    d = problem.to_dict()
    d["workflows"] = [w for w in d["workflows"] if w["name"] == name]
    d["perf"] = [r for r in d["perf"] if r["workflow"] == name]
    d["task"].update(task_update)
    return parse_problem(d)


def option_index(cp: Compiled, wi: int, si: int, pred) -> int | None:
    for k, o in enumerate(cp.workflows[wi].stages[si].options):
        if pred(o):
            return k
    return None


def pack_first_fit(free_gb: dict[int, float], demands: Sequence[StageDemand],
                   types: dict[int, str] | None = None) -> list[list[list[int]]] | None:
    """Each shard on the lowest-id GPU with room for it (colocation allowed, same stage too),
    among the GPUs of the demand's type (spec section 10; ``types``: GPU id -> type)."""
    free = dict(free_gb)
    out = []
    for d in demands:
        stage = []
        mine = [g for g in sorted(free) if d.gpu_type is None or types is None or types[g] == d.gpu_type]
        for _ in range(d.replicas):
            chosen = []
            for _ in range(d.shards):
                g = next((g for g in mine if g not in chosen and free[g] >= d.shard_gb - TOL), None)
                if g is None:
                    return None
                free[g] -= d.shard_gb
                chosen.append(g)
            stage.append(sorted(chosen))
        out.append(stage)
    return out


def servings(cp: Compiled, options: Sequence[Option], placed, *, share: float = 1.0,
             tag: str = "") -> list[Serving]:
    """One :class:`Serving` per stage of ``options``: a reused instance, or new replicas on the
    ``placed`` GPUs (per new stage, per replica), taking ``share`` of the stage's requests."""
    p = cp.problem
    spots = iter(placed)
    out = []
    for o in options:
        model = p.models[o.model].name
        if o.kind != NEW:
            out.append(Serving(model, o.tp, o.pp, reuse=p.cluster.instances[o.instance].id, share=share))
        else:
            out.append(Serving(model, o.tp, o.pp, gpus=tuple(tuple(g) for g in next(spots)), share=share, tag=tag,
                               gpu_type=o.gpu_type))
    return out


def deployment(cp: Compiled, wi: int, options: Sequence[Option], placed, *, rule: str) -> Deployment:
    """What a baseline deploys: ``options`` of workflow ``wi`` with new replicas on ``placed``."""
    return build_deployment(cp.problem, cp.workflows[wi].name, [[s] for s in servings(cp, options, placed)],
                            rule=rule)


def new_demands(options: Sequence[Option]) -> list[StageDemand]:
    """Memory-only demands of the new options, each on its config's GPU type (spec section 10)."""
    return [StageDemand(o.replicas, o.shards, o.mem_gb / o.shards, gpu_type=o.gpu_type)
            for o in options if o.kind == NEW]


def default_config(problem: Problem) -> tuple[int, int, str]:
    """A developer's default deployment config, as ``(tp, pp, gpu_type)``: the first listed config
    with ``tp = pp = 1``, else the first listed (so on a typed cluster, spec section 10, the
    type of that first config: the order of ``configs`` is the developer's preference)."""
    return next((c.key for c in problem.configs if (c.tp, c.pp) == (1, 1)), problem.configs[0].key)


def spec_face(cp: Compiled, ev: Evaluation | None, *, solver: str, t0: float, rule: str,
              deploy: Deployment | None, unplaced_reason: str | None = None, why: str | None = None) -> Plan:
    """The plan a baseline returns (module docstring): its own choice if spec-feasible, else an
    infeasible plan naming the broken constraint; ``plan.deployment`` is the real deployment
    either way (``None``: nothing placed, ``extra["unplaced_reason"]`` says why)."""
    extra: dict = {"rule": rule}
    if deploy is None:
        extra["unplaced_reason"] = unplaced_reason or "the baseline's deployment cannot be placed"
    overload = compute_overload(cp.problem, deploy)
    if ev is not None and ev.feasible and overload is not None:
        ev, why = None, overload
    if ev is not None and ev.feasible:
        plan = to_plan(cp, ev, status="feasible", solver=solver, elapsed_s=time.perf_counter() - t0,
                       evaluated=1, extra=extra)
        return replace(plan, deployment=deploy)
    why = why or (ev.violated if ev is not None else "no option")
    extra["spec_violation"] = why
    plan = infeasible_plan(cp, solver=solver, reason=f"{solver}'s own choice violates {why} "
                           "(a baseline deploys by its rules; see deployment)",
                           elapsed_s=time.perf_counter() - t0, evaluated=1)
    return replace(plan, extra=extra, deployment=deploy)


def compute_overload(problem: Problem, deploy: Deployment | None) -> str | None:
    """Under ``sharing: compute``, the first GPU that ``deploy`` places on or routes to whose
    summed utilisation (section 9's ``busy_g``) ends above 1, said as a spec violation; None
    when it fits, in memory mode, or when nothing is deployed."""
    if deploy is None or not problem.cluster.compute:
        return None
    busy = gpu_busy(problem.cluster)
    gpus = {i.id: i.gpus for i in problem.cluster.instances}
    touched: set[int] = set()
    for iid, add in deploy.reuse:
        for g in gpus[iid]:
            busy[g] += add
            touched.add(g)
    for inst in deploy.instances:
        for g in inst.gpus:
            busy[g] += inst.utilization
            touched.add(g)
    over = [g for g in sorted(touched) if busy[g] > 1.0 + TOL]
    if not over:
        return None
    return (f"placement (sharing: compute): the deployment puts summed utilisation {busy[over[0]]:.4g} "
            f"on GPU {over[0]}")


def least_loaded(cp: Compiled, options: Sequence[Option]):
    return place(free_memory(cp.problem.cluster), new_demands(options), types=gpu_types(cp.problem.cluster))


__all__ = ["compile_problem", "compute_overload", "default_config", "developer_workflow", "deployment", "evaluate", "least_loaded", "new_demands",
           "only_workflow", "option_index", "pack_first_fit", "servings", "spec_face"]
