"""What a replay's GPUs cost in dollars (spec section 10's prices; docs/metrics.md): whole GPUs
held x seconds, each priced at its type's US dollars per GPU-hour. One function, used by every
cluster replay (``harness.replay.cell_metrics``, the re-selection day, plan_orchestration)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from selector.deployment import InstanceSpec


def gpu_bill(spans: Iterable[tuple[InstanceSpec, float, float]],
             prices: Mapping[str, float] | None) -> tuple[float, float]:
    """``(gpu_s_held, usd)`` of instances each held over ``[start_s, end_s)``: a GPU is held
    while any instance has a shard on it, counted once however many instances share it (the
    union of their spans), as a whole GPU (a pod requests whole GPUs). ``usd`` = GPU-hours held x
    ``prices[gpu_type]`` (US dollars per GPU-hour, keyed by the instance's ``gpu_type``: the
    problem's ``cluster.prices``); NaN when ``prices`` is None or lacks a held GPU's type."""
    held: dict[int, list[tuple[float, float]]] = {}
    types: dict[int, str] = {}
    for inst, start, end in spans:
        if end <= start:
            continue
        for g in inst.gpus:
            held.setdefault(g, []).append((start, end))
            types[g] = inst.gpu_type
    gpu_s = {g: _union_s(iv) for g, iv in held.items()}
    total = float(sum(gpu_s.values()))
    if prices is None:
        return total, math.nan
    return total, float(sum(s / 3600.0 * prices.get(types[g], math.nan) for g, s in gpu_s.items()))


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``[a, b)`` intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


#: the dollar columns every cluster replay adds beside ``reserved_gb_s`` (docs/metrics.md)
COLUMNS = ("gpu_s_held", "usd")


def usd_cell(value: float | None) -> str:
    """A report's cell for a dollar (or GPU-hour) figure: ``-`` when it is not known (NaN, None)."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"
