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
from selector.index import NEW, Compiled, Option, compile_problem, remember
from selector.placement import StageDemand, free_memory, gpu_busy, gpu_types, place, reuse_busy
from selector.plan import Plan
from selector.problem import TOL, Problem, check_references


def developer_workflow(problem: Problem) -> int:
    """The fixed chain a developer writes: the first candidate with more than one stage (else the first)."""
    for i, w in enumerate(problem.workflows):
        if len(w.stages) > 1:
            return i
    return 0


def only_workflow(problem: Problem, name: str, **task_update) -> Problem:
    """``problem`` with one candidate workflow (and its perf rows); ``task_update`` edits the task.

    A copy of the validated problem (:func:`edited`), not a dump parsed again: on a loaded
    machine the round trip took 0.3 s of a 0.5 s time limit (issue 28)."""
    return edited(problem, workflows=tuple(w for w in problem.workflows if w.name == name),
                  perf=tuple(r for r in problem.perf if r.workflow == name),
                  task=problem.task.model_copy(update=task_update))


def edited(problem: Problem, **update) -> Problem:
    """``problem`` with some fields replaced by values taken from a validated problem (a subset of
    its rows, a model or instance edited by ``model_copy``), without dumping and validating it
    again; the cross-field checks still run (``check_references``)."""
    copy = problem.model_copy(update=update)
    check_references(copy)
    return copy


def compiled_copy(cp: Compiled, problem: Problem, workflows: Sequence[int], *, reuse: bool = True) -> Compiled:
    """The compiled form of ``problem``, a copy of ``cp.problem`` that keeps only ``workflows``
    (in that order), may change instance utilisations or the task's SLOs and, without ``reuse``,
    has no instance any stage can reuse, taken from ``cp`` instead of compiled again. None of
    these changes an option (section 3: its numbers come from the perf rows, deployments,
    configs, prices and arrival rate), so the options are ``cp``'s, less the reuse ones without
    ``reuse``. It is remembered, so the solver given ``problem`` next does not compile it again
    (issue 28: each compile took 0.1-0.3 s of a 0.5 s limit on a loaded machine)."""
    wfs = []
    for k, wi in enumerate(workflows):
        wf = cp.workflows[wi]
        stages = wf.stages if reuse else tuple(
            replace(st, options=tuple(o for o in st.options if o.kind == NEW)) for st in wf.stages)
        wfs.append(replace(wf, index=k, stages=stages))
    out = Compiled(problem, tuple(wfs))
    remember(problem, out)
    return out


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


def new_demands(options: Sequence[Option], *, util: bool = False) -> list[StageDemand]:
    """Demands of the new options, each on its config's GPU type (spec section 10): memory-only,
    or with each replica's utilisation ``u_s`` (``util``: section 9's compute-aware placement)."""
    return [StageDemand(o.replicas, o.shards, o.mem_gb / o.shards, o.replica_util if util else 0.0,
                        gpu_type=o.gpu_type) for o in options if o.kind == NEW]


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


#: a baseline's placement: ``own`` (its rule: LangChain packs first-fit, RouteLLM places by memory)
#: or ``spec``: FlowMaker's rule, the spec's LeastLoaded (constraint 4) with section 9's
#: compute bound under ``sharing: compute`` (docs/baselines.md, "Placement")
PLACEMENTS = ("own", "spec")


def check_placement(placement: str) -> str:
    if placement not in PLACEMENTS:
        raise KeyError(f"unknown placement '{placement}'; known: {', '.join(PLACEMENTS)}")
    return placement


def spec_place(problem: Problem, demands: Sequence[StageDemand], routed: dict[int, float] | None = None):
    """New replicas placed as FlowMaker places them: LeastLoaded on free memory (spec constraint
    4) and, under ``sharing: compute``, only on GPUs whose ``busy_g`` after the variant's reuse
    (``routed``: instance index -> utilisation routed to it) plus the replica's ``util`` stays
    <= 1 (section 9); section 10's GPU types. None when some replica cannot be placed."""
    cluster = problem.cluster
    busy = reuse_busy(cluster, routed or {}) if cluster.compute else None
    return place(free_memory(cluster), demands, busy, types=gpu_types(cluster))


def least_loaded(cp: Compiled, options: Sequence[Option]):
    return place(free_memory(cp.problem.cluster), new_demands(options), types=gpu_types(cp.problem.cluster))


__all__ = ["compile_problem", "compiled_copy", "compute_overload", "default_config", "developer_workflow",
           "deployment", "edited", "evaluate", "least_loaded", "new_demands",
           "only_workflow", "option_index", "pack_first_fit", "servings", "spec_face"]
