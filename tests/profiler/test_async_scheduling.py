"""vLLM's async scheduling as an engine setting (issue 23): the engine core schedules step n+1 while
the GPU runs step n, so a step takes max(forward, CPU step time) instead of their sum; vLLM's
default from 0.14 on (vllm-project/vllm#27614), off in the default engine (vLLM 0.10-0.13)."""
from __future__ import annotations

import dataclasses

import pytest

from profiler.engine import DEFAULT, EngineConfig, async_scheduling_default, engine_step
from profiler.steps import step_model


def test_async_scheduling_hides_the_cpu_step_time_behind_the_forward():
    sync = step_model("llama-3.1-8b", "h100-sxm")
    asy = sync.with_scheduling(True)
    assert sync.with_scheduling(False) is sync and not sync.async_scheduling and asy.async_scheduling
    cpu = sync.iteration_overhead_s
    assert cpu > 0.5e-3
    for batch, ctx in ((1, 128), (32, 700), (256, 2048)):
        d_sync, d_async = sync.decode_step_s(batch, ctx), asy.decode_step_s(batch, ctx)
        assert d_async == pytest.approx(d_sync - cpu, rel=1e-9)  # the forward is longer than the CPU part
    assert asy.prefill_s(1000) == pytest.approx(sync.prefill_s(1000) - cpu, rel=1e-9)
    # the terms still add up to the step, and the CPU part shows only where the forward does not hide it
    for sm in (sync, asy):
        terms = sm.decode_terms(4, 512)
        assert sum(terms.values()) == pytest.approx(sm.decode_step_s(4, 512), rel=1e-12)
    assert asy.decode_terms(4, 512)["step_cpu"] == 0.0 and sync.decode_terms(4, 512)["step_cpu"] == cpu


def test_a_step_never_runs_faster_than_its_cpu_part():
    sm = step_model("llama-3.1-8b", "h100-sxm")
    slow_cpu = dataclasses.replace(sm, iteration_overhead_s=1.0).with_scheduling(True)  # 1 s of scheduling
    assert slow_cpu.decode_step_s(1, 128) == 1.0
    assert dataclasses.replace(sm, iteration_overhead_s=1.0).decode_step_s(1, 128) > 1.0  # sync: the sum


def test_default_by_engine_version_as_vllms_source_has_it():
    for text in ("vllm 0.14.0", "vllm 0.21.0", "vLLM 0.23.0 (V1)", "vllm v0.33.0"):
        assert async_scheduling_default(text), text
    for text in ("vllm 0.11.0", "vllm 0.13.0", "vllm ~0.8.5 (V1)", "vllm ~0.4/0.5 (2024, V0)",
                 "tensorrt-llm (2024 release)", "unnamed 2023 engine"):
        assert not async_scheduling_default(text), text
    assert not async_scheduling_default("vllm 0.21.0", pp=2)  # vLLM turns it off with pipeline parallelism
    assert DEFAULT.async_scheduling is False  # the default engine models vLLM V1 0.10-0.13


def test_the_engine_config_chooses_the_step_models_scheduling():
    sm = step_model("llama-2-7b", "a100-80gb")
    assert engine_step(sm, DEFAULT) is sm
    assert engine_step(sm, EngineConfig(async_scheduling=True)).async_scheduling

    class Table:  # a measured step table has no scheduling mode: it is used as it is
        def step_s(self, *a, **k) -> float:
            return 0.01
    t = Table()
    assert engine_step(t, EngineConfig(async_scheduling=True)) is t


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "padded"])
def test_async_scheduling_is_a_v1_scheduler_setting(scheduler):
    """vLLM's async scheduling (and its admission lag, LLMCore._late) belongs to the V1 scheduler:
    v0, Sarathi and the padded fork schedule between steps, so the pair is a user error."""
    with pytest.raises(ValueError, match="async_scheduling: .*vllm-v1"):
        EngineConfig(scheduler=scheduler, async_scheduling=True)
    assert EngineConfig(scheduler=scheduler).async_scheduling is False
