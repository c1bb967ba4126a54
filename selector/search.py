"""Exact best-of-a-set search shared by the enumerating selectors.

A :class:`BestWindow` is fed chunks of variants (``selector.space``) and keeps every
placeable variant whose cost ties the best seen so far (within the spec's 1e-9), so that
``selector.evaluate.choose`` over its window gives the section-5 optimum of all variants
fed. Survivors of constraints 1-3 are visited in increasing (cost, key) order and only those
that can still tie are placed with LeastLoaded (placements cached by the variant's demand).
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from selector.evaluate import placement, routed
from selector.index import NEW, Compiled, WorkflowOptions
from selector.problem import TOL
from selector.space import Chunk


class Candidate(NamedTuple):
    value: float                  # the objective's value (cost, or U under usd_per_hour)
    latency_s: float
    new_gpus: int
    key: tuple[int, int]          # (workflow, flat index): same order as the spec key
    choice: tuple[int, ...]


class BestWindow:
    """Keeps every placeable variant whose objective value (cost, or section 10's ``U``) ties the
    best seen so far (within 1e-9)."""

    def __init__(self, cp: Compiled, *, deadline: float | None = None) -> None:
        self.cp = cp
        #: a ``time.perf_counter()`` value: past it a scan stops placing (``cut`` set); the window
        #: then holds what was placed so far, so its best is feasible but maybe not the chunk's best
        self.deadline = deadline
        self.cut = False
        self.window: list[Candidate] = []
        self.best_cost = np.inf
        self.evaluated = 0
        self._placeable: dict[tuple, bool] = {}

    def scan(self, ch: Chunk) -> None:
        self.evaluated += ch.flat.size
        task = self.cp.problem.task
        ok = ((ch.acc >= task.accuracy_slo - TOL) & (ch.lat <= task.latency_slo_s + TOL)
              & (ch.max_util <= 1.0 + TOL) & ch.fits_hint)
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return
        cost = ch.value[idx]
        if np.isfinite(self.best_cost):
            keep = cost <= self.best_cost + TOL * max(1.0, self.best_cost)
            idx, cost = idx[keep], cost[keep]
        chunk_min = None
        for n, j in enumerate(np.lexsort((ch.flat[idx], cost))):
            if self.deadline is not None and n % 64 == 63 and time.perf_counter() > self.deadline:
                self.cut = True
                break
            c = float(cost[j])
            if chunk_min is not None and c > chunk_min + TOL * max(1.0, chunk_min):
                break
            row = idx[j]
            choice = tuple(int(x) for x in ch.choice[row])
            if not self._fits(ch.wf, choice):
                continue
            chunk_min = c if chunk_min is None else chunk_min
            self.window.append(Candidate(c, float(ch.lat[row]), int(ch.gpus[row]),
                                         (ch.workflow, int(ch.flat[row])), choice))
        if chunk_min is not None and chunk_min < self.best_cost:
            self.best_cost = chunk_min
            lim = chunk_min + TOL * max(1.0, chunk_min)
            self.window = [c for c in self.window if c.value <= lim]

    def _fits(self, wf: WorkflowOptions, choice: tuple[int, ...]) -> bool:
        opts = [st.options[c] for st, c in zip(wf.stages, choice)]
        # what LeastLoaded sees: the new stages' demands and (section 9) the utilisation routed
        demand: tuple = tuple((o.replicas, o.shards, o.mem_gb, o.replica_util if self.cp.compute else 0.0,
                               o.gpu_type) for o in opts if o.kind == NEW)
        if self.cp.compute:
            demand += (tuple(sorted(routed(opts).items())),)
        if demand not in self._placeable:
            self._placeable[demand] = placement(self.cp, opts) is not None
        return self._placeable[demand]
