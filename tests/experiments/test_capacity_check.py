"""capacity_check pooled over seeds (issue 23): the break is the first load whose goodput, pooled
over the seeds, is below the threshold; a seed stops where the pool is below it whatever the
others read; the run resumes from its cells."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.context import RunContext
from experiments.kinds import capacity_check as cc


def _points(goodput: dict[int, list[float]], loads: list[float]) -> pd.DataFrame:
    return pd.DataFrame([{"task": "t", "seed": s, "load": x, "goodput": g, "preemptions": 0}
                         for s, gs in goodput.items() for x, g in zip(loads, gs)])


def test_the_break_is_the_pooled_one_and_each_seed_has_its_own() -> None:
    loads = [0.1, 0.9, 1.0, 1.1]
    pts = _points({0: [0.999, 0.992, 0.985, 0.95], 1: [0.999, 0.989, 0.993, 0.97], 2: [0.999, 0.995, 0.991]},
                  loads)
    params = cc.Params(tasks=["chat"], loads=loads[1:], floor_load=0.1, seeds=3)
    pl = {"problem": type("P", (), {"task": type("T", (), {"name": "t", "arrival_rate_rps": 1.0})})(),
          "dep": type("D", (), {"workflow": "w"})(), "plan": "m@tp1pp1", "source": "s", "cap": 2.0}
    row = cc._task_row(params, pl, pts, loads[1:])
    assert row["goodput@0.9"] == pytest.approx((0.992 + 0.989 + 0.995) / 3)
    assert row["break_ratio"] == 1.0 and row["seed_breaks"] == "1 0.9 -"       # seed 1 breaks at 0.9 alone
    assert row["goodput@1.1"] != row["goodput@1.1"]                            # seed 2 stopped short: not pooled
    assert row["in_target"] and row["threshold_in_ci"] and row["floor"] == pytest.approx(0.999)


def test_a_seed_below_the_stop_level_puts_the_pool_below_the_threshold() -> None:
    stop = cc.stop_level(0.99, 5)
    assert stop == pytest.approx(0.95)
    assert (stop - 1e-9 + 4 * 1.0) / 5 < 0.99


def test_a_small_run_stops_past_the_break_and_resumes(tmp_path) -> None:
    ctx = RunContext(run_dir=tmp_path / "r", seed=0, progress=False, config_path=tmp_path / "c.yaml")
    ctx.run_dir.mkdir()
    params = cc.Params(tasks=["math-reasoning"], loads=[0.5, 3.0, 4.0], requests=400, seeds=2)
    cc.run(params, ctx)
    pts = pd.read_parquet(ctx.run_dir / "points.parquet")
    assert set(pts.load) == {0.1, 0.5, 3.0} and len(pts) == 6       # 3x overloads both seeds: 4x is not run
    row = pd.read_parquet(ctx.run_dir / "results.parquet").iloc[0]
    assert row.break_ratio == 3.0 and not row.in_target and pts[pts.load == 3.0].goodput.max() < 0.98
    cells = sorted(p.name for p in (ctx.run_dir / "cells").iterdir())
    cc.run(params, ctx)                                              # resumed: the cells are read back
    assert sorted(p.name for p in (ctx.run_dir / "cells").iterdir()) == cells
    assert pd.read_parquet(ctx.run_dir / "points.parquet").equals(pts)
