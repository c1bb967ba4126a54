"""Independent check of a plan against its problem (spec sections 3-6).

Recomputes every number from the plan's own fields, without the search machinery, so a
solver bug cannot hide behind shared code. Used by the conformance tests and by anyone who
wants to audit a plan file: it returns the list of violations (empty = the plan is valid).
"""
from __future__ import annotations

import math

from selector.index import replicas_for
from selector.placement import (StageDemand, fair_room, free_memory, gpu_busy, gpu_types, place, reused_work_ok,
                                tenant_utils)
from selector.plan import Plan
from selector.problem import TOL, Problem
REL = 1e-6


def _close(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= REL * max(1.0, abs(b))


def verify_plan(problem: Problem, plan: Plan) -> list[str]:
    """Violations of ``plan`` for ``problem`` (empty when the plan is a valid answer)."""
    if not plan.solved:
        return [] if plan.reason else ["infeasible plan without a reason"]
    wf = next((w for w in problem.workflows if w.name == plan.workflow), None)
    if wf is None:
        return [f"unknown workflow {plan.workflow!r}"]
    if [s.stage for s in plan.stages] != [s.name for s in wf.stages]:
        return ["stages do not match the workflow's stages in order"]
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r for r in problem.perf}
    deploy = {(d.model, d.tp, d.pp, d.gpu_type): d.mem_gb for d in problem.deployments}
    acc = {m.name: m.accuracy for m in problem.models}
    insts = {i.id: i for i in problem.cluster.instances}
    configs = {c.key for c in problem.configs}
    prices = problem.cluster.prices or {}
    errs: list[str] = []
    A, L, M, G, U = math.inf, 0.0, 0.0, 0, 0.0
    util = {i.id: i.utilization for i in problem.cluster.instances}
    busy = gpu_busy(problem.cluster)        # section 9 (read under sharing: compute)
    reused_gpus: set[int] = set()
    work: dict[int, tuple[float, float]] = {}   # fair share's work rule: instance index -> (added, least cap)
    index = {i.id: k for k, i in enumerate(problem.cluster.instances)}
    demands = []
    for st, sp in zip(wf.stages, plan.stages):
        load = problem.task.arrival_rate_rps * st.calls
        if sp.reuse is not None:
            inst = insts.get(sp.reuse)
            if inst is None or (inst.model, inst.tp, inst.pp, problem.cluster.instance_type(inst)) != \
                    (sp.model, sp.tp, sp.pp, sp.gpu_type):
                errs.append(f"{st.name}: reuse of unknown or mismatched instance {sp.reuse!r}")
                continue
        elif (sp.tp, sp.pp, sp.gpu_type) not in configs or (sp.model, sp.tp, sp.pp, sp.gpu_type) not in deploy:
            errs.append(f"{st.name}: new deployment without a config/deployments row")
            continue
        key = (sp.model, sp.tp, sp.pp, sp.gpu_type)
        row = perf.get((wf.name, st.name, *key))
        if row is None:
            errs.append(f"{st.name}: no perf row")
            continue
        A = min(A, acc[sp.model])
        L += st.calls * row.latency_s
        if sp.reuse is not None:
            util[sp.reuse] += load / row.capacity_rps
            w, c = work.get(index[sp.reuse], (0.0, math.inf))
            work[index[sp.reuse]] = (w + load * row.latency_s, min(c, row.latency_s * row.capacity_rps))
            for g in insts[sp.reuse].gpus:
                busy[g] += load / row.capacity_rps
                reused_gpus.add(g)
            if sp.replicas != 0 or sp.gpus:
                errs.append(f"{st.name}: a reused stage deploys nothing")
        else:
            reps = replicas_for(load, row.capacity_rps)
            if sp.replicas != reps:
                errs.append(f"{st.name}: replicas {sp.replicas}, spec gives {reps}")
            M += reps * deploy[key]
            G += reps * sp.tp * sp.pp
            U += reps * sp.tp * sp.pp * prices.get(sp.gpu_type, 0.0)
            demands.append(StageDemand(reps, sp.tp * sp.pp, deploy[key] / (sp.tp * sp.pp),
                                       load / (reps * row.capacity_rps), sp.gpu_type))
    if errs:
        return errs
    t = problem.task
    if A < t.accuracy_slo - TOL:
        errs.append(f"accuracy {A} below slo {t.accuracy_slo}")
    if L > t.latency_slo_s + TOL:
        errs.append(f"latency {L} above slo {t.latency_slo_s}")
    errs += [f"instance {i} utilization {u} > 1" for i, u in util.items() if u > 1 + TOL]
    compute = problem.cluster.compute
    if compute:
        errs += [f"GPU {g} busy {busy[g]} > 1 after reuse (sharing: compute)" for g in sorted(reused_gpus)
                 if busy[g] > 1 + TOL]
    tenants = None
    if problem.cluster.fair_share:
        added = {k: util[i.id] - i.utilization for k, i in enumerate(problem.cluster.instances)
                 if util[i.id] != i.utilization}
        tenants = tenant_utils(problem.cluster, added)
        if not reused_work_ok(problem.cluster, work):
            errs.append("a reused instance's work beyond its tightest stage's cap (sharing: fair-share)")
        errs += [f"GPU {g} tenants {tenants[g]} beyond their fair share after reuse (sharing: fair-share)"
                 for g in sorted(reused_gpus) if not fair_room(tenants[g])]
    placed = place(free_memory(problem.cluster), demands, busy if compute else None,
                   types=gpu_types(problem.cluster), tenants=tenants)
    got = [[list(g) for g in sp.gpus] for sp in plan.stages if sp.reuse is None]
    if placed is None:
        errs.append("new replicas cannot be placed by LeastLoaded")
    elif placed != got:
        errs.append(f"GPU mapping {got} differs from LeastLoaded {placed}")
    for name, mine, theirs in (("accuracy", A, plan.accuracy), ("latency_s", L, plan.latency_s),
                               ("new_mem_gb", M, plan.new_mem_gb), ("cost_gb_s", M * L, plan.cost_gb_s)):
        if not _close(theirs, mine):
            errs.append(f"reported {name} {theirs} != {mine}")
    if plan.new_gpus != G:
        errs.append(f"reported new_gpus {plan.new_gpus} != {G}")
    if problem.cluster.prices is None and plan.usd_per_hour is not None:
        errs.append(f"reported usd_per_hour {plan.usd_per_hour} without cluster.prices (must be null)")
    if problem.cluster.prices is not None and not _close(plan.usd_per_hour, U):
        errs.append(f"reported usd_per_hour {plan.usd_per_hour} != {U}")
    return errs
