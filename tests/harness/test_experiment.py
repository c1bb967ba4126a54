"""The paper experiment runs end to end, writes atomic cells and resumes without redoing them."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.run import main

CFG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "paper_goodput_cost_smoke.yaml"


def test_smoke_run_and_resume(tmp_path, capsys):
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "r", "--no-progress"]) == 0
    run = tmp_path / "paper_goodput_cost_smoke" / "r"
    for f in ("results.parquet", "tasks.parquet", "deployments.parquet", "goodput.png", "cost.png", "summary.md"):
        assert (run / f).exists(), f
    df = pd.read_parquet(run / "results.parquet")
    assert len(df) == 4 and set(df.selector) == {"flowmaker", "langchain"}
    assert ((df.completed + df.failed) == df.requests).all()
    assert df.goodput.between(0, 1).all() and (df.cost_usd > 0).all()
    cells = sorted((run / "cells").glob("*.parquet"))
    stamps = {c: c.stat().st_mtime_ns for c in cells}
    cells[0].unlink()                        # an interrupted run lost one cell
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "r", "--no-progress"]) == 0
    assert cells[0].exists()
    assert all(c.stat().st_mtime_ns == stamps[c] for c in cells[1:])   # finished cells are skipped
    again = pd.read_parquet(run / "results.parquet")
    assert again.drop(columns="sim_wall_s").equals(df.drop(columns="sim_wall_s"))   # deterministic
