"""Typed copies of untyped problems (spec section 10), for the benchmarks and the gap suite.

:func:`spread_over_types` turns a problem of one GPU type into one over ``n_types`` types
(at most 3: ``economy``, ``standard``, ``fast``), the cluster's GPUs split into contiguous
id blocks (GPUs that deployed instances share keep one type, so no instance is mixed). Every
config is offered on every type; deployment rows keep their memory; perf rows per type have
latency divided and capacity multiplied by the type's speed (jittered +-10% per row, seeded),
and an instance's own rows keep the original numbers on its type. Prices grow faster than
speed, so the fast type is worth it only where latency or replicas demand it. GPU memory is
unchanged, so placement stays as hard as in the original. The ``objective`` is set as asked.
"""
from __future__ import annotations

import numpy as np

from selector.problem import Problem, parse_problem

#: (name, speed factor, US dollars per GPU-hour)
TYPES = (("economy", 0.7, 0.9), ("standard", 1.0, 1.6), ("fast", 1.8, 3.9))


def _components(n: int, instances: list[dict], ids: list[int]) -> list[int]:
    """Union of GPU positions that one instance spans: a root position per GPU position."""
    root = list(range(n))
    pos = {g: k for k, g in enumerate(ids)}

    def find(k: int) -> int:
        while root[k] != k:
            root[k] = root[root[k]]
            k = root[k]
        return k
    for inst in instances:
        first = find(pos[inst["gpus"][0]])
        for g in inst["gpus"][1:]:
            root[find(pos[g])] = first
    return [find(k) for k in range(n)]


def spread_over_types(problem: Problem, *, seed: int = 0, n_types: int = 3,
                      objective: str = "usd_per_hour") -> Problem:
    """``problem`` over ``n_types`` GPU types with prices (module docstring)."""
    if not 1 <= n_types <= len(TYPES):
        raise ValueError(f"n_types must be 1..{len(TYPES)}")
    rng = np.random.default_rng([seed, 24])
    d = problem.to_dict()
    types = TYPES[:n_types]
    gpus = sorted(d["cluster"]["gpus"], key=lambda g: g["id"])
    ids = [g["id"] for g in gpus]
    comp = _components(len(gpus), d["cluster"]["instances"], ids)
    for k, g in enumerate(gpus):
        g["type"] = types[min(n_types - 1, comp[k] * n_types // len(gpus))][0]
    kind = {g["id"]: g["type"] for g in gpus}
    inst_rows = {(i["model"], i["tp"], i["pp"], kind[i["gpus"][0]]) for i in d["cluster"]["instances"]}
    d["configs"] = [{**c, "gpu_type": t} for c in d["configs"] for t, _, _ in types]
    d["deployments"] = [{**r, "gpu_type": t} for r in d["deployments"] for t, _, _ in types]
    perf = []
    for r in d["perf"]:
        for t, speed, _ in types:
            if (r["model"], r["tp"], r["pp"], t) in inst_rows:
                perf.append({**r, "gpu_type": t})
                continue
            f = speed * float(rng.uniform(0.9, 1.1))
            perf.append({**r, "gpu_type": t, "latency_s": r["latency_s"] / f, "capacity_rps": r["capacity_rps"] * f})
    d["perf"] = perf
    d["cluster"]["gpus"] = gpus
    d["cluster"]["prices"] = {t: price for t, _, price in types}
    d["objective"] = objective
    return parse_problem(d)
