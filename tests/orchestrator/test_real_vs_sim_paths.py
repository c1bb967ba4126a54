"""The real run's critical path, rebuilt from calls.parquet's per-call times
(experiments/scripts/real_vs_sim_paths.py)."""
from __future__ import annotations

import pandas as pd

from experiments.scripts.real_vs_sim_paths import real_path


def _calls(rows: list[tuple[str, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"node_id": n, "kind": k, "ready_s": r, "done_s": d} for n, k, r, d in rows])


def test_path_follows_the_call_that_completed_last_before_each_ready_and_sums_to_the_latency():
    arrival = 10.0
    q = _calls([("indexing/embed/s0", "EMBEDDING", 10.0, 10.05),
                ("query_embedding/embed", "EMBEDDING", 10.0, 10.08),
                ("synthesis/leaf0_prefill/partial", "PARTIAL_PREFILLING", 10.0, 10.09),  # ends after search is ready
                ("search/search", "SEARCHING", 10.08, 10.1),
                ("synthesis/leaf0_decode", "DECODING", 10.1, 10.3)])
    path = real_path(q, arrival)
    assert [p for p, _ in path] == ["query_embedding:embedding", "search:searching", "synthesis:decode"]
    assert abs(sum(s for _, s in path) - (q.done_s.max() - arrival)) < 1e-9
    assert abs(path[0][1] - 0.08) < 1e-9


def test_a_prefill_of_any_kind_counts_as_prefill():
    q = _calls([("synthesis/root_prefill/full", "FULL_PREFILLING", 0.0, 0.01),
                ("synthesis/root_decode", "DECODING", 0.01, 0.05)])
    assert [p for p, _ in real_path(q, 0.0)] == ["synthesis:prefill", "synthesis:decode"]
