"""Issue 23 item 5: the fidelity report runs as an experiment kind, before and after the serving
calibration side by side, and says 'source missing' instead of failing without the shared data."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.kinds import fidelity


def _run(tmp_path, monkeypatch, shared) -> tuple[pd.DataFrame, str]:
    monkeypatch.setenv("FLOWMAKER_SHARED_DATA", str(shared))
    params = fidelity.Params(llmd_loads=1, splitwise=False, closed_loop_requests=8)
    df, missing = fidelity.rows(params)
    return df, fidelity.markdown(df, missing)


def test_without_the_shared_data_the_page_sources_still_report(tmp_path, monkeypatch):
    df, text = _run(tmp_path, monkeypatch, tmp_path / "nothing-here")
    assert set(df.method) == {"closed-loop"}
    assert set(df.calibration) == {"before", "after"}
    assert text.count("source missing") == 6  # llm-d x2, LLM-Inference-Bench x4
    s = fidelity.summary(df)
    row = s[(s.source == "inferencebench-h100") & (s.metric == "tpot")].iloc[0]
    assert row["after"] < row["before"]
    # vLLM 0.21 runs with async scheduling (its default from 0.14): the closed-loop re-run does too,
    # so the CPU step time that the default (vLLM 0.10-0.13, synchronous) model charges is hidden
    assert "(async scheduling)" in row["engine"]
    after = df[(df.source == "inferencebench-h100") & (df.metric == "tpot") & (df.calibration == "after")
               & df.prompt_tokens.isna()]
    assert len(after) == 2 and ((after.simulated / after.measured - 1).abs() < 0.05).all()
    # the prompt lengths the page does not state are tried, and kept out of the MAPE
    sens = df[df.prompt_tokens.notna()]
    step = sens[~sens["load"].str.contains("out of step")]
    assert set(step.prompt_tokens) == {128, 256, 512} and set(step.source) == {"inferencebench-h100"}
    assert row["points"] == 2 and "## Sensitivity" in text
    # every point of several clients again out of step: under async scheduling a request that
    # reaches a busy engine waits one step more (lockstep clients find it idle)
    out = sens[sens["load"].str.contains("out of step")]
    assert set(out.source) == {"inferencebench-h100", "aifactory-a6000"}
    assert set(out["load"].str.split(",").str[0]) == {"concurrency 2", "concurrency 4", "concurrency 8"}
    ttft = df[(df.source == "inferencebench-h100") & (df.metric == "ttft") & (df.calibration == "after")]
    lock = ttft[(ttft["load"] == "concurrency 4") & ttft.prompt_tokens.isna()].simulated.iloc[0]
    apart = ttft[ttft["load"].str.startswith("concurrency 4, out of step")].simulated.iloc[0]
    tpot = after[after["load"] == "concurrency 4"].simulated.iloc[0]
    assert 0.5 * tpot < apart - lock < 1.2 * tpot
    for r in df.itertuples():
        assert r.error == pytest.approx(r.simulated / r.measured - 1)


def test_llmd_rows_have_mean_and_p90_of_every_metric(tmp_path, monkeypatch):
    from profiler.catalog import shared_data_path
    shared = shared_data_path()
    if not fidelity.llmd_files("llmd-a100"):
        pytest.skip("the real-serving data is not in the shared data")
    df, text = _run(tmp_path, monkeypatch, shared)
    llmd = df[df.method == "replay"]
    assert set(zip(llmd.metric, llmd.stat)) == {(m, s) for m in ("ttft", "tpot", "e2e") for s in ("mean", "p90")}
    assert len(llmd) == 2 * 2 * 6  # two deployments x their first load x both calibrations
    assert "| llmd-a100 |" in text and "source missing" not in text
