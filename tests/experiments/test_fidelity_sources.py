"""Issue 23 item 2: the real-serving figures recorded in configs/calibration/real_serving.yaml (the
errors before the serving fit) are what the shared data and the simulator on vidur's constants
alone give (experiments/kinds/fidelity.py, ``legacy_row``)."""
from __future__ import annotations

import pytest
import yaml

from experiments.kinds import fidelity


def _recorded() -> dict:
    return yaml.safe_load(fidelity.OUT.read_text())


def test_every_llmd_point_is_recorded_with_its_error():
    rec = _recorded()
    assert {r["source"] for r in rec["llmd"]} == set(fidelity.LLMD) and len(rec["llmd"]) == 16
    for r in rec["llmd"]:
        for m in ("ttft", "tpot", "e2e"):
            assert r[f"{m}_err"] == pytest.approx(r[f"{m}_sim"] / r[f"{m}_meas"] - 1, abs=2e-3)
    for src, mapes in rec["summary"].items():
        calm = [r for r in rec["llmd"] if r["source"] == src and not r["sim_overloaded"]]
        assert mapes["tpot"] == fidelity.mape(calm, "tpot")


def test_one_llmd_point_is_re_derived_from_the_log_and_the_simulator():
    path = fidelity.real_serving_dir() / fidelity.LLMD["llmd-a100"][0] / "LMBench_sharegpt_output_0.5.csv"
    if not path.exists():
        pytest.skip("the real-serving data is not in the shared data")
    row = fidelity.legacy_row("llmd-a100", path)
    rec = next(r for r in _recorded()["llmd"] if r["source"] == "llmd-a100" and r["load"] == "qps 0.5")
    assert row["ttft_meas"] == rec["ttft_meas"] and row["tpot_meas"] == rec["tpot_meas"]
    for m in ("ttft", "tpot", "e2e"):        # the `before` model as recorded (re-record after a change)
        assert row[f"{m}_sim"] == pytest.approx(rec[f"{m}_sim"], rel=0.02)
