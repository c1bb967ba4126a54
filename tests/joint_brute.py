"""A plain brute force of spec section 11, written independently of selector/ (no compiled
options, no numpy, its own LeastLoaded, sections 8-10 on plain dicts): every product of the
tasks' variants and ``skip``, each task checked on the cluster the earlier ones left. The
reference the joint solvers are checked against, in both sharing modes and objectives."""
from __future__ import annotations

import copy
import math

from selector.joint import TaskSet

TOL = 1e-9
SKIP = (math.inf,)


def _state(ts: TaskSet) -> dict:
    c = ts.cluster
    return {"gpus": {g.id: {"mem": g.mem_gb, "used": g.used_gb, "type": g.type} for g in c.gpus},
            "instances": [{"id": i.id, "model": i.model, "tp": i.tp, "pp": i.pp, "gpus": list(i.gpus),
                           "util": i.utilization} for i in c.instances],
            "compute": c.sharing == "compute", "prices": c.prices}


def _place(st: dict, demands: list, busy: dict | None):
    free = {g: v["mem"] - v["used"] for g, v in st["gpus"].items()}
    busy = None if busy is None else dict(busy)
    out = []
    for reps, shards, shard, u, gtype in demands:
        mine: set[int] = set()
        stage = []
        for _ in range(reps):
            chosen = []
            for _ in range(shards):
                cands = sorted(g for g in free if g not in mine and st["gpus"][g]["type"] == gtype
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


def _options(p, st: dict, w, s):
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r for r in p.perf}
    dep = {(d.model, d.tp, d.pp, d.gpu_type): d.mem_gb for d in p.deployments}
    opts = []
    for ii, inst in enumerate(st["instances"]):
        gtype = st["gpus"][inst["gpus"][0]]["type"]
        r = perf.get((w.name, s.name, inst["model"], inst["tp"], inst["pp"], gtype))
        if r:
            opts.append(((0, ii), "reuse", ii, inst["model"], inst["tp"], inst["pp"], gtype, r, 0.0))
    for mi, m in enumerate(p.models):
        for ci, c in enumerate(p.configs):
            gtype = c.gpu_type
            r = perf.get((w.name, s.name, m.name, c.tp, c.pp, gtype))
            if r and (m.name, c.tp, c.pp, gtype) in dep:
                opts.append(((1, mi, ci), "new", None, m.name, c.tp, c.pp, gtype, r, dep[(m.name, c.tp, c.pp, gtype)]))
    return opts


def _variants(p, st: dict):
    """Every feasible variant of task ``p`` on state ``st``: (cost, U, L, G, key, new state)."""
    acc = {m.name: m.accuracy for m in p.models}
    out = []
    for wi, w in enumerate(p.workflows):
        per_stage = [_options(p, st, w, s) for s in w.stages]

        def rec(s_idx, picked):
            if s_idx == len(w.stages):
                v = _check(p, st, acc, wi, w, picked)
                if v is not None:
                    out.append(v)
                return
            for o in per_stage[s_idx]:
                rec(s_idx + 1, picked + [o])
        rec(0, [])
    return out


def _check(p, st, acc, wi, w, picked):
    A = min(acc[o[3]] for o in picked)
    L = M = U = 0.0
    G = 0
    util, demands, news = {}, [], []
    for s, o in zip(w.stages, picked):
        _, kind, ii, model, tp, pp, gtype, r, mem = o
        load = p.task.arrival_rate_rps * s.calls
        L += s.calls * r.latency_s
        if kind == "reuse":
            util[ii] = util.get(ii, st["instances"][ii]["util"]) + load / r.capacity_rps
        else:
            reps = max(1, math.ceil(load / r.capacity_rps - 1e-9))
            M += reps * mem
            G += reps * tp * pp
            if st["prices"] is not None:
                U += reps * tp * pp * st["prices"][gtype]
            u = load / (reps * r.capacity_rps)
            demands.append((reps, tp * pp, mem / (tp * pp), u, gtype))
            news.append((s.name, model, tp, pp, mem, reps, u))
    if A < p.task.accuracy_slo - TOL or L > p.task.latency_slo_s + TOL or any(x > 1 + TOL for x in util.values()):
        return None
    busy = None
    if st["compute"]:
        busy = {g: 0.0 for g in st["gpus"]}
        for ii, inst in enumerate(st["instances"]):
            for g in inst["gpus"]:
                busy[g] += util.get(ii, inst["util"])
        if any(busy[g] > 1 + TOL for ii in util for g in st["instances"][ii]["gpus"]):
            return None
    placed = _place(st, demands, busy)
    if placed is None:
        return None
    new = copy.deepcopy(st)
    for ii, x in util.items():
        new["instances"][ii]["util"] = min(1.0, x)
    for (stage, model, tp, pp, mem, reps, u), gpus in zip(news, placed):
        for r, gs in enumerate(gpus):
            new["instances"].append({"id": f"{p.task.name}/{stage}/{r}", "model": model, "tp": tp, "pp": pp,
                                     "gpus": gs, "util": min(1.0, u)})
            for g in gs:
                new["gpus"][g]["used"] = min(new["gpus"][g]["mem"], new["gpus"][g]["used"] + mem / (tp * pp))
    descr = (w.name, tuple((o[1], st["instances"][o[2]]["id"] if o[1] == "reuse" else (o[4], o[5]), o[3]) for o in picked))
    return (M * L, U, L, G, (wi, *[o[0] for o in picked]), new, descr)


def joint_brute_force(ts: TaskSet):
    """The section-11 optimum: ``(served, total_cost, total_latency_s, per-task descriptor or None)``
    where a descriptor is ``(workflow, ((kind, instance id or (tp, pp), model) per stage))``."""
    usd = ts.objective == "usd_per_hour"
    leaves = []

    def rec(k, st, served, cost, lat, gpus, key, descr):
        if k == len(ts.tasks):
            leaves.append((served, cost, lat, gpus, key, descr))
            return
        for c_gb, u, L, G, vkey, new, d in _variants(ts.tasks[k], st):
            rec(k + 1, new, served + 1, cost + (u if usd else c_gb), lat + L, gpus + G, key + (vkey,), descr + (d,))
        rec(k + 1, st, served, cost, lat, gpus, key + (SKIP,), descr + (None,))

    rec(0, _state(ts), 0, 0.0, 0.0, 0, (), ())
    most = max(x[0] for x in leaves)
    leaves = [x for x in leaves if x[0] == most]
    for i in (1, 2):
        low = min(x[i] for x in leaves)
        leaves = [x for x in leaves if x[i] <= low + TOL * max(1.0, low)]
    fewest = min(x[3] for x in leaves)
    best = min((x for x in leaves if x[3] == fewest), key=lambda x: x[4])
    return best[0], best[1], best[2], best[5]
