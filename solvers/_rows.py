"""Rows that both exact backends (``milp``, ``milp-pulp``) add to their relaxations, from the
options ``solvers._exact.prepare`` keeps: necessary conditions of placement and the exact reuse
check of spec section 9 per GPU. Each is a plain ``(weights, capacity)`` description that a
backend writes in its own units."""
from __future__ import annotations

import math

from selector.index import NEW, REUSE
from selector.placement import free_memory
from selector.problem import TOL
from solvers._exact import Prepared


def type_memory_rows(data: Prepared, keys) -> list[tuple[dict, float]]:
    """Section 10, necessary for placement on a cluster of several GPU types: per type, the new
    memory of the options of that type (``{key: replicas * mem_gb}``) fits the type's free memory."""
    cp = data.cp
    if not cp.typed:
        return []
    free = free_memory(cp.problem.cluster)
    rows = []
    for t, ids in cp.gpus_by_type.items():
        mem = {k: data.opt(*k).replicas * data.opt(*k).mem_gb for k in keys
               if data.opt(*k).kind == NEW and data.opt(*k).gpu_type == t}
        if mem:
            rows.append((mem, sum(free[g] for g in ids)))
    return rows


PACKING_KS = (1, 2, 3, 4)
PACKING_SHIFT = 1e-8     # > the spec's 1e-9, so shifted utilisations on one GPU sum to below 1


def reuse_by_gpu(data: Prepared, keys) -> dict[int, list[tuple[tuple, float]]]:
    """Section 9's reuse check, per GPU of a reused instance that two or more options reuse: the
    (option key, utilisation the option adds) of each; the row is sum util y <= 1 - busy_g."""
    by_gpu: dict[int, list[tuple[tuple, float]]] = {}
    for k in keys:
        o = data.opt(*k)
        if o.kind == REUSE:
            for g in map(int, data.cp.instance_gpus[o.instance].nonzero()[0]):
                by_gpu.setdefault(g, []).append((k, o.util_add))
    return {g: terms for g, terms in by_gpu.items() if len(terms) > 1}


def packing_rows(data: Prepared) -> list[tuple[dict[tuple[int, int, int], int], int]]:
    """Section 9's bin-packing conditions, necessary for any placement (so for LeastLoaded):
    ``[(weight per (workflow, stage, option), capacity)]`` for ``k`` in ``PACKING_KS``, meaning
    ``sum weight * y <= capacity``.

    A GPU takes shards only while its ``busy`` plus their ``u`` stays within ``1 + 1e-9``; with
    ``v = max(0, x - PACKING_SHIFT)`` the values on one GPU then sum to below 1, so (the floor being
    superadditive) ``sum floor((k+1) v) <= k`` per GPU. Summed over GPUs, with the GPU's busy
    as one more value (reuse only raises it): ``sum over new shards floor((k+1) v(u_s)) <=
    sum_g max(0, k - floor((k+1) v(busy_g)))`` (GPUs above ``1 + 1e-9`` take nothing). For
    ``k = 1``: shards above one half cannot share a GPU. Weights and capacities are integers.

    On a typed cluster (section 10) a shard goes only on GPUs of its config's type, so the rows
    are written per type, over that type's GPUs and options (one row per ``k`` when untyped)."""
    cp = data.cp
    rows = []
    for t, busy in _busy_by_type(cp).items():
        for k in PACKING_KS:
            def level(x: float) -> int:
                return math.floor((k + 1) * max(0.0, x - PACKING_SHIFT))
            cap = sum(0 if b > 1.0 + TOL else max(0, k - level(float(b))) for b in busy)
            weights = {}
            for w, stages in enumerate(data.options):
                for s, opts in enumerate(stages):
                    for o in opts:
                        op = data.opt(w, s, o)
                        if op.kind == NEW and op.gpu_type == t and level(op.replica_util) > 0:
                            weights[w, s, o] = op.replicas * op.shards * level(op.replica_util)
            if weights:
                rows.append((weights, cap))
    return rows


def _busy_by_type(cp) -> dict[str, list[float]]:
    """Section 9's ``busy_g`` before the variant, grouped by GPU type (section 10)."""
    pos = {g: k for k, g in enumerate(cp.gpu_ids)}
    return {t: [float(cp.base_busy[pos[g]]) for g in ids] for t, ids in cp.gpus_by_type.items()}


def compute_room_rows(data: Prepared, keys) -> list[tuple[dict, float]]:
    """Section 9's room, necessary for any placement, per GPU type (section 10; one row when
    untyped): the utilisation the options add over the GPUs of type ``t`` (new shards of that
    type, reuse of instances on it: ``Option.compute_load``) is at most ``sum_g max(0, 1 + 1e-9 -
    busy_g)`` over those GPUs. ``[({key: load}, room)]``."""
    cp = data.cp
    types = [cp.problem.cluster.instance_type(i) for i in cp.problem.cluster.instances]
    rows = []
    for t, busy in _busy_by_type(cp).items():
        load = {k: data.opt(*k).compute_load for k in keys
                if (data.opt(*k).gpu_type if data.opt(*k).kind == NEW else types[data.opt(*k).instance]) == t}
        if load:
            rows.append((load, sum(max(0.0, 1.0 + TOL - b) for b in busy)))
    return rows
