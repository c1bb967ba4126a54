"""Rows of the joint CP-SAT model (``solvers/_joint_model.py``) for reuse capacity and, under
``sharing: compute``, the GPUs' compute (``solvers/joint_milp.py``'s docstring states them)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from selector.index import REUSE
from selector.problem import TOL

if TYPE_CHECKING:
    from solvers._joint_model import JointModel


def capacity_rows(model: JointModel) -> None:
    """Reuse capacity (3) over all tasks: per input instance, and per virtual instance scaled by its
    creator's literal (no reuse without it, and a tighter LP, as in facility location)."""
    d, m = model.data, model.m
    us = float(model.util_scale)
    slack = model.n * model.slack
    base: dict[int, list] = {}
    for (k, w, s), lst in model.entries.items():
        for e in lst:
            if e.key[0] == "y" and e.kind == REUSE:
                o = d.opt(*e.key[1:])
                base.setdefault(o.instance, []).append(round(o.util_add * us) * model.var[e.key])
    util = [i.utilization for i in d.ts.cluster.instances]
    for i, terms in base.items():
        m.add(sum(terms) <= math.floor((1.0 + TOL - util[i]) * us + slack))
    virt: dict[str, list] = {}
    own: dict[str, float] = {}
    creator: dict[str, tuple] = {}
    for r, vr in enumerate(d.virtual_reuse):
        if ("v", r) in model.var:
            key = f"{vr.virtual.creator}/{vr.virtual.replica}"
            virt.setdefault(key, []).append(round(vr.util_add * us) * model.var["v", r])
            own[key] = vr.virtual.utilization
            creator[key] = vr.virtual.creator
    for key, terms in virt.items():
        m.add(sum(terms) <= math.floor((1.0 + TOL - own[key]) * us + slack) * model.var[("y", *creator[key])])

def compute_rows(model: JointModel) -> None:
    """Section 9, necessary: each task's own reuse rows per GPU, and the room of the cluster."""
    from solvers._exact import Prepared
    from solvers._rows import reuse_by_gpu
    d, m = model.data, model.m
    us = float(model.util_scale)
    for k, cp in enumerate(d.compiled):
        prep = Prepared(cp, d.options[k], 0.0, model.smax)
        keys = [e.key[2:] for (k2, _, _), lst in model.entries.items() if k2 == k for e in lst if e.key[0] == "y"]
        for g, terms in reuse_by_gpu(prep, keys).items():
            m.add(sum(round(u * us) * model.var[("y", k, *key)] for key, u in terms)
                  <= math.floor((1.0 + TOL - cp.base_busy[g]) * us + model.slack))
    load = []
    for lst in model.entries.values():
        for e in lst:
            c = d.opt(*e.key[1:]).compute_load if e.key[0] == "y" else d.virtual_reuse[e.key[1]].compute_load
            if c:
                load.append(round(c * us) * model.var[e.key])
    if load:
        room = d.compiled[0].compute_room
        m.add(sum(load) <= math.floor((room + TOL) * us + model.n * model.slack))
