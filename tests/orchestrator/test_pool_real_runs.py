"""experiments/scripts/pool_real_runs.py: several teola_real_cpu runs pooled into one set of repeats,
each speedup's paired interval over every run's queries."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.scripts.pool_real_runs import main, pooled


def _run(d, seed: int, teola_s: float) -> None:
    rng = np.random.default_rng(seed)
    rows = [{"app": "naive_rag", "rate_rps": 0.2, "scheme": s, "repeat": rep, "qid": q, "failed": False,
             "latency_s": (teola_s if s == "teola" else 0.3) * rng.uniform(0.95, 1.05), "answer_sha": "x",
             "makespan_s": 1.0} for rep in range(2) for q in range(4) for s in ("teola", "b")]
    d.mkdir()
    pd.DataFrame(rows).to_parquet(d / "queries.parquet")
    (d / "config.yaml").write_text("params:\n  schemes: [teola, b]\n  apps: [naive_rag]\n"
                                   "  rates_rps: {naive_rag: [0.2]}\n  simulation: null\n")


def test_runs_pool_into_one_set_of_repeats_and_one_interval(tmp_path, capsys):
    _run(tmp_path / "r1", 0, 0.25)
    _run(tmp_path / "r2", 1, 0.27)
    df, params = pooled([tmp_path / "r1", tmp_path / "r2"])
    assert df.groupby(["run", "repeat"]).ngroups == 4 and params["schemes"] == ["teola", "b"]
    assert main([str(tmp_path / "r1"), str(tmp_path / "r2")]) == 0
    out = capsys.readouterr().out
    assert "Paired queries per (app, rate): naive_rag 0.2 req/s: 16; 4 repeats in all." in out
    assert "against b, faster; 95% paired interval [1.1" in out          # 0.3 / 0.26: ~1.15x, every repeat


def test_the_typical_query_is_judged_against_baselines_fixed_in_advance(tmp_path, capsys):
    _run(tmp_path / "r1", 0, 0.25)
    _run(tmp_path / "r2", 1, 0.27)
    assert main([str(tmp_path / "r1"), str(tmp_path / "r2"), "--against", "naive_rag:0.2=b"]) == 0
    out = capsys.readouterr().out
    assert "judged against baselines fixed in advance: naive_rag at 0.2 req/s: b" in out
    assert "| naive_rag | 0.2 | b | 16 | 100% |" in out and out.rstrip().endswith("| faster |")   # no simulation


def test_a_follow_up_level_is_stated_and_a_bad_one_refused(tmp_path, capsys):
    import pytest
    _run(tmp_path / "r1", 0, 0.25)
    assert main([str(tmp_path / "r1"), "--against", "naive_rag:0.2=b", "--alpha", "0.025"]) == 0
    assert "at a family-wise 0.025;" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "r1"), "--alpha", "1.5"])
    assert e.value.code == 2 and "--alpha" in capsys.readouterr().err
