"""Why a problem is infeasible (spec section 6): the first constraint of section 4 after
which no variant survives, with the best value the survivors of the earlier ones reached.

Shared by every exact solver so their reasons read the same.
"""
from __future__ import annotations

import time

import numpy as np

from selector.index import REUSE, Compiled
from selector.pareto import front
from selector.problem import TOL
from selector.space import chunks

COUNT_MAX = 2_000_000    # larger spaces of new deployments only are diagnosed by a Pareto sweep, not counted
FRONT_MAX = 500_000


def empty_space_reason(cp: Compiled) -> str | None:
    """Names a stage with no option when the variant space is empty."""
    if cp.variant_space > 0:
        return None
    if not cp.workflows:
        return "variant space is empty: no workflows"
    for wf in cp.workflows:
        for st in wf.stages:
            if not st.options:
                return (f"variant space is empty: stage '{st.name}' of workflow '{wf.name}' has no option "
                        f"(no perf row with a deployment or a reusable instance)")
    return "variant space is empty"


def infeasibility_reason(cp: Compiled, *, deadline: float | None = None) -> str:
    """The reason string for an infeasible problem (call only when no variant is feasible)."""
    empty = empty_space_reason(cp)
    if empty:
        return empty
    task = cp.problem.task
    live = [wf for wf in cp.workflows if wf.size > 0]
    best_acc = max(min(float(st.arrays["acc"].max()) for st in wf.stages) for wf in live)
    if best_acc < task.accuracy_slo - TOL:
        return f"accuracy: no variant reaches accuracy_slo {task.accuracy_slo} (best {best_acc})"
    best_lat = np.inf
    for wf in live:
        lat = 0.0
        for st in wf.stages:
            ok = st.arrays["acc"] >= task.accuracy_slo - TOL
            lat += float(st.arrays["lat"][ok].min()) if ok.any() else np.inf
        best_lat = min(best_lat, lat)
    if best_lat > task.latency_slo_s + TOL:
        return (f"latency: no variant meeting accuracy_slo {task.accuracy_slo} meets latency_slo_s "
                f"{task.latency_slo_s} (best {best_lat})")
    return _capacity_or_placement(cp, deadline)


def _capacity_or_placement(cp: Compiled, deadline: float | None) -> str:
    task = cp.problem.task
    if cp.variant_space > COUNT_MAX and _new_only(cp):
        min_mem = _least_new_memory(cp)
        if min_mem is not None:
            return _placement_reason(cp, f"variants (not counted: {cp.variant_space:.4g} in the space)", min_mem)
    best_util, cap_pass, min_mem = np.inf, 0, np.inf
    for wf in cp.workflows:
        if wf.size == 0:
            continue
        for ch in chunks(cp, wf):
            ok = (ch.acc >= task.accuracy_slo - TOL) & (ch.lat <= task.latency_slo_s + TOL)
            if ok.any():
                best_util = min(best_util, float(ch.max_util[ok].min()))
            ok &= ch.max_util <= 1.0 + TOL
            cap_pass += int(ok.sum())
            if ok.any():
                min_mem = min(min_mem, float(ch.mem[ok].min()))
            if deadline is not None and time.perf_counter() > deadline:
                # the search's proof stands: the answer is infeasible, only its diagnosis is cut short
                return ("infeasible (proved by the search); the constraint that excludes every variant was "
                        "not identified before the deadline")
    if cap_pass == 0:
        return (f"capacity: every variant meeting accuracy and latency overloads a reused instance "
                f"(best utilization {best_util})")
    return _placement_reason(cp, f"{cap_pass} variants", min_mem)


def _room(cp: Compiled, o) -> int:
    """GPUs of ``o``'s type with free memory for one of its shards."""
    shard = o.mem_gb / (o.tp * o.pp)
    return sum(1 for g in cp.problem.cluster.gpus if g.type == o.gpu_type and g.mem_gb - g.used_gb >= shard - TOL)


def _gpu_count_reason(cp: Compiled, what: str) -> str | None:
    """A reason naming GPU count when it binds: in every workflow some stage's options meeting the
    accuracy SLO all need more GPUs (replicas x tp x pp, none shared by two replicas of the stage)
    than the cluster has with room for one of their shards, or some stage has no such option at
    all (at least one workflow of the first kind); None otherwise."""
    slo = cp.problem.task.accuracy_slo - TOL
    need, room = np.inf, 0
    for wf in cp.workflows:
        blocked = False
        for st in wf.stages:
            opts = [o for o in st.options if o.accuracy >= slo]
            if not opts:        # no option meeting accuracy (or no perf row): the workflow places nothing
                blocked = True
                break
            if all(o.kind != REUSE and o.gpu_count > _room(cp, o) for o in opts):
                blocked = True
                best = min(opts, key=lambda o: o.gpu_count)
                if best.gpu_count < need:
                    need, room = best.gpu_count, _room(cp, best)
                break
        if not blocked:
            return None
    if not np.isfinite(need):
        return None
    return (f"placement: GPU count: none of the {what} can be placed: replicas of one stage may not share a GPU "
            f"and each needs tp x pp GPUs, so the least a stage needs is {need} GPUs; the cluster has {room} "
            "with room for one of its shards")


def _placement_reason(cp: Compiled, what: str, min_mem: float) -> str:
    count = _gpu_count_reason(cp, what)
    if count is not None:
        return count
    free = sum(g.mem_gb - g.used_gb for g in cp.problem.cluster.gpus)
    if cp.compute:
        return (f"placement: none of the {what} meeting accuracy, latency and capacity can be "
                f"placed by compute-aware LeastLoaded (sharing: compute; least new memory needed {min_mem} GB; "
                f"cluster free {free} GB; compute room {cp.compute_room:.6g} GPU-utilisation)")
    return (f"placement: none of the {what} meeting accuracy, latency and capacity can be "
            f"placed by LeastLoaded (least new memory needed {min_mem} GB; cluster free {free} GB)")


def _new_only(cp: Compiled) -> bool:
    """No option meeting the accuracy SLO reuses an instance, so every variant passes capacity."""
    slo = cp.problem.task.accuracy_slo - TOL
    return not any(o.kind == REUSE and o.accuracy >= slo for wf in cp.workflows for st in wf.stages
                   for o in st.options)


def _least_new_memory(cp: Compiled) -> float | None:
    """The least new memory of a variant meeting accuracy and latency (``selector.pareto``), or
    None when a front grows too large to finish."""
    task = cp.problem.task
    best = np.inf
    for wf in cp.workflows:
        lat, mem = [], []
        for st in wf.stages:
            ok = st.arrays["acc"] >= task.accuracy_slo - TOL
            lat.append(st.arrays["lat"][ok])
            mem.append(st.arrays["mem"][ok])
        if wf.size == 0 or not all(x.size for x in lat):
            continue
        fl, fm, done = front(lat, mem, task.latency_slo_s + TOL, limit=FRONT_MAX)
        if done < len(lat):
            return None
        if fm.size:
            best = min(best, float(fm.min()))
    return best

