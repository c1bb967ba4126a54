"""LeastLoaded placement of new replicas (spec section 4, constraint 4)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from selector.problem import TOL, Cluster


@dataclass(frozen=True)
class StageDemand:
    """What one stage asks of the cluster: ``replicas`` replicas of ``shards`` shards each."""

    replicas: int
    shards: int
    shard_gb: float


def free_memory(cluster: Cluster) -> dict[int, float]:
    """Free GB per GPU id (``mem_gb - used_gb``), in ascending id order."""
    return {g.id: g.mem_gb - g.used_gb for g in sorted(cluster.gpus, key=lambda g: g.id)}


def place(free_gb: dict[int, float], demands: Sequence[StageDemand]) -> list[list[list[int]]] | None:
    """Place every stage's replicas in order; returns per stage, per replica, its sorted GPU ids,
    or ``None`` when some replica cannot be placed. ``free_gb`` is not modified."""
    free = dict(free_gb)
    ids = sorted(free)
    out: list[list[list[int]]] = []
    for d in demands:
        used_by_stage: set[int] = set()
        stage_out: list[list[int]] = []
        for _ in range(d.replicas):
            chosen = _pick(free, ids, used_by_stage, d.shards, d.shard_gb)
            if chosen is None:
                return None
            stage_out.append(sorted(chosen))
        out.append(stage_out)
    return out


def _pick(free: dict[int, float], ids: list[int], taken: set[int], n: int, shard_gb: float) -> list[int] | None:
    chosen: list[int] = []
    for _ in range(n):
        cands = [g for g in ids if g not in taken]
        if not cands:
            return None
        top = max(free[g] for g in cands)
        best = next(g for g in cands if free[g] >= top - TOL)   # ascending id: smallest tied id wins
        best_free = free[best]
        if best_free < shard_gb - TOL:
            return None
        free[best] -= shard_gb
        taken.add(best)
        chosen.append(best)
    return chosen
