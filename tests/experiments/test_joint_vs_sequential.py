"""The small joint_vs_sequential experiment (spec section 11) runs end to end through
``python -m experiments.run``: its table, figure and summary are written and published, the joint
milp is never beaten by the greedy in the order given, and a rerun skips the finished cells."""
from __future__ import annotations

import pandas as pd

from experiments.run import main
from tests.experiments.helpers import CONFIGS, run_small


def test_small_joint_vs_sequential(tmp_path, capsys):
    args, _, top, run = run_small("joint_vs_sequential_small", tmp_path, publish=True)
    df = pd.read_parquet(run / "joint.parquet")
    assert set(df["solver"]) == {"joint", "given", "best_order", "worst_order"}
    assert set(df["set"]) == {"given", "random-2-0"}
    joint = df[df["solver"] == "joint"].set_index("set")
    given = df[df["solver"] == "given"].set_index("set")
    assert (joint["status"] == "optimal").all()
    assert (joint["served"] >= given["served"]).all()
    same = joint["served"] == given["served"]
    assert (joint.loc[same, "total_cost"] <= given.loc[same, "total_cost"] * (1 + 1e-9) + 1e-9).all()
    assert (given["saving_pct"].dropna() >= -1e-6).all()
    assert (run / "time_vs_tasks.png").stat().st_size > 10_000
    md = (top / "summary.md").read_text()
    assert md == (run / "summary.md").read_text() and "## Random task sets, per size" in md
    assert "## The tasks in the order given" in capsys.readouterr().out
    cells = sorted((run / "cells").glob("*.parquet"))
    stamp = {c: c.stat().st_mtime_ns for c in cells}
    assert main(args) == 0
    assert {c: c.stat().st_mtime_ns for c in cells} == stamp


def test_summary_rebuilt_from_published_parquet(tmp_path):
    """The published summary is what ``write_summary`` makes of the published parquet (no solve), and
    its glossary explains exactly the columns of its tables."""
    from experiments.glossary import glossary_entries, table_columns
    from experiments.kinds._joint_report import write_summary
    from experiments.kinds.joint_vs_sequential import Params
    from experiments.run import load_config
    published = CONFIGS.parents[1] / "results" / "joint_vs_sequential"
    (tmp_path / "joint.parquet").write_bytes((published / "joint.parquet").read_bytes())
    params = Params(**load_config(CONFIGS / "joint_vs_sequential.yaml").params)
    md = write_summary(tmp_path, params).read_text()
    assert md == (published / "summary.md").read_text()
    assert set(glossary_entries(md)) <= table_columns(md)
    assert {"cluster", "served joint", "saving % given", "mean_saving_pct", "gap"} <= set(glossary_entries(md))
