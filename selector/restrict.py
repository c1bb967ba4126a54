"""Sub-spaces of a workflow: the same stages with a subset of each stage's options.

Heuristics search restricted spaces with the exact machinery (``selector.space`` and
``selector.search``) and map the answers back to the full problem's option indices.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from selector.index import NEW, Compiled, StageOptions, WorkflowOptions
from selector.placement import free_memory
from selector.problem import TOL


def restrict(wf: WorkflowOptions, allowed: Sequence[Sequence[int]]) -> WorkflowOptions:
    """``wf`` keeping, per stage, only the option indices in ``allowed[s]`` (ascending)."""
    stages = tuple(StageOptions(st.name, st.calls, st.load_rps, tuple(st.options[i] for i in keep))
                   for st, keep in zip(wf.stages, allowed, strict=True))
    return WorkflowOptions(wf.index, wf.name, stages)


def unrestrict(choice: Sequence[int], allowed: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Map a choice in a restricted space back to the full workflow's option indices."""
    return tuple(allowed[s][c] for s, c in enumerate(choice))


def usable_options(cp: Compiled, wf: WorkflowOptions) -> list[list[int]]:
    """Per stage, the option indices some feasible variant could use. Dropped (each implies a
    violation of spec section 4 whatever the other stages choose): accuracy below the SLO, one
    stage alone over the latency SLO, a reused instance overloaded by this stage alone, more GPU
    slots than the cluster has GPUs of the option's type (section 10), a shard larger than the
    freest GPU of that type. Under ``sharing: compute`` (section 9) also: new replicas needing
    more GPUs of their type than have room for their ``u_s``, and a reused instance one of whose
    GPUs this stage alone pushes above 1 (busy only grows)."""
    task, cluster = cp.problem.task, cp.problem.cluster
    free = free_memory(cluster)
    max_free = {t: max(free[g] for g in ids) for t, ids in cp.gpus_by_type.items()}
    n_gpus = {t: len(ids) for t, ids in cp.gpus_by_type.items()}
    busy = cp.base_busy
    out = []
    for st in wf.stages:
        keep = []
        for i, o in enumerate(st.options):
            if o.accuracy < task.accuracy_slo - TOL or st.calls * o.latency_s > task.latency_slo_s + TOL:
                continue
            if o.kind == NEW and (o.replicas * o.shards > n_gpus.get(o.gpu_type, 0)
                                  or o.mem_gb / o.shards > max_free.get(o.gpu_type, 0.0) + TOL):
                continue
            if o.kind != NEW and cp.base_util[o.instance] + o.util_add > 1.0 + TOL:
                continue
            if cp.compute and not _compute_usable(cp, o, busy):
                continue
            keep.append(i)
        out.append(keep)
    return out


def _compute_usable(cp: Compiled, o, busy) -> bool:
    if o.kind == NEW:
        mine = np.array([cp.problem.cluster.gpu_type(g) == o.gpu_type for g in cp.gpu_ids], dtype=bool)
        return int(((busy + o.replica_util <= 1.0 + TOL) & mine).sum()) >= o.replicas * o.shards
    return bool((busy[cp.instance_gpus[o.instance] > 0] + o.util_add <= 1.0 + TOL).all())
