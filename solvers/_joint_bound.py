"""A lower bound on each task's cost ``C_k`` in any joint choice (spec section 11), for the joint
``milp``'s gap and as a row of its model.

Task ``k`` served by workflow ``w`` picks per stage one option: a new one (memory ``R * mem_gb``,
``calls * latency_s``, dollars ``usd_per_hour``), a reuse of an input instance, or a reuse of a
replica an earlier task may create (no memory, no dollars). Whatever the other tasks choose,
``C_k`` is at least the least cost over these per-stage menus with every constraint dropped
(SLOs, capacity, placement, and whether the reused replica is created at all), in exact floats:

* ``usd_per_hour``: ``U = sum_s usd_s``, so the bound is ``min_w sum_s min usd``;
* ``gb_s``: ``cost = (sum_s mem_s) * (sum_s lat_s)`` with non-negative terms, so only the
  (memory, latency) Pareto front of each stage can be least; the bound is the least product over
  the fronts' combinations (when there are more than ``MAX_COMBOS``, the weaker
  ``(sum_s min mem) * (sum_s min lat)``).

A set serving ``S`` tasks then costs at least the sum of the ``S`` smallest task bounds;
:func:`gap` reports the larger of that and CP-SAT's bound.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from selector.index import NEW
from solvers._joint_data import JointData

if TYPE_CHECKING:
    from selector.joint_eval import JointRun
    from solvers._joint_model import JointModel

MAX_COMBOS = 200_000
Menu = list[tuple[float, float, float]]          # per stage: (memory GB, latency s, $/h)


def task_bounds(data: JointData, alive: dict[tuple[int, int, int], list[tuple]], usd: bool) -> list[float]:
    """Per task, the lower bound on its cost (module docstring); ``alive``: the model's option keys
    per ``(task, workflow, stage)`` (``("y", k, w, s, o)`` or ``("v", r)``). A task with no live
    workflow gets ``inf`` (it is always skipped)."""
    menus: dict[tuple[int, int], dict[int, Menu]] = {}
    for (k, w, s), keys in alive.items():
        menus.setdefault((k, w), {})[s] = [_terms(data, key) for key in keys]
    out = [math.inf] * len(data.ts.tasks)
    for (k, w), stages in menus.items():
        menu = [stages[s] for s in sorted(stages)]
        out[k] = min(out[k], _usd_bound(menu) if usd else _gb_s_bound(menu))
    return out


def served_bound(bounds: list[float], served: int) -> float:
    """The least total cost of ``served`` tasks: the sum of the ``served`` smallest bounds."""
    return float(sum(sorted(bounds)[:served]))


def _terms(data: JointData, key: tuple) -> tuple[float, float, float]:
    if key[0] == "v":
        return 0.0, data.virtual_reuse[key[1]].latency_s, 0.0
    _, k, w, s, o = key
    op = data.opt(k, w, s, o)
    calls = data.compiled[k].workflows[w].stages[s].calls
    if op.kind == NEW:
        return op.replicas * op.mem_gb, calls * op.latency_s, op.usd_per_hour
    return 0.0, calls * op.latency_s, 0.0


def _usd_bound(menu: list[Menu]) -> float:
    return sum(min(t[2] for t in st) for st in menu)


def _front(st: Menu) -> list[tuple[float, float]]:
    """The (memory, latency) Pareto front of one stage's menu, by memory."""
    out: list[tuple[float, float]] = []
    for mem, lat, _ in sorted(st, key=lambda t: (t[0], t[1])):
        if not out or lat < out[-1][1]:
            out.append((mem, lat))
    return out


def _gb_s_bound(menu: list[Menu]) -> float:
    fronts = [_front(st) for st in menu]
    if math.prod(len(f) for f in fronts) > MAX_COMBOS:
        return sum(f[0][0] for f in fronts) * sum(f[-1][1] for f in fronts)
    mem = np.zeros(1)
    lat = np.zeros(1)
    for f in fronts:
        m = np.array([t[0] for t in f])
        lt = np.array([t[1] for t in f])
        mem = (mem[:, None] + m[None, :]).ravel()
        lat = (lat[:, None] + lt[None, :]).ravel()
    return float(np.min(mem * lat))


def gap(model: JointModel, inc: JointRun) -> dict:
    """What is proved at the limit: the most tasks the relaxation serves (all of them when the
    incumbent does) and, when the incumbent serves as many, a lower bound on the total cost
    (the larger of CP-SAT's bound and the task bounds' sum, ``solvers/_joint_bound.py``) and
    the relative gap ``(total - bound) / total``."""
    served = model._served_bound if model._served_bound is not None else (model.n if inc.served == model.n else None)
    if served is None:
        return {"gap": None}
    if served != inc.served:
        return {"served_bound": served, "gap": None}
    low = served_bound(model.task_lb, inc.served)
    if model._bound is not None:
        scale = model.ps if model.usd else model.ms * model.ls
        low = max(low, model._bound / scale - model.widening())
    low = min(max(0.0, low), inc.total_cost)
    rel = 0.0 if inc.total_cost <= 0 else (inc.total_cost - low) / inc.total_cost
    return {"served_bound": served, "cost_bound": low, "gap": rel}
