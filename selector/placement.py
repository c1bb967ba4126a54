"""LeastLoaded placement of new replicas (spec section 4, constraint 4; section 9 for
``sharing: compute``; the fair-share check for ``sharing: fair-share``, docs/selection.md)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from selector.deployment import Work, work_after
from selector.problem import TOL, Cluster


@dataclass(frozen=True)
class StageDemand:
    """What one stage asks of the cluster: ``replicas`` replicas of ``shards`` shards each;
    ``util``: each replica's utilisation ``u_s`` (spec section 9; read only under compute sharing)."""

    replicas: int
    shards: int
    shard_gb: float
    util: float = 0.0
    gpu_type: str | None = None   # section 10: its shards go only on GPUs of this type (None: any)


def free_memory(cluster: Cluster) -> dict[int, float]:
    """Free GB per GPU id (``mem_gb - used_gb``), in ascending id order."""
    return {g.id: g.mem_gb - g.used_gb for g in sorted(cluster.gpus, key=lambda g: g.id)}


def gpu_types(cluster: Cluster) -> dict[int, str]:
    """Spec section 10: each GPU id's type."""
    return {g.id: g.type for g in cluster.gpus}


def gpu_busy(cluster: Cluster) -> dict[int, float]:
    """Spec section 9's ``busy_g`` before a variant: the summed utilisation of the instances
    with a shard on each GPU, in ascending id order."""
    busy = {g.id: 0.0 for g in sorted(cluster.gpus, key=lambda g: g.id)}
    for inst in cluster.instances:
        for g in inst.gpus:
            busy[g] += inst.utilization
    return busy


def reuse_busy(cluster: Cluster, routed: Mapping[int, float]) -> dict[int, float]:
    """``busy_g`` after reuse (section 9's first step): ``routed`` maps an instance index to the
    utilisation the variant routes to it, which each of its GPUs gains."""
    busy = gpu_busy(cluster)
    for i, add in routed.items():
        for g in cluster.instances[i].gpus:
            busy[g] += add
    return busy


def reused_gpus_ok(cluster: Cluster, routed: Mapping[int, float], busy: Mapping[int, float]) -> bool:
    """Section 9: after reuse, no GPU of a reused instance may be busier than 1 (+1e-9)."""
    return all(busy[g] <= 1.0 + TOL for i in routed for g in cluster.instances[i].gpus)


def tenant_utils(cluster: Cluster, routed: Mapping[int, float]) -> dict[int, list[float]]:
    """Fair share: per GPU id, the utilisation of each instance with a shard there, after
    ``routed`` (instance index -> utilisation the variant routes to it)."""
    out: dict[int, list[float]] = {g.id: [] for g in sorted(cluster.gpus, key=lambda g: g.id)}
    for i, inst in enumerate(cluster.instances):
        for g in inst.gpus:
            out[g].append(inst.utilization + routed.get(i, 0.0))
    return out


def fair_room(utils: Sequence[float], extra: float | None = None) -> bool:
    """Whether every instance on a GPU (``utils``, plus one new of utilisation ``extra``) keeps
    its utilisation within its processor share, ``1 / tenants``: ``tenants * max u <= 1 + 1e-9``."""
    us = list(utils) if extra is None else [*utils, extra]
    return not us or len(us) * max(us) <= 1.0 + TOL


def reused_fair_ok(cluster: Cluster, routed: Mapping[int, float], tenants: Mapping[int, list[float]]) -> bool:
    """Fair share after reuse: every GPU of a reused instance keeps :func:`fair_room`."""
    return all(fair_room(tenants[g]) for i in routed for g in cluster.instances[i].gpus)


def reused_work_ok(cluster: Cluster, work: Mapping[int, Work]) -> bool:
    """Fair share's work rule after reuse (docs/selection.md "Fair-share placement"): ``work``
    maps a reused instance's index to the call time the variant routes to it per second (sum of
    ``load x latency_s``, erlangs) and the least ``latency_s x capacity_rps`` among the stages
    routed there. The instance's work after reuse stays within the least such cap of every stage
    it serves, its own record's included (``Instance.work_cap_erlangs``; None: no record)."""
    for i, (add, cap) in work.items():
        inst = cluster.instances[i]
        after, limit = work_after(inst.work_erlangs, inst.work_cap_erlangs, add, cap)
        if after > limit + TOL:
            return False
    return True


def place(free_gb: dict[int, float], demands: Sequence[StageDemand],
          busy: Mapping[int, float] | None = None, *,
          types: Mapping[int, str] | None = None,
          tenants: Mapping[int, list[float]] | None = None) -> list[list[list[int]]] | None:
    """Place every stage's replicas in order; returns per stage, per replica, its sorted GPU ids,
    or ``None`` when some replica cannot be placed. ``busy`` (GPU id -> utilisation after reuse)
    turns on section 9: a GPU is a candidate only while ``busy + util <= 1 + 1e-9``, and placing
    a shard adds ``util`` to it. ``types`` (GPU id -> type, :func:`gpu_types`) turns on section 10:
    a demand with a ``gpu_type`` is a candidate only on GPUs of that type. ``tenants`` (GPU id ->
    its instances' utilisations after reuse, :func:`tenant_utils`) turns on the fair-share check:
    a GPU is a candidate only while :func:`fair_room` holds with the new shard's ``util``, which
    then joins its tenants. None of ``free_gb``, ``busy`` and ``tenants`` is modified."""
    free = dict(free_gb)
    load = None if busy is None else dict(busy)
    fair = None if tenants is None else {g: list(us) for g, us in tenants.items()}
    ids = sorted(free)
    out: list[list[list[int]]] = []
    for d in demands:
        if d.gpu_type is not None and types is None:
            raise ValueError("a typed demand needs the GPUs' types (place(..., types=gpu_types(cluster)))")
        mine = ids if d.gpu_type is None else [g for g in ids if types[g] == d.gpu_type]
        used_by_stage: set[int] = set()
        stage_out: list[list[int]] = []
        for _ in range(d.replicas):
            chosen = _pick(free, load, mine, used_by_stage, d, fair)
            if chosen is None:
                return None
            stage_out.append(sorted(chosen))
        out.append(stage_out)
    return out


def _pick(free: dict[int, float], load: dict[int, float] | None, ids: list[int], taken: set[int],
          d: StageDemand, fair: dict[int, list[float]] | None = None) -> list[int] | None:
    chosen: list[int] = []
    for _ in range(d.shards):
        cands = [g for g in ids if g not in taken and (load is None or load[g] + d.util <= 1.0 + TOL)
                 and (fair is None or fair_room(fair[g], d.util))]
        if not cands:
            return None
        top = max(free[g] for g in cands)
        best = next(g for g in cands if free[g] >= top - TOL)   # ascending id: smallest tied id wins
        if free[best] < d.shard_gb - TOL:
            return None
        free[best] -= d.shard_gb
        if load is not None:
            load[best] += d.util
        if fair is not None:
            fair[best].append(d.util)
        taken.add(best)
        chosen.append(best)
    return chosen
