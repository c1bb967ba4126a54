"""The small Teola apps experiment runs end to end, writes its outputs and resumes."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.run import main

CFG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "teola_apps_small.yaml"


def test_small_experiment_writes_tables_plots_and_resumes(tmp_path, capsys):
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "t", "--no-progress"]) == 0
    run = tmp_path / "teola_apps_small" / "t"
    for f in ["summary.parquet", "speedups.parquet", "ablation.parquet", "summary.md",
              "latency_vs_rate.png", "ablation.png", "meta.json"]:
        assert (run / f).exists(), f
    sp = pd.read_parquet(run / "speedups.parquet")
    assert set(sp.app) == {"naive_rag", "advanced_rag"} and (sp.speedup_mean > 0).all()
    assert "| app |" in capsys.readouterr().out
    cells = sorted((run / "cells").glob("*.parquet"))
    stamp = {c: c.stat().st_mtime_ns for c in cells}
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "t", "--no-progress"]) == 0
    assert {c: c.stat().st_mtime_ns for c in cells} == stamp      # finished cells are skipped
