"""The cost-vs-latency-SLO experiment (issue 18 item 7): the optimum's cost never rises as the SLO
loosens, no selector beats it, and the figure and tables are written."""
from __future__ import annotations

import pandas as pd

from experiments.context import RunContext
from experiments.kinds import cost_vs_slo


def test_small_sweep(tmp_path) -> None:
    ctx = RunContext(run_dir=tmp_path / "r", seed=0, progress=False, config_path=tmp_path / "c.yaml")
    ctx.run_dir.mkdir()
    cost_vs_slo.run(cost_vs_slo.Params(tasks=["chat"], selectors=["milp", "flowmaker", "langchain"], points=6,
                                       publish=False), ctx)
    df = pd.read_parquet(ctx.run_dir / "cost_vs_slo.parquet")
    assert len(df) == 6 * 3 and (ctx.run_dir / "cost_vs_slo.png").stat().st_size > 10_000
    opt = df[df["selector"] == "milp"].sort_values("latency_slo_s")
    costs = opt["cost_gb_s"].dropna().to_numpy()
    assert len(costs) >= 3 and (costs[:-1] >= costs[1:] - 1e-9).all()        # tighter SLO: never cheaper
    assert opt["cost_gb_s"].isna().iloc[0]                                     # the tightest: nothing fits
    merged = df.merge(opt[["latency_slo_s", "cost_gb_s"]], on="latency_slo_s", suffixes=("", "_opt"))
    assert (merged["cost_gb_s"].dropna() >= merged.loc[merged["cost_gb_s"].notna(), "cost_gb_s_opt"] - 1e-9).all()
    md = (ctx.run_dir / "summary.md").read_text()
    assert "GPU memory" in md and "| chat" in md
