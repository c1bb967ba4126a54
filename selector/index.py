"""A problem compiled for search: every stage's options, sorted by the spec's option key,
with the per-option numbers (section 3) precomputed as numpy arrays.

All selectors read the variant space through :func:`compile_problem`, so they agree on
which options exist and on their order (the last tie-break of section 5).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from selector.problem import DEFAULT_GPU_TYPE, TOL, Problem

REUSE, NEW = 0, 1


@dataclass(frozen=True)
class Option:
    """One choice for one stage: ``new(model, config)`` or ``reuse(instance)``."""

    kind: int                 # REUSE or NEW
    model: int                # index into problem.models
    config: int               # index into problem.configs (-1 for reuse)
    instance: int             # index into cluster.instances (-1 for new)
    tp: int
    pp: int
    latency_s: float          # one call
    capacity_rps: float
    mem_gb: float             # one instance's footprint (0.0 for reuse)
    accuracy: float
    active_params_b: float
    replicas: int             # new replicas (0 for reuse)
    util_add: float           # load / capacity routed to the instance (0.0 for new)
    replica_util: float = 0.0  # u_s = load / (replicas * capacity) of each new replica (section 9; 0.0 for reuse)
    gpu_count: int = 0        # GPUs the option works on: replicas * shards (new) or the instance's (reuse)
    gpu_type: str = DEFAULT_GPU_TYPE  # section 10: the config's type (new) or the instance's (reuse)
    usd_per_hour: float = 0.0  # section 10: replicas * shards * price of its type (new; 0.0 for reuse or no prices)

    @property
    def key(self) -> tuple[int, ...]:
        return (REUSE, self.instance) if self.kind == REUSE else (NEW, self.model, self.config)

    @property
    def shards(self) -> int:
        return self.tp * self.pp

    @property
    def compute_load(self) -> float:
        """Utilisation the option adds over all the GPUs it works on (section 9): ``replicas *
        shards * u_s`` for new replicas, ``util_add`` times the instance's GPU count for reuse."""
        return self.replica_util * self.gpu_count if self.kind == NEW else self.util_add * self.gpu_count


@dataclass(frozen=True)
class StageOptions:
    name: str
    calls: int
    load_rps: float
    options: tuple[Option, ...]

    @cached_property
    def arrays(self) -> dict[str, np.ndarray]:
        o = self.options
        return {
            "acc": np.array([x.accuracy for x in o], dtype=float),
            "lat": np.array([self.calls * x.latency_s for x in o], dtype=float),
            "mem": np.array([x.replicas * x.mem_gb for x in o], dtype=float),
            "gpus": np.array([x.replicas * x.shards for x in o], dtype=np.int64),
            "inst": np.array([x.instance for x in o], dtype=np.int64),
            "util": np.array([x.util_add for x in o], dtype=float),
            "cload": np.array([x.compute_load for x in o], dtype=float),
            "new": np.array([x.kind == NEW for x in o], dtype=bool),
            "params": np.array([x.active_params_b if x.kind == NEW else 0.0 for x in o], dtype=float),
            "usd": np.array([x.usd_per_hour for x in o], dtype=float),
        }


    def type_mask(self, gpu_type: str, *, reuse: bool = False) -> np.ndarray:
        """Per option: a new deployment on GPUs of ``gpu_type`` (section 10), or with ``reuse``
        any option working on such GPUs (also the reuse of an instance of that type)."""
        masks = self.__dict__.setdefault("_type_masks", {})
        if (gpu_type, reuse) not in masks:
            masks[gpu_type, reuse] = np.array([(reuse or x.kind == NEW) and x.gpu_type == gpu_type
                                               for x in self.options], dtype=bool)
        return masks[gpu_type, reuse]


@dataclass(frozen=True)
class WorkflowOptions:
    index: int
    name: str
    stages: tuple[StageOptions, ...]

    @property
    def size(self) -> int:
        return math.prod(len(s.options) for s in self.stages)

    @property
    def radices(self) -> tuple[int, ...]:
        return tuple(len(s.options) for s in self.stages)


@dataclass(frozen=True)
class Compiled:
    problem: Problem
    workflows: tuple[WorkflowOptions, ...]

    @property
    def variant_space(self) -> int:
        return sum(w.size for w in self.workflows)

    @cached_property
    def base_util(self) -> np.ndarray:
        return np.array([i.utilization for i in self.problem.cluster.instances], dtype=float)

    @property
    def compute(self) -> bool:
        """True under ``cluster.sharing: compute`` (spec section 9)."""
        return self.problem.cluster.compute

    @property
    def usd(self) -> bool:
        """True under ``objective: usd_per_hour`` (spec section 10): minimise ``U``, not ``cost``."""
        return self.problem.objective == "usd_per_hour"

    @property
    def priced(self) -> bool:
        """True when ``cluster.prices`` is given, so plans report ``usd_per_hour`` (section 10)."""
        return self.problem.cluster.prices is not None

    @cached_property
    def typed(self) -> bool:
        """True when the cluster's GPUs have more than one type (section 10)."""
        return len({g.type for g in self.problem.cluster.gpus}) > 1

    @cached_property
    def type_room(self) -> dict[str, tuple[float, int, float]]:
        """Section 10: per GPU type, its GPUs' free memory in all (GB), how many there are, and
        section 9's compute room on them (``sum max(0, 1 + 1e-9 - busy_g)``)."""
        free = {g.id: g.mem_gb - g.used_gb for g in self.problem.cluster.gpus}
        busy = dict(zip(self.gpu_ids, self.base_busy))
        return {t: (sum(free[g] for g in ids), len(ids), sum(max(0.0, 1.0 + TOL - float(busy[g])) for g in ids))
                for t, ids in self.gpus_by_type.items()}

    @cached_property
    def gpus_by_type(self) -> dict[str, tuple[int, ...]]:
        """Section 10: the ids of each type's GPUs, ascending."""
        out: dict[str, list[int]] = {}
        for g in sorted(self.problem.cluster.gpus, key=lambda g: g.id):
            out.setdefault(g.type, []).append(g.id)
        return {t: tuple(ids) for t, ids in out.items()}

    @cached_property
    def gpu_ids(self) -> tuple[int, ...]:
        """GPU ids in ascending order; GPU arrays below are indexed by position in this tuple."""
        return tuple(sorted(g.id for g in self.problem.cluster.gpus))

    @cached_property
    def base_busy(self) -> np.ndarray:
        """Section 9's ``busy_g`` before any variant, per GPU position."""
        from selector.placement import gpu_busy
        busy = gpu_busy(self.problem.cluster)
        return np.array([busy[g] for g in self.gpu_ids], dtype=float)

    @cached_property
    def instance_gpus(self) -> np.ndarray:
        """``[instances, gpus]`` 0/1 matrix: instance ``i`` has a shard on GPU position ``g``."""
        pos = {g: k for k, g in enumerate(self.gpu_ids)}
        out = np.zeros((len(self.problem.cluster.instances), len(self.gpu_ids)))
        for i, inst in enumerate(self.problem.cluster.instances):
            out[i, [pos[g] for g in inst.gpus]] = 1.0
        return out

    @cached_property
    def compute_room(self) -> float:
        """Utilisation the cluster can still take in all (section 9): ``sum_g max(0, 1 + 1e-9 - busy_g)``."""
        return float(np.maximum(0.0, 1.0 + TOL - self.base_busy).sum())


#: more replicas than any cluster holds GPUs: an option needing them never fits (an answer, not an overflow)
MAX_REPLICAS = 2**31


def replicas_for(load_rps: float, capacity_rps: float) -> int:
    """Spec section 3: ``max(1, ceil(load / capacity - 1e-9))``, at most :data:`MAX_REPLICAS`."""
    ratio = load_rps / capacity_rps - TOL
    return max(1, math.ceil(ratio)) if ratio < MAX_REPLICAS else MAX_REPLICAS


_LAST: list = []   # the last (problem, compiled) pair: a Problem is immutable, so it is found by identity


def compile_problem(problem: Problem) -> Compiled:
    """Enumerate every stage's options in option-key order. The last problem compiled is kept (by
    identity), so a solver that warm-starts from another one on the same problem compiles it once."""
    if _LAST and _LAST[0] is problem:
        return _LAST[1]
    cp = _compile(problem)
    _LAST[:] = [problem, cp]
    return cp


def _compile(problem: Problem) -> Compiled:
    p = problem
    model_idx = {m.name: i for i, m in enumerate(p.models)}
    deploy = {(d.model, d.tp, d.pp, d.gpu_type): d.mem_gb for d in p.deployments}
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r for r in p.perf}
    prices = p.cluster.prices or {}
    types = [p.cluster.instance_type(i) for i in p.cluster.instances]
    workflows = []
    for wi, w in enumerate(p.workflows):
        stages = []
        for s in w.stages:
            load = p.task.arrival_rate_rps * s.calls
            opts: list[Option] = []
            for ii, inst in enumerate(p.cluster.instances):
                row = perf.get((w.name, s.name, inst.model, inst.tp, inst.pp, types[ii]))
                if row is None:
                    continue
                m = p.models[model_idx[inst.model]]
                opts.append(Option(REUSE, model_idx[inst.model], -1, ii, inst.tp, inst.pp, row.latency_s,
                                   row.capacity_rps, 0.0, m.accuracy, m.active_params_b, 0,
                                   load / row.capacity_rps, 0.0, len(inst.gpus), types[ii]))
            for mi, m in enumerate(p.models):
                for ci, c in enumerate(p.configs):
                    row = perf.get((w.name, s.name, m.name, c.tp, c.pp, c.gpu_type))
                    mem = deploy.get((m.name, c.tp, c.pp, c.gpu_type))
                    if row is None or mem is None:
                        continue
                    reps = replicas_for(load, row.capacity_rps)
                    opts.append(Option(NEW, mi, ci, -1, c.tp, c.pp, row.latency_s, row.capacity_rps, mem,
                                       m.accuracy, m.active_params_b, reps, 0.0,
                                       load / (reps * row.capacity_rps), reps * c.tp * c.pp, c.gpu_type,
                                       reps * c.tp * c.pp * prices.get(c.gpu_type, 0.0)))
            stages.append(StageOptions(s.name, s.calls, load, tuple(sorted(opts, key=lambda o: o.key))))
        workflows.append(WorkflowOptions(wi, w.name, tuple(stages)))
    return Compiled(p, tuple(workflows))
