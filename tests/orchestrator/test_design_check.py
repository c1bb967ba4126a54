"""experiments/scripts/design_check.py: the same arrivals measured in two runs whose blocks hold a
different number of schemes, matched query by query."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.scripts.design_check import compare, main


def _run(d, schemes: list[str], scale: float, teola_s: float = 0.25) -> None:
    rows = [{"app": "advanced_rag", "rate_rps": 0.2, "scheme": s, "repeat": rep, "qid": q, "failed": False,
             "latency_s": scale * (teola_s if s == "teola" else 0.3) * (1 + 0.01 * q)}
            for rep in range(2) for q in range(4) for s in schemes]
    d.mkdir()
    pd.DataFrame(rows).to_parquet(d / "queries.parquet")
    (d / "config.yaml").write_text(f"params:\n  schemes: [{', '.join(schemes)}]\n")


def test_the_same_queries_are_matched_and_a_uniform_slowdown_leaves_the_speedup(tmp_path, capsys):
    _run(tmp_path / "two", ["teola", "b"], 1.0)
    _run(tmp_path / "nine", ["teola", "b", "c"], 1.5)
    a, b = pd.read_parquet(tmp_path / "two/queries.parquet"), pd.read_parquet(tmp_path / "nine/queries.parquet")
    per_scheme, speedups = compare(a, b, "teola")
    assert per_scheme.queries.tolist() == [8, 8] and per_scheme.b_over_a.tolist() == pytest.approx([1.5, 1.5])
    assert speedups.baseline.tolist() == ["b"] and speedups.median_a.iloc[0] == pytest.approx(1.2)
    assert speedups.median_b.iloc[0] == pytest.approx(1.2) and speedups.faster_b.iloc[0] == 1.0
    assert main([str(tmp_path / "two"), str(tmp_path / "nine")]) == 0
    out = capsys.readouterr().out
    assert "a = two (2 schemes a block), b = nine (3 schemes a block)" in out and "| b | 8 / 8 | 100% / 100% |" in out
