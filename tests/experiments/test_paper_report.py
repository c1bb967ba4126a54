"""The paper report (issue 25 items 1-4, 6): a task that was not placed reads "not placed" under
pandas 2 and 3; the FULL report writer runs on a small run under the installed pandas (the ranges
admit pandas 3: the crash was there) and says every cost four ways, the overload cells apart,
RouteLLM's by-construction share as no evidence and what each headline depends on; a resumed run
says so and counts the earlier cells' own wall time."""
import json
from pathlib import Path

import pandas as pd
import pytest

from experiments.kinds._paper_report import Resumed, by_construction, sequence_table


def test_a_task_not_placed_reads_not_placed_whatever_pandas_stores() -> None:
    dep = json.dumps({"instances": [{"model": "llama-3.1-8b", "tp": 1, "pp": 1}], "reuse": []})
    deps = pd.DataFrame({"selector": ["flowmaker"] * 2, "plan_load_pct": [100.0] * 2,
                         "task": ["chat", "code"], "deployment": pd.Series([dep, None], dtype="string")})
    assert deps.deployment.isna().iloc[1]
    (row,) = sequence_table(deps)[2:]
    assert "chat: llama-3.1-8b TP1" in row and "code: not placed" in row


def test_resumed_wall_time_adds_the_earlier_cells_own() -> None:
    assert Resumed().describe(12.0) == "wall time 12 s"
    frames = [pd.DataFrame({"cell_wall_s": [3.0]}), pd.DataFrame({"cell_wall_s": [4.5]})]
    r = Resumed.of(frames)
    assert (r.cells, r.cell_wall_s) == (2, 7.5)
    text = r.describe(12.0)
    assert text.startswith("wall time 20 s (a resumed run: this invocation 12 s") and "2 cells" in text


def test_routellm_share_under_the_paper_slo_set_is_marked_by_construction() -> None:
    assert by_construction("paper") is not None        # every paper SLO lies in (weak, strong]
    assert by_construction("current") is None


def _ctx(run_dir: Path):
    from experiments.context import RunContext
    return RunContext(run_dir=run_dir, seed=0, progress=False, config_path=run_dir / "config.yaml")


@pytest.mark.slow
def test_full_report_writer_on_a_small_run_then_resumed(tmp_path: Path, capsys) -> None:
    from experiments.kinds import paper_goodput_cost as pg
    params = pg.Params(
        tasks=["chat", "code-completion", "text-to-sql"], selectors=["flowmaker", "langchain"], traces=["conv"],
        loads_pct=[25, 100], seeds=2, window_s=10, time_limit_s=5, plots=[],
        scenarios=[pg.Scenario(name="main"), pg.Scenario(name="fair", placement="spec"),
                   pg.Scenario(name="usd", objective="usd_per_hour"),
                   pg.Scenario(name="routellm-paper", selectors=["flowmaker", "routellm:paper"]),
                   pg.Scenario(name="over", loads_pct=[200], seeds=1)])
    pg.run(params, _ctx(tmp_path))
    text = (tmp_path / "summary.md").read_text()
    for unit in ("reserved GB x s", "GPU-s held", "busy GPU-s", "USD"):
        assert f"In **{unit}** FlowMaker is" in text          # every cost four ways, claims per unit
    assert "## Overload (scenario `over`" in text and "| tasks placed |" in text
    assert "## What each headline depends on" in text and "| selection objective | usd_per_hour" in text
    assert "| baselines' placement | spec (`fair`" in text
    assert "resumed" not in text.splitlines()[2]
    res = pd.read_parquet(tmp_path / "results.parquet")
    assert {"gpu_s_held_window", "busy_gpu_s", "usd_window", "cell_wall_s"} <= set(res.columns)
    assert (res.busy_gpu_s <= res.gpu_s_held_window + 1e-6).all()   # a GPU is busy only while held
    # resume: drop one cell; the rerun computes only it and says the run was resumed
    cells = sorted((tmp_path / "cells").glob("*.parquet"))
    cells[0].unlink()
    pg.run(params, _ctx(tmp_path))
    head = (tmp_path / "summary.md").read_text().splitlines()[2]
    assert "a resumed run: this invocation" in head and f"plus the {len(cells) - 1} cells (plans and replays)" in head
    capsys.readouterr()
