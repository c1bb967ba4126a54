"""Latency statistics of finished calls (formulas in docs/metrics.md)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from orchestrator.engines.llm_seq import FAILED, Seq as Call

QUANTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))


def stats(values: np.ndarray) -> dict[str, float | None]:
    """mean, p50, p90, p99 (linear interpolation); None for an empty sample."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"mean": None, **{k: None for k, _ in QUANTILES}}
    qs = np.percentile(v, [q for _, q in QUANTILES])
    return {"mean": float(v.mean()), **{k: float(x) for (k, _), x in zip(QUANTILES, qs)}}


def call_table(calls: Sequence[Call]) -> dict[str, np.ndarray]:
    """Per-call columns: arrival, admission, first-token and completion times (s), tokens."""
    n = len(calls)

    def col(name: str, dtype: type) -> np.ndarray:   # one pass over the calls, read in C
        return np.fromiter(map(attrgetter(name), calls), dtype=dtype, count=n)

    return {"arrival_s": col("arrival_s", np.float64), "sched_s": col("sched_s", np.float64),
            "first_s": col("first_s", np.float64), "done_s": col("done_s", np.float64),
            "prompt_tokens": col("prompt", np.int64), "output_tokens": col("output", np.int64),
            "failed": col("state", np.int64) == FAILED}


def latency_summary(t: dict[str, np.ndarray]) -> dict[str, dict[str, float | None]]:
    """``e2e_s``, ``ttft_s``, ``tpot_s``, ``queue_s`` statistics over finished calls."""
    ok = ~t["failed"] & ~np.isnan(t["done_s"])
    arr = t["arrival_s"][ok]
    first, done, out = t["first_s"][ok], t["done_s"][ok], t["output_tokens"][ok]
    multi = out > 1
    tpot = (done[multi] - first[multi]) / (out[multi] - 1)
    return {"e2e_s": stats(done - arr), "ttft_s": stats(first - arr), "tpot_s": stats(tpot),
            "queue_s": stats(t["sched_s"][ok] - arr)}


def fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"
