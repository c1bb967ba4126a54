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


def test_the_figure_draws_every_point_at_its_value(tmp_path, monkeypatch) -> None:
    """Identical curves are not moved apart (issue 27 item 5): each line's y data are its costs;
    ties show as rings of different sizes."""
    import matplotlib.figure

    seen = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: seen.append(fig))
    slo = [3.0, 2.0, 1.0]
    df = pd.DataFrame({"task": "chat", "sharing": "memory", "selector": ["milp"] * 3 + ["flowmaker"] * 3,
                       "latency_slo_s": slo * 2, "cost_gb_s": [20.0, 20.0, 21.0] * 2})
    cost_vs_slo.plot(df, tmp_path / "f.png")
    lines = [ln for ln in seen[0].axes[0].get_lines() if len(ln.get_ydata())]
    assert [list(ln.get_ydata()) for ln in lines] == [[20.0, 20.0, 21.0]] * 2
    assert lines[0].get_markersize() != lines[1].get_markersize()
