"""Pareto sweeps over a workflow's stages in (latency, new memory), exact and cheap.

Latency ``L`` and new memory ``M`` are sums over stages of nonnegative per-option terms, so a
partial sum dominated in both by another never ends better: keeping the Pareto front of the
partial sums stage by stage gives the exact minimum of any objective that grows with both
(``M * L``, ``M``) over the variants meeting the latency SLO (constraint 2), without listing
the ``prod(options)`` variants. Used for the exact solvers' workflow bounds
(``solvers/_exact.py``) and for the reasons of infeasible problems (``selector.diagnose``).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

REL = 1e-12      # float slack on the sweep's own comparisons (far below the spec's 1e-9)


def front(lat: Sequence[np.ndarray], mem: Sequence[np.ndarray], slo: float, *, cap: float | None = None,
          limit: int = 50_000) -> tuple[np.ndarray, np.ndarray, int]:
    """The Pareto front ``(L, M)`` of the complete sums whose ``L <= slo`` (and, with ``cap``,
    ``M * L <= cap``), each stage's options given as arrays ``lat[s]``, ``mem[s]``. Partial sums
    that cannot finish within ``slo`` (or ``cap``) with every later stage's smallest terms are
    dropped as they appear. Returns ``(L, M, stages done)``: when the front outgrows ``limit``
    after stage ``k < len(lat)``, it stops there and returns the partial front and ``k``."""
    n = len(lat)
    sl, sm = np.zeros(n + 1), np.zeros(n + 1)
    for s in range(n - 1, -1, -1):
        sl[s], sm[s] = sl[s + 1] + lat[s].min(), sm[s + 1] + mem[s].min()
    slo_x = slo * (1 + REL)
    cap_x = None if cap is None else cap * (1 + REL) + REL
    fl, fm = np.zeros(1), np.zeros(1)
    for s in range(n):
        cl = (fl[:, None] + lat[s][None, :]).ravel()
        cm = (fm[:, None] + mem[s][None, :]).ravel()
        keep = cl + sl[s + 1] <= slo_x
        if cap_x is not None:
            keep &= (cl + sl[s + 1]) * (cm + sm[s + 1]) <= cap_x
        cl, cm = cl[keep], cm[keep]
        order = np.lexsort((cm, cl))
        cl, cm = cl[order], cm[order]
        best_before = np.minimum.accumulate(np.concatenate([[np.inf], cm[:-1]]))
        on = cm < best_before
        fl, fm = cl[on], cm[on]
        if fl.size > limit and s + 1 < n:
            return fl, fm, s + 1
    return fl, fm, n


def suffix_minima(lat: Sequence[np.ndarray], mem: Sequence[np.ndarray], start: int) -> tuple[float, float]:
    """Smallest latency and memory the stages from ``start`` on can add."""
    return float(sum(x.min() for x in lat[start:])), float(sum(x.min() for x in mem[start:]))
