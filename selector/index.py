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

from selector.problem import TOL, Problem

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

    @property
    def key(self) -> tuple[int, ...]:
        return (REUSE, self.instance) if self.kind == REUSE else (NEW, self.model, self.config)

    @property
    def shards(self) -> int:
        return self.tp * self.pp


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
            "new": np.array([x.kind == NEW for x in o], dtype=bool),
            "params": np.array([x.active_params_b if x.kind == NEW else 0.0 for x in o], dtype=float),
        }


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


def replicas_for(load_rps: float, capacity_rps: float) -> int:
    """Spec section 3: ``max(1, ceil(load / capacity - 1e-9))``."""
    return max(1, math.ceil(load_rps / capacity_rps - TOL))


def compile_problem(problem: Problem) -> Compiled:
    """Enumerate every stage's options in option-key order."""
    p = problem
    model_idx = {m.name: i for i, m in enumerate(p.models)}
    deploy = {(d.model, d.tp, d.pp): d.mem_gb for d in p.deployments}
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp): r for r in p.perf}
    workflows = []
    for wi, w in enumerate(p.workflows):
        stages = []
        for s in w.stages:
            load = p.task.arrival_rate_rps * s.calls
            opts: list[Option] = []
            for ii, inst in enumerate(p.cluster.instances):
                row = perf.get((w.name, s.name, inst.model, inst.tp, inst.pp))
                if row is None:
                    continue
                m = p.models[model_idx[inst.model]]
                opts.append(Option(REUSE, model_idx[inst.model], -1, ii, inst.tp, inst.pp, row.latency_s,
                                   row.capacity_rps, 0.0, m.accuracy, m.active_params_b, 0,
                                   load / row.capacity_rps))
            for mi, m in enumerate(p.models):
                for ci, c in enumerate(p.configs):
                    row = perf.get((w.name, s.name, m.name, c.tp, c.pp))
                    mem = deploy.get((m.name, c.tp, c.pp))
                    if row is None or mem is None:
                        continue
                    opts.append(Option(NEW, mi, ci, -1, c.tp, c.pp, row.latency_s, row.capacity_rps, mem,
                                       m.accuracy, m.active_params_b,
                                       replicas_for(load, row.capacity_rps), 0.0))
            stages.append(StageOptions(s.name, s.calls, load, tuple(sorted(opts, key=lambda o: o.key))))
        workflows.append(WorkflowOptions(wi, w.name, tuple(stages)))
    return Compiled(p, tuple(workflows))
