"""Vectorised, chunked enumeration of a workflow's variants.

Variants of one workflow are numbered in mixed radix (first stage most significant); since
each stage's options are sorted by option key, ascending flat index is ascending spec key
(section 5's last tie-break). A chunk evaluates constraints 1-3 for up to ``chunk`` variants
at once with numpy and never materialises the whole product, so memory stays bounded.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from selector.index import Compiled, WorkflowOptions
from selector.problem import TOL, objective_value

DEFAULT_CHUNK = 1 << 16
#: variants x stages evaluated per block at most: ~20 ms on an idle core, so a deadline checked
#: between blocks is kept within a few hundredths of a second even on a loaded machine
CHUNK_CELLS = 1 << 17


@dataclass
class Chunk:
    """Derived quantities of variants ``start .. start+len`` of one workflow (section 3)."""

    wf: WorkflowOptions     # the (possibly restricted) space the choices index into
    flat: np.ndarray        # flat variant index within the workflow (int64)
    choice: np.ndarray      # [n, stages] option index per stage
    acc: np.ndarray
    lat: np.ndarray
    mem: np.ndarray
    gpus: np.ndarray
    max_util: np.ndarray    # highest utilisation over reused instances (0 when none)
    fits_hint: np.ndarray   # necessary conditions of placement hold (section 9's ones too)
    usd: np.ndarray         # section 10's U (zeros without prices)
    objective: str = "gb_s"

    @property
    def workflow(self) -> int:
        return self.wf.index

    @property
    def cost(self) -> np.ndarray:
        return self.mem * self.lat

    @property
    def value(self) -> np.ndarray:
        """The objective's value per variant (``selector.problem.objective_value``)."""
        return objective_value(self.objective, self.cost, self.usd)


def decode(flat: np.ndarray, radices: tuple[int, ...]) -> np.ndarray:
    """Mixed-radix digits of ``flat`` (first radix most significant)."""
    out = np.empty((flat.size, len(radices)), dtype=np.int64)
    rest = flat.copy()
    for s in range(len(radices) - 1, -1, -1):
        out[:, s] = rest % radices[s]
        rest //= radices[s]
    return out


def chunks(cp: Compiled, wf: WorkflowOptions, *, chunk: int = DEFAULT_CHUNK,
           start: int = 0) -> Iterator[Chunk]:
    """Yield the workflow's variants in ascending flat index, ``chunk`` at a time."""
    size = wf.size
    free_total = sum(g.mem_gb - g.used_gb for g in cp.problem.cluster.gpus)
    n_gpus = len(cp.problem.cluster.gpus)
    # a block's work is variants x stages: deep workflows get fewer variants per block, so that
    # a block stays ~10 ms and a caller's deadline check between blocks keeps its time limit
    chunk = max(64, min(chunk, CHUNK_CELLS // max(1, len(wf.stages))))
    for lo in range(start, size, chunk):
        flat = np.arange(lo, min(size, lo + chunk), dtype=np.int64)
        yield evaluate_chunk(cp, wf, flat, free_total=free_total, n_gpus=n_gpus)


def evaluate_chunk(cp: Compiled, wf: WorkflowOptions, flat: np.ndarray, *, free_total: float,
                   n_gpus: int) -> Chunk:
    choice = decode(flat, wf.radices)
    n = flat.size
    acc = np.full(n, np.inf)
    lat = np.zeros(n)
    mem = np.zeros(n)
    gpus = np.zeros(n, dtype=np.int64)
    usd = np.zeros(n)
    hint = np.ones(n, dtype=bool)
    for s, st in enumerate(wf.stages):     # stage order, as the spec sums
        a = st.arrays
        c = choice[:, s]
        np.minimum(acc, a["acc"][c], out=acc)
        lat += a["lat"][c]
        mem += a["mem"][c]
        gpus += a["gpus"][c]
        usd += a["usd"][c]
        hint &= a["gpus"][c] <= n_gpus      # a stage's shards sit on distinct GPUs
    hint &= mem <= free_total + TOL
    if cp.typed:
        hint &= _types_fit(cp, wf, choice)
    max_util = _max_util(cp, wf, choice)
    if cp.compute:
        hint &= _compute_hint(cp, wf, choice)
    return Chunk(wf, flat, choice, acc, lat, mem, gpus, max_util, hint, usd, cp.problem.objective)


def _types_fit(cp: Compiled, wf: WorkflowOptions, choice: np.ndarray) -> np.ndarray:
    """Section 10's necessary conditions, per variant: the new memory on each GPU type fits that
    type's free memory, and each new stage's GPU slots fit the number of GPUs of its type; under
    ``sharing: compute`` also section 9's room, per type (``Compiled.type_room``)."""
    ok = np.ones(choice.shape[0], dtype=bool)
    for t, (free, count, room) in cp.type_room.items():
        mem = np.zeros(choice.shape[0])
        load = np.zeros(choice.shape[0])
        for s, st in enumerate(wf.stages):
            c = choice[:, s]
            mine = st.type_mask(t)[c]
            mem += np.where(mine, st.arrays["mem"][c], 0.0)
            ok &= ~mine | (st.arrays["gpus"][c] <= count)
            if cp.compute:     # a reuse option's type is its instance's
                load += np.where(st.type_mask(t, reuse=True)[c], st.arrays["cload"][c], 0.0)
        ok &= (mem <= free + TOL) & (load <= room + TOL)
    return ok


def _compute_hint(cp: Compiled, wf: WorkflowOptions, choice: np.ndarray) -> np.ndarray:
    """Section 9's necessary conditions, per variant: after reuse, no GPU of a reused instance is
    busier than 1 (exact: it fails constraint 4), and all the utilisation the variant adds fits
    the cluster's summed room ``sum_g max(0, 1 - busy_g)``."""
    cload = np.zeros(choice.shape[0])
    for s, st in enumerate(wf.stages):
        cload += st.arrays["cload"][choice[:, s]]
    ok = cload <= cp.compute_room + TOL
    inst = [st.arrays["inst"][choice[:, s]] for s, st in enumerate(wf.stages)]
    if not any((i >= 0).any() for i in inst):
        return ok
    on = np.vstack([cp.instance_gpus, np.zeros((1, len(cp.gpu_ids)))])   # row -1: a new option
    busy = np.broadcast_to(cp.base_busy, (choice.shape[0], len(cp.gpu_ids))).copy()
    touched = np.zeros(busy.shape, dtype=bool)
    for s, st in enumerate(wf.stages):
        rows = on[inst[s]]
        busy += rows * st.arrays["util"][choice[:, s]][:, None]
        touched |= rows > 0
    return ok & (np.where(touched, busy, 0.0) <= 1.0 + TOL).all(axis=1)


def _max_util(cp: Compiled, wf: WorkflowOptions, choice: np.ndarray) -> np.ndarray:
    """Per variant, the highest post-routing utilisation over the instances it reuses: per reused
    instance ``k``, ``base_k + sum_t util_t [inst_t == k]`` (summed in stage order). One pass per
    stage into a variants x instances table, not stages squared (a 200-stage workflow took
    seconds per block, past any time limit; issue 28)."""
    n = choice.shape[0]
    inst = [st.arrays["inst"][choice[:, s]] for s, st in enumerate(wf.stages)]
    out = np.zeros(n)
    used = sorted({int(k) for st in wf.stages for k in st.arrays["inst"] if k >= 0})
    if not used:
        return out
    col = np.full(len(cp.base_util) + 1, len(used))      # instance -> column; -1 (new) -> a spare one
    col[used] = np.arange(len(used))
    total = np.zeros((n, len(used) + 1))
    total[:, :-1] = cp.base_util[used]
    hit = np.zeros(total.shape, dtype=bool)
    rows = np.arange(n)
    for s, st in enumerate(wf.stages):
        c = col[inst[s]]
        total[rows, c] += st.arrays["util"][choice[:, s]]
        hit[rows, c] = True
    return np.where(hit[:, :-1], total[:, :-1], 0.0).max(axis=1, initial=0.0)
