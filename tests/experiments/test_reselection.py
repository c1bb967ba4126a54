"""The small re-selection experiment (issue 19) runs end to end through ``python -m experiments.run``:
every table, figure and the summary with its targets are written, ``publish`` copies them beside the
run folders, and a rerun with the same run id skips the finished cells."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from experiments.run import main
from profiler.catalog import load_prices

CFG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "reselection_small.yaml"


def test_small_reselection_writes_tables_plots_publishes_and_resumes(tmp_path, capsys):
    cfg = yaml.safe_load(CFG.read_text())
    cfg["params"]["publish"] = True
    path = tmp_path / "reselection_small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    args = [str(path), "--results", str(tmp_path / "results"), "--run-id", "t", "--no-progress"]
    assert main(args) == 0
    top = tmp_path / "results" / "reselection_small"
    run = top / "t"
    for f in ["results", "tasks", "decisions", "instances", "memory", "hourly"]:
        assert len(pd.read_parquet(run / f"{f}.parquet")), f
    for f in ["memory.png", "migrations.png", "goodput.png"]:
        assert (run / f).stat().st_size > 10_000, f
        assert (top / f).read_bytes() == (run / f).read_bytes()                 # published
    res = pd.read_parquet(run / "results.parquet").set_index("policy")
    assert list(res.index) == ["static-peak", "adaptive"] and (res.requests == res.requests.iloc[0]).all()
    assert res.loc["static-peak", "migrations"] == 0 and res.loc["adaptive", "migrations"] >= 1
    assert (res.goodput > 0.9).all() and (res.reserved_gb_s > 0).all()
    a6000 = load_prices()["a6000"].usd_per_hour("on_demand")                  # the cluster's prices are kept
    assert (res.gpu_s_held > 0).all() and np.allclose(res.usd, res.gpu_s_held / 3600.0 * a6000)
    mem = pd.read_parquet(run / "memory.parquet")
    assert mem[mem.policy == "adaptive"].gb.nunique() > 2                       # memory moves with the load
    md = (top / "summary.md").read_text()
    assert md == (run / "summary.md").read_text() and "## Targets (issue 19)" in md and "| adaptive |" in md
    assert "| adaptive |" in capsys.readouterr().out
    cells = sorted((run / "cells").glob("*.parquet"))
    stamp = {c: c.stat().st_mtime_ns for c in cells}
    assert main(args) == 0
    assert {c: c.stat().st_mtime_ns for c in cells} == stamp                    # finished cells are skipped
