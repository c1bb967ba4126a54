"""What the baselines share: their fixed workflow, their spec face (own choice or infeasible)
and the explicit deployment they report in ``plan.extra["deployment"]``.

Two faces (docs/baselines.md): a baseline deploys by its own rules even where they break the
spec (no SLO check, packed GPUs, a weak model beside the strong one). Its plan is its own
choice, status ``feasible``, when that choice meets every spec constraint; otherwise the plan
is ``infeasible`` with the broken constraint in ``reason`` and ``extra["spec_violation"]``
(never another selector's answer in its name). ``extra["deployment"]`` always holds what
the baseline really deploys (``None``: nothing could be placed), and the harness deploys that.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from selector.evaluate import Evaluation, evaluate, infeasible_plan, to_plan
from selector.index import NEW, Compiled, Option, compile_problem
from selector.placement import StageDemand, free_memory, place
from selector.plan import Plan
from selector.problem import Problem, parse_problem

TOL = 1e-9


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


def pack_first_fit(free_gb: dict[int, float], demands: Sequence[StageDemand]) -> list[list[list[int]]] | None:
    """Each shard on the lowest-id GPU with room for it (colocation allowed, same stage too)."""
    free = dict(free_gb)
    out = []
    for d in demands:
        stage = []
        for _ in range(d.replicas):
            chosen = []
            for _ in range(d.shards):
                g = next((g for g in sorted(free) if g not in chosen and free[g] >= d.shard_gb - TOL), None)
                if g is None:
                    return None
                free[g] -= d.shard_gb
                chosen.append(g)
            stage.append(sorted(chosen))
        out.append(stage)
    return out


def deployment(cp: Compiled, wi: int, options: Sequence[Option], placed, *, load_share: float = 1.0,
               tag: str = "") -> dict:
    """The explicit deployment of ``options`` with new replicas on ``placed`` GPUs (per new stage,
    per replica); utilisation as ``selector.deploy.apply_plan`` computes it, times ``load_share``."""
    p = cp.problem
    w = p.workflows[wi]
    spots = iter(placed)
    insts, stages, util = [], [], {}
    for st, o in zip(w.stages, options):
        load = p.task.arrival_rate_rps * st.calls * load_share
        if o.kind != NEW:
            iid = p.cluster.instances[o.instance].id
            util[iid] = util.get(iid, 0.0) + load / o.capacity_rps
            stages.append({"stage": st.name, "strong": [iid]})
            continue
        ids = []
        for r, gpus in enumerate(next(spots)):
            iid = f"{p.task.name}/{st.name}/{tag}{r}"
            insts.append({"id": iid, "model": p.models[o.model].name, "tp": o.tp, "pp": o.pp,
                          "gpus": list(gpus), "mem_gb": o.mem_gb})
            util[iid] = load / (o.replicas * o.capacity_rps)
            ids.append(iid)
        stages.append({"stage": st.name, "strong": ids})
    return {"workflow": w.name, "instances": insts, "stages": stages, "util_add": util}


def new_demands(options: Sequence[Option]) -> list[StageDemand]:
    return [StageDemand(o.replicas, o.shards, o.mem_gb / o.shards) for o in options if o.kind == NEW]


def deployment_from_plan(problem: Problem, plan: Plan) -> dict:
    """The explicit deployment of a spec plan (what ``selector.deploy.apply_plan`` would add)."""
    wf = next(w for w in problem.workflows if w.name == plan.workflow)
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp): r.capacity_rps for r in problem.perf}
    mem = {(d.model, d.tp, d.pp): d.mem_gb for d in problem.deployments}
    insts, stages, util = [], [], {}
    for st, sp in zip(wf.stages, plan.stages):
        load = problem.task.arrival_rate_rps * st.calls
        cap = perf[(wf.name, st.name, sp.model, sp.tp, sp.pp)]
        if sp.reuse is not None:
            util[sp.reuse] = util.get(sp.reuse, 0.0) + load / cap
            stages.append({"stage": st.name, "strong": [sp.reuse]})
            continue
        ids = [f"{problem.task.name}/{st.name}/{r}" for r in range(sp.replicas)]
        for iid, gpus in zip(ids, sp.gpus):
            insts.append({"id": iid, "model": sp.model, "tp": sp.tp, "pp": sp.pp, "gpus": list(gpus),
                          "mem_gb": mem[(sp.model, sp.tp, sp.pp)]})
            util[iid] = load / (sp.replicas * cap)
        stages.append({"stage": st.name, "strong": ids})
    return {"workflow": wf.name, "instances": insts, "stages": stages, "util_add": util}


def spec_face(cp: Compiled, ev: Evaluation | None, *, solver: str, t0: float, rule: str,
              deploy: dict | None, wi: int, time_limit_s: float, unplaced_reason: str | None = None,
              why: str | None = None) -> Plan:
    """The plan a baseline returns (module docstring): its own choice if spec-feasible, else an
    infeasible plan naming the broken constraint; ``extra`` carries the real deployment either way."""
    extra: dict = {"deployment": deploy, "rule": rule}
    if deploy is None:
        extra["unplaced_reason"] = unplaced_reason or "the baseline's deployment cannot be placed"
    if ev is not None and ev.feasible:
        return to_plan(cp, ev, status="feasible", solver=solver, elapsed_s=time.perf_counter() - t0,
                       evaluated=1, extra=extra)
    why = why or (ev.violated if ev is not None else "no option")
    extra["spec_violation"] = why
    return replace(infeasible_plan(cp, solver=solver, reason=f"{solver}'s own choice violates {why} "
                                   "(a baseline deploys by its rules; see extra.deployment)",
                                   elapsed_s=time.perf_counter() - t0, evaluated=1), extra=extra)


def least_loaded(cp: Compiled, options: Sequence[Option]):
    return place(free_memory(cp.problem.cluster), new_demands(options))


__all__ = ["compile_problem", "developer_workflow", "deployment", "deployment_from_plan", "evaluate", "least_loaded", "only_workflow",
           "option_index", "pack_first_fit", "spec_face"]
