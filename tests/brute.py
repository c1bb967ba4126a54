"""A plain brute force of the spec, written independently of selector/ (no numpy, no
chunks, its own LeastLoaded, its own sections 9 and 10): the reference the exact solvers are
checked against, in both sharing modes and both objectives."""
from __future__ import annotations

import itertools
import math

from selector.problem import Problem

TOL = 1e-9


def _place(problem: Problem, demands, busy=None):
    """LeastLoaded; ``busy`` (GPU -> utilisation after reuse) switches on section 9."""
    return least_loaded({g.id: g.mem_gb - g.used_gb for g in problem.cluster.gpus},
                        {g.id: g.type for g in problem.cluster.gpus}, demands, busy)


def least_loaded(free: dict, kind: dict, demands, busy=None):
    """LeastLoaded on plain maps (GPU -> free GB, GPU -> type); ``demands``: per stage
    (replicas, shards, GB per shard, utilisation, GPU type). Also the joint brute force's."""
    free = dict(free)
    busy = None if busy is None else dict(busy)
    out = []
    for reps, shards, shard, u, gtype in demands:
        mine: set[int] = set()
        stage = []
        for _ in range(reps):
            chosen = []
            for _ in range(shards):
                cands = sorted(g for g in free if g not in mine and kind[g] == gtype
                               and (busy is None or busy[g] + u <= 1 + TOL))
                if not cands:
                    return None
                top = max(free[g] for g in cands)
                g = min(g for g in cands if free[g] >= top - TOL)
                if free[g] < shard - TOL:
                    return None
                free[g] -= shard
                if busy is not None:
                    busy[g] += u
                mine.add(g)
                chosen.append(g)
            stage.append(sorted(chosen))
        out.append(stage)
    return out


def brute_force(problem: Problem):
    """Returns (workflow name, per-stage option descriptors, objective value, latency) of the
    optimum, or None. A descriptor is ``("reuse", instance id, model)`` or ``("new", (tp, pp,
    gpu_type), model)``; the value is ``cost`` (GB*s) or, under ``usd_per_hour``, ``U``."""
    p = problem
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r for r in p.perf}
    dep = {(d.model, d.tp, d.pp, d.gpu_type): d.mem_gb for d in p.deployments}
    acc = {m.name: m.accuracy for m in p.models}
    gtype = {g.id: g.type for g in p.cluster.gpus}
    price = p.cluster.prices or {}
    feas = []
    for wi, w in enumerate(p.workflows):
        per_stage = []
        for s in w.stages:
            opts = []
            for ii, inst in enumerate(p.cluster.instances):
                r = perf.get((w.name, s.name, inst.model, inst.tp, inst.pp, gtype[inst.gpus[0]]))
                if r:
                    opts.append(((0, ii), ("reuse", inst.id, inst.model, r)))
            for mi, m in enumerate(p.models):
                for ci, c in enumerate(p.configs):
                    r = perf.get((w.name, s.name, m.name, c.tp, c.pp, c.gpu_type))
                    if r and (m.name, c.tp, c.pp, c.gpu_type) in dep:
                        opts.append(((1, mi, ci), ("new", (c.tp, c.pp, c.gpu_type), m.name, r)))
            per_stage.append(opts)
        for combo in itertools.product(*per_stage):
            A = min(acc[o[1][2]] for o in combo)
            L, M, G, U, util, demands = 0.0, 0.0, 0, 0.0, {}, []
            for s, (_, (kind, ref, model, r)) in zip(w.stages, combo):
                load = p.task.arrival_rate_rps * s.calls
                L += s.calls * r.latency_s
                if kind == "reuse":
                    util[ref] = util.get(ref, next(i.utilization for i in p.cluster.instances if i.id == ref)) \
                        + load / r.capacity_rps
                else:
                    reps = max(1, math.ceil(load / r.capacity_rps - 1e-9))
                    mem = dep[(model, *ref)]
                    M += reps * mem
                    G += reps * ref[0] * ref[1]
                    U += reps * ref[0] * ref[1] * price.get(ref[2], 0.0)
                    demands.append((reps, ref[0] * ref[1], mem / (ref[0] * ref[1]), load / (reps * r.capacity_rps),
                                    ref[2]))
            if A < p.task.accuracy_slo - TOL or L > p.task.latency_slo_s + TOL:
                continue
            if any(u > 1 + TOL for u in util.values()):
                continue
            busy = None
            if p.cluster.sharing == "compute":
                busy = {g.id: 0.0 for g in p.cluster.gpus}
                for inst in p.cluster.instances:
                    for g in inst.gpus:
                        busy[g] += util.get(inst.id, inst.utilization)
                routed = {g for inst in p.cluster.instances if inst.id in util for g in inst.gpus}
                if any(busy[g] > 1 + TOL for g in routed):
                    continue
            if _place(p, demands, busy) is None:
                continue
            value = U if p.objective == "usd_per_hour" else M * L
            feas.append((value, L, G, (wi, *[o[0] for o in combo]), w.name, combo))
    if not feas:
        return None
    cmin = min(f[0] for f in feas)
    feas = [f for f in feas if f[0] <= cmin + TOL * max(1, cmin)]
    lmin = min(f[1] for f in feas)
    feas = [f for f in feas if f[1] <= lmin + TOL * max(1, lmin)]
    gmin = min(f[2] for f in feas)
    best = min((f for f in feas if f[2] == gmin), key=lambda f: f[3])
    descr = [(o[1][0], o[1][1], o[1][2]) for o in best[5]]
    return best[4], descr, best[0], best[1]


def plan_descr(plan) -> list[tuple]:
    """A plan's per-stage descriptors in :func:`brute_force`'s form, to compare the two."""
    return [("reuse", s.reuse, s.model) if s.reuse else ("new", (s.tp, s.pp, s.gpu_type), s.model)
            for s in plan.stages]
