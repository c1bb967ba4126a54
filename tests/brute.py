"""A plain brute force of the spec, written independently of selector/ (no numpy, no
chunks, its own LeastLoaded): the reference the exact solvers are checked against."""
from __future__ import annotations

import itertools
import math

from selector.problem import Problem

TOL = 1e-9


def _place(problem: Problem, demands):
    free = {g.id: g.mem_gb - g.used_gb for g in problem.cluster.gpus}
    out = []
    for reps, shards, shard in demands:
        mine: set[int] = set()
        stage = []
        for _ in range(reps):
            chosen = []
            for _ in range(shards):
                cands = sorted(g for g in free if g not in mine)
                if not cands:
                    return None
                top = max(free[g] for g in cands)
                g = min(g for g in cands if free[g] >= top - TOL)
                if free[g] < shard - TOL:
                    return None
                free[g] -= shard
                mine.add(g)
                chosen.append(g)
            stage.append(sorted(chosen))
        out.append(stage)
    return out


def brute_force(problem: Problem):
    """Returns (workflow name, per-stage option descriptors, cost, latency) of the optimum, or None."""
    p = problem
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp): r for r in p.perf}
    dep = {(d.model, d.tp, d.pp): d.mem_gb for d in p.deployments}
    acc = {m.name: m.accuracy for m in p.models}
    feas = []
    for wi, w in enumerate(p.workflows):
        per_stage = []
        for s in w.stages:
            opts = []
            for ii, inst in enumerate(p.cluster.instances):
                r = perf.get((w.name, s.name, inst.model, inst.tp, inst.pp))
                if r:
                    opts.append(((0, ii), ("reuse", inst.id, inst.model, r)))
            for mi, m in enumerate(p.models):
                for ci, c in enumerate(p.configs):
                    r = perf.get((w.name, s.name, m.name, c.tp, c.pp))
                    if r and (m.name, c.tp, c.pp) in dep:
                        opts.append(((1, mi, ci), ("new", (c.tp, c.pp), m.name, r)))
            per_stage.append(opts)
        for combo in itertools.product(*per_stage):
            A = min(acc[o[1][2]] for o in combo)
            L, M, G, util, demands = 0.0, 0.0, 0, {}, []
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
                    demands.append((reps, ref[0] * ref[1], mem / (ref[0] * ref[1])))
            if A < p.task.accuracy_slo - TOL or L > p.task.latency_slo_s + TOL:
                continue
            if any(u > 1 + TOL for u in util.values()):
                continue
            if _place(p, demands) is None:
                continue
            feas.append((M * L, L, G, (wi, *[o[0] for o in combo]), w.name, combo))
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
