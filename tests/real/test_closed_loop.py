"""A loose guard on the closed loop (harness.closedloop): a tiny two-stage plan on two real
``transformers serve`` processes, profiled, calibrated, simulated and replayed live. The
accuracy targets (mean E2E and TPOT within 20%) belong to the experiment
(configs/experiments/closed_loop_cpu.yaml, docs/real_execution.md); on a shared 2-core machine
one run's wall-clock noise alone reaches tens of percent, so this test asks for a factor of 2.5."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from harness.closedloop import run_loop, summary_md, workload
from harness.closedloop_meter import RESCALED
from harness.closedloop_model import LoopConfig, ServedStep, Shape, StageSize, call_service_s


class _Step:
    def step_s(self, prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens, *, prefill_seqs=1):
        return 1e-3 * prefill_tokens + 1e-2 * decode_batch

    weights_gb = 0.5


def test_served_step_adds_its_overheads_and_keeps_the_rest():
    s = ServedStep(_Step(), per_step_s=0.002, per_call_s=0.05)
    assert s.step_s(100, 1e4, 0, 0.0) == pytest.approx(0.1 + 0.002 + 0.05)
    assert s.step_s(0, 0.0, 1, 10.0) == pytest.approx(0.01 + 0.002)
    assert s.weights_gb == 0.5
    assert call_service_s(s, 100, 4) == pytest.approx(0.152 + 3 * 0.012)


def test_workload_rate_and_sizes():
    cfg = LoopConfig(requests=2000, size_spread=0.5)
    wl = workload(cfg, 4.0, seed=1)
    assert wl.arrival_s[0] == 0 and np.all(np.diff(wl.arrival_s) >= 0)
    assert len(wl) / wl.arrival_s[-1] == pytest.approx(4.0, rel=0.1)
    assert 0.5 <= wl.prompt_scale.min() and wl.prompt_scale.max() <= 1.5


def test_closed_loop_runs_and_roughly_agrees(tmp_path):
    from tests.real.test_servers import free_port
    cfg = LoopConfig(shape=Shape(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=512),
                     stages=(StageSize(prompt_tokens=96, output_tokens=12), StageSize(prompt_tokens=48, output_tokens=8)),
                     requests=8, loads=(0.3,), repeats=2, block_requests=4, pin_cores=True, calibrate_from="both", rate_from="current",
                     profile_prompts=(16, 64, 128, 256), profile_output=16,
                     profile_repeats=3, probes=((40, 10), (120, 10), (80, 16)), base_port=free_port(),
                     startup_timeout_s=180, timeout_s=120)
    res = run_loop(cfg, tmp_path, log=lambda m: None)
    assert json.loads((tmp_path / "closed_loop.json").read_text())["loads"][0]["load"] == 0.3
    assert not (tmp_path / "partial_closed_loop.json").exists()     # written after each load, gone at the end
    assert [ld["repeat"] for ld in res["loads"]] == [0, 1]
    for ld in res["loads"]:
        sim, live = ld["simulated"], ld["measured"]
        assert live["completed"] == sim["completed"] == 8 and live["failed"] == 0 and not live["call_faults"]
        assert [b["block"] for b in ld["blocks"]] == [0, 1] and all(b["requests"] == 4 for b in ld["blocks"])
        assert len(ld["rate_basis_service_s"]) == 2 and ld["rate_rps"] == pytest.approx(0.3 / max(ld["rate_basis_service_s"]))
        assert ld["calibrated_from"] == "both" and set(ld["other_rules"]) == {"probe", "previous", RESCALED}
        if sys.platform.startswith("linux"):                        # the servers' CPU share, per block
            assert all(0 < b["server_cpu_share"] <= 1 and b["client_cpu_s"] > 0 for b in ld["blocks"])
        rules = [b["overheads_by_rule"] for b in ld["blocks"]]     # only the run's first block lacks a previous one
        assert all(r["both"] == pytest.approx(np.mean([r["probe"], r["previous"]], axis=0).tolist()) for r in rules)
        for m in ("tpot_mean_s", "e2e_mean_s", "ttft_mean_s"):
            assert 1 / 2.5 < sim[m] / live[m] < 2.5, (m, sim[m], live[m])
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    for src in ("simulated", "measured"):   # 2 repeats x 8 requests x 2 stages, each with its queue wait
        mine = [c for c in calls if c["source"] == src]
        assert len(mine) == 32 and all(c["queue_s"] >= -1e-9 and c["ttft_s"] > 0 for c in mine)
        assert sorted(c["stage_index"] for c in mine) == [0] * 16 + [1] * 16
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1:
        assert res["server_cpus"][0] != res["server_cpus"][1]
    assert "every repeat within" in summary_md(res)
    # the fit is measured on this (shared, noisy) machine: it must land near the measured table (under 50%)
    # or at least closer than the uncalibrated guess; neither alone holds in every run (one CI run: 15.0% ->
    # 16.3% under load; another, while the hypervisor took much of the CPU: 81.8% -> 51.5%)
    cal = res["calibration"]
    assert 0 <= cal["tpot_s_mape_pct_after"] < max(50, cal["tpot_s_mape_pct_before"]), cal
