"""Issue 23 item 2: the serving calibration (configs/calibration/serving.yaml) is the default step
model, its recorded per-source errors are what its constants give on the public sources, and it
moves the step model the way current engines differ from vidur's eager kernels."""
from __future__ import annotations

import pytest

from profiler import calibration_serving as cs
from profiler.analytic import AnalyticModel
from profiler.calibration import (default_calibration_path, load_calibration, load_default_calibration,
                                  serving_calibration_path)
from profiler.catalog import load_gpus, load_models
from profiler.steps import step_model

MODELS, GPUS = load_models(), load_gpus()


def _sm(serving: bool, model: str = "llama-2-7b", gpu: str = "h100-sxm"):
    return AnalyticModel(calibration=load_default_calibration(serving=serving)).step_model(MODELS[model], GPUS[gpu], 1, 1)


def test_the_default_step_model_is_the_serving_fit_for_the_gpus_it_covers():
    over = load_calibration(serving_calibration_path())
    assert set(over.gpus) == {g for fitted, copies in cs.FITTED.items() for g in (fitted, *copies)}
    for gpu in over.gpus:                        # the selector's and the simulator's step model
        assert step_model("llama-2-7b", gpu).calibration_source == over.gpus[gpu].source
    assert step_model("llama-2-7b", "a6000").calibration_source.startswith("MaverIQ")  # untouched


def test_cuda_graphs_and_current_kernels_lower_the_fixed_cost_of_a_decode_step():
    before, after = _sm(False), _sm(True)
    # batch-1 decode: weight streaming plus fixed costs; the fixed part (kernels + CPU) shrinks
    weights_s = after.weights_gb / GPUS["h100-sxm"].mem_bw_gbps
    assert after.decode_step_s(1, 512) < before.decode_step_s(1, 512)
    assert after.decode_step_s(1, 512) > weights_s  # never below streaming the weights at peak
    fixed = lambda sm: sm.layers * (sum(g.overhead_s for g in sm.dense_gemms) + sm.elem_fixed_s  # noqa: E731
                                    + sm.attn_overhead_s)
    assert fixed(after) < 0.4 * fixed(before)
    # prefill of 1,000 tokens: faster GEMMs (TensorRT-LLM's measured batch prefill)
    assert after.prefill_s(1000) < before.prefill_s(1000)


def test_scheduling_mode_of_each_engine_version():
    assert cs.engine_of("vllm 0.23.0") == "async" and cs.engine_of("vllm 0.14.0") == "async"
    assert cs.engine_of("vllm 0.11.0") == "sync" and cs.engine_of("vllm ~0.4/0.5 (2024)") == "sync"
    assert cs.engine_of("tensorrt-llm (2024 release)") == "sync"


def test_page_sources_load_without_the_shared_data(tmp_path):
    points, missing = cs.load_points(data=tmp_path)
    assert {p.source for p in points} == {"inferencebench-h100", "musgrave-a100-40gb", "aifactory-a6000"}
    assert len(missing) == 4 and all("source missing" in m for m in missing)
    tpot = [p for p in points if p.metric == "tpot"]
    assert all(p.fit == (p.gpu != "a6000") for p in tpot)
    assert all(not p.fit for p in points if p.metric == "ttft")  # prompt length not stated


def test_recorded_errors_are_what_the_recorded_constants_give():
    points, missing = cs.load_points()
    if missing:
        pytest.skip("; ".join(missing))
    rec = load_calibration(serving_calibration_path())
    after = cs.per_source(load_default_calibration(), points)
    before = cs.per_source(load_calibration(default_calibration_path()), points)
    for src, metrics in rec.mape_pct.items():
        for metric, v in metrics.items():
            assert after[src][metric] == pytest.approx(v["after"], abs=0.6), (src, metric)
            assert before[src][metric] == pytest.approx(v["before"], abs=0.05), (src, metric)
    # the fit is for the current engines it was fitted on: each within 10% MAPE
    for src in ("argonne-trtllm", "argonne-trtllm-ttft", "inferencebench-h100", "musgrave-a100-40gb"):
        m = "batch_latency" if src == "argonne-trtllm" else "ttft" if src.endswith("ttft") else "tpot"
        assert after[src][m] < 10 < before[src][m] or after[src][m] < before[src][m] < 10


def test_predict_adds_the_other_clients_prefills_to_tpot():
    sm = _sm(True, "llama-3.1-8b")
    p1 = cs.Point("s", "async", "llama-3.1-8b", "h100-sxm", 1, 1, 512, 128, "tpot", 0.01, True)
    p4 = cs.Point("s", "async", "llama-3.1-8b", "h100-sxm", 1, 4, 512, 128, "tpot", 0.01, True)
    assert cs.predict(sm, p1) == pytest.approx(sm.decode_step_s(1, 512 + 64))
    assert cs.predict(sm, p4) > sm.decode_step_s(4, 512 + 64)
