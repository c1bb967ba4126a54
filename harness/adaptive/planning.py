"""Two planning rules of the re-selection controller that sit beside the selector (issue 25;
docs/reselection.md, *Packing* and *Forecast*).

**Packing** (:func:`pack`): spec section 9's LeastLoaded puts every new replica on the GPU with
the most free memory, so while empty GPUs exist each new shard takes one (static-peak's seven
tasks hold 40 GPUs for 251 GB). Billed by whole GPUs held, that is the cost. :func:`pack`
re-places the instances a migration *starts* (the selector's plan: same models, configs,
replicas, routes and utilisations; only the GPU ids change): each shard goes to the GPU already
held by the cluster whose compute is busiest while ``busy + u <= limit`` and its memory fits
(best fit), an empty GPU only when no held one fits; the replicas of one model and config in a
plan keep distinct GPUs (as section 9's per-stage rule). An instance that finds no such GPUs
keeps the selector's placement. Section 9's feasibility (memory, ``busy_g <= 1``) holds for
``limit <= 1``; the simulator charges the slowdown of instances that share a GPU (processor
sharing), so goodput measures what packing costs.

**Candidates** (:func:`candidate`): a selector's plan with its migration (what it keeps, starts
and drains) and its score, in GB (``score="gb"``: the memory only this task holds afterwards x
``cooldown_s`` plus what its new instances hold while they start) or in whole GPUs (``"gpu"``: the
GPUs held on the cluster afterwards x ``cooldown_s`` plus the GPUs its new instances newly occupy
x their start-up; GB breaks ties).

**Forecast** (:func:`forecast_ratio`): a seasonal forecast of a task's rate: the profile's
curve (its hour-of-week shape) over a horizon ahead, relative to its mean over the window the
rate was measured on. The level comes from the measured rate; only the shape is forecast.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.adaptive.ledger import Held, Ledger
from selector.deployment import Deployment, InstanceSpec
from selector.problem import TOL, Cluster

#: ``forecast(k, t_s)``: task ``k``'s expected rate (any unit: only ratios are used) at times ``t_s``
Forecast = Callable[[int, np.ndarray], np.ndarray]


def forecast_ratio(fc: Forecast, k: int, now: float, back_s: float, ahead_s: float, n: int = 25) -> float:
    """The largest forecast rate in ``[now, now + ahead_s]`` over the mean forecast rate in
    ``[now - back_s, now]`` (1.0 when the forecast is zero there)."""
    past = np.asarray(fc(k, np.linspace(max(0.0, now - back_s), now, n)), dtype=float).mean()
    ahead = np.asarray(fc(k, np.linspace(now, now + ahead_s, n)), dtype=float).max()
    return float(ahead / past) if past > TOL else 1.0


def cluster_busy(items: Iterable[tuple[Sequence[int], float]]) -> dict[int, float]:
    """Compute busy per GPU from ``(gpus, utilisation)`` of every instance on the cluster."""
    busy: dict[int, float] = {}
    for gpus, u in items:
        for g in gpus:
            busy[g] = busy.get(g, 0.0) + u
    return busy


def pack(raw: Deployment, started: Sequence[str], view: Cluster, busy: dict[int, float], limit: float,
         held_gpus: set[int]) -> Deployment:
    """``raw`` with the instances ids ``started`` re-placed best-fit on ``held_gpus`` (module
    docstring). ``view``: the cluster the plan was selected on (its ``used_gb`` counts every held
    instance); ``busy``: compute busy per GPU (:func:`cluster_busy`), the plan's reuse not yet
    added."""
    free = {g.id: g.mem_gb - g.used_gb for g in view.gpus}
    load = dict(busy)
    for iid, add in raw.reuse:
        inst = next((i for i in view.instances if i.id == iid), None)
        for g in inst.gpus if inst is not None else ():
            load[g] = load.get(g, 0.0) + add
    occupied = set(held_gpus)
    todo = set(started)
    taken: dict[tuple, set[int]] = {}
    out = []
    for inst in raw.instances:
        if inst.id not in todo:
            out.append(inst)
            continue
        key = (inst.model, inst.tp, inst.pp)
        gpus = _fit(inst, free, load, occupied, taken.setdefault(key, set()), limit)
        if gpus is None:
            gpus = inst.gpus                 # the selector's placement
            if any(free[g] < inst.shard_gb - TOL for g in gpus):
                return raw                   # packing took its room: the selector's plan as it is
        for g in gpus:
            free[g] -= inst.shard_gb
            load[g] = load.get(g, 0.0) + inst.utilization
            occupied.add(g)
        taken[key].update(gpus)
        out.append(replace(inst, gpus=tuple(sorted(gpus))))
    return replace(raw, instances=tuple(out))


def _fit(inst: InstanceSpec, free: dict[int, float], load: dict[int, float], occupied: set[int],
         avoid: set[int], limit: float) -> tuple[int, ...] | None:
    """Best-fit GPUs for ``inst``'s shards: occupied GPUs busiest first (then least free memory,
    then id), then empty ones by id; None when too few fit."""
    u, need = inst.utilization, inst.shard_gb

    def ok(g: int) -> bool:
        return g not in avoid and free[g] >= need - TOL and load.get(g, 0.0) + u <= limit + TOL

    held = sorted((g for g in occupied if g in free and ok(g)), key=lambda g: (-load.get(g, 0.0), free[g], g))
    empty = sorted(g for g in free if g not in occupied and ok(g))
    cands = held + empty
    n = inst.tp * inst.pp
    if len(cands) < n or not held:
        return None                          # nothing held fits: the selector's own placement
    return tuple(cands[:n])


@dataclass(frozen=True)
class Candidate:
    """One plan and its migration (module docstring); ``overlap``: the start-up cost in the score's
    unit; ``freed_gpus``: GPUs held before less after; ``own_gpus``: GPUs only this task holds."""

    how: str
    raw: Deployment
    rename: dict
    started: list
    drained: list
    overlap: float
    score: tuple[float, ...]
    freed_gpus: int = 0
    own_gpus: int = 0


def candidate(ledger: Ledger, task: str, how: str, raw: Deployment, view: Cluster, *, keep: bool,
              pack_busy: float | None, score: str, cooldown_s: float,
              startup_s: Callable[[InstanceSpec], float]) -> Candidate:
    """``raw`` (selected on ``view``) as a migration of ``task`` (module docstring): old instances of
    the same model and config kept (``keep``), the started ones packed (``pack_busy``)."""
    rename, started = ledger.match(task, raw, keep=keep)
    if pack_busy is not None and started:
        items = [(h.spec.gpus, sum(h.users.values())) for h in ledger.held.values() if h.live]
        items += [(i.gpus, i.utilization) for i in ledger.outside]
        raw = pack(raw, [i.id for i in started], view, cluster_busy(items), pack_busy, {g for gs, _ in items for g in gs})
        started = [i for i in raw.instances if i.id not in rename]
    kept = set(rename.values())
    own = ledger.own(task)
    drained = [h for h in own if h.spec.id not in kept]
    steady = sum(h.spec.mem_gb for h in own if h.spec.id in kept) + sum(i.mem_gb for i in started)
    overlap = sum(i.mem_gb * startup_s(i) for i in started)
    gone = {h.spec.id for h in drained}
    others = held_gpus(ledger, lambda h: bool(h.users) and any(ledger.task_of(v) != task for v in h.users))
    before = held_gpus(ledger)
    after = held_gpus(ledger, lambda h: h.spec.id not in gone) | {g for i in started for g in i.gpus}
    own_gpus = len({g for h in own for g in h.spec.gpus} - others)
    if score == "gpu":
        overlap = sum(len(set(i.gpus) - before) * startup_s(i) for i in started)
        key: tuple[float, ...] = (len(after) * cooldown_s + overlap, steady * cooldown_s)
    else:
        key = (steady * cooldown_s + overlap,)
    return Candidate(how, raw, rename, started, drained, overlap, key, len(before) - len(after), own_gpus)


def held_gpus(ledger: Ledger, keep: Callable[[Held], bool] = lambda h: True) -> set[int]:
    """GPUs holding a live instance of ``ledger`` that ``keep`` accepts, or one from outside it."""
    return ({g for h in ledger.held.values() if h.live and keep(h) for g in h.spec.gpus}
            | {g for i in ledger.outside for g in i.gpus})
