"""Which blocks of the re-selection controller's back-off room can lift (issue 25; docs/reselection.md,
*Back-off*).

A re-selection that finds no plan for target ``t`` blocks the task at ``t``. Whether more room could
lift the block is asked of two clusters: the *emptied* one (:func:`roomiest`: every GPU as empty as
it gets, only memory outside the ledger used, with the instances the task may reuse now, their
utilisation rounded down to ``UTIL_STEP``) and the *bare* one (empty, nothing to reuse). FlowMaker's
heuristic is not monotone in what a task may reuse (a reused stage costs no parameters, so extra
instances to reuse change the assignment it tries and can lose a plan), hence both. A target with a
plan on either is **room-bound** (retried when the cluster offers more room, as before); with none,
**rate-bound**: freeing memory with the same instances to reuse offers no more than the emptied
cluster (free memory is taken as monotone, as ``roomier`` does), so only a changed set of instances
to reuse (ids added or removed) whose probe finds a plan lifts it. A task with no plan at the least
rate the controller plans for (``min_rate_rps``) that can reuse no instance ever (no other task lists
any of its models and none outside the ledger is of them) is **never feasible**: blocked for the
rest of the run.

Probes are selections on these clusters; :class:`Probes` caches their answers per (task, what it may
reuse, serving variant), monotone in the rate: per key, the largest rate found feasible and the least
found infeasible answer every query outside that interval without a selection.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from selector.problem import Cluster, Gpu

#: reusable instances' utilisation is rounded down to this step in a probe (a cached answer holds
#: for every utilisation within the step)
UTIL_STEP = 0.1

Reuse = frozenset          # of (instance id, utilisation step): what a task may reuse


@dataclass
class Block:
    """A task blocked at ``rate`` (no plan met it) with the cluster ``then`` as it saw it
    (:func:`harness.adaptive.ledger.room`), ``after``: the time before which more room does not lift
    it; ``reuse``: what it could reuse then; ``kind``: ``room``, ``rate`` or ``never`` (module
    docstring)."""

    rate: float
    then: tuple
    after: float
    reuse: Reuse
    kind: str


def roomiest(view: Cluster, base: dict[int, Gpu]) -> tuple[Cluster, Reuse]:
    """``view`` (a task's re-selection cluster) with every GPU's used memory back to ``base`` (what
    is used outside the ledger) and the instances it may reuse kept, their utilisation rounded down
    to ``UTIL_STEP``; with the key of what it may reuse."""
    insts = tuple(i.model_copy(update={"utilization": math.floor(i.utilization / UTIL_STEP + 1e-9) * UTIL_STEP})
                  for i in view.instances)
    gpus = tuple(Gpu(id=g.id, mem_gb=g.mem_gb, used_gb=base[g.id].used_gb) for g in view.gpus)
    return view.model_copy(update={"gpus": gpus, "instances": insts}), \
        frozenset((i.id, round(i.utilization, 6)) for i in insts)


def block_kind(feasible: Callable[[float], bool], target: float, min_rate: float, can_reuse: bool) -> str:
    """``room``, ``rate`` or ``never`` for a block at ``target`` (module docstring); ``feasible(rate)``:
    a probe on the roomiest cluster; ``can_reuse``: whether the task could ever reuse an instance."""
    if feasible(target):
        return "room"
    return "rate" if can_reuse or feasible(min_rate) else "never"


def reuse_ids(reuse: Reuse) -> frozenset[str]:
    """The ids of the instances in ``reuse``."""
    return frozenset(i for i, _ in reuse)


class Probes:
    """Cached feasibility probes (module docstring); ``probe_s``: the seconds the probes that ran
    took; ``probes``: how many ran."""

    def __init__(self) -> None:
        self._bounds: dict[Hashable, tuple[float, float]] = {}   # key -> (largest feasible, least infeasible)
        self.probe_s = 0.0
        self.probes = 0

    def feasible(self, key: Hashable, rate: float, probe: Callable[[float], bool]) -> bool:
        """Whether a plan for ``rate`` exists: ``probe(rate)`` (selections on one cluster) unless
        the answers cached under ``key`` decide it."""
        ok, no = self._bounds.get(key, (-math.inf, math.inf))
        if rate <= ok:
            return True
        if rate >= no:
            return False
        t0 = time.perf_counter()
        found = probe(rate)
        self.probe_s += time.perf_counter() - t0
        self.probes += 1
        self._bounds[key] = (max(ok, rate), no) if found else (ok, min(no, rate))
        return found
