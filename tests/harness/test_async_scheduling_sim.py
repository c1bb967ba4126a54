"""Async scheduling in the what-if simulator (issue 23): ``EngineConfig.async_scheduling`` (CLI
``--async-scheduling``) reaches every simulated engine core, and the vLLM launcher passes it on."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.cli import main
from harness.servers.launcher import ServerSpec, build_command
from harness.simulate import SimulateConfig, simulate
from harness.trace import Trace
from profiler.engine import EngineConfig
from profiler.steps import step_model

H100_8B = dict(model="llama-3.1-8b", gpu="h100-sxm", tp=1)


def _closed_loop(async_scheduling: bool, clients: int) -> dict:
    n = 8 * clients
    trace = Trace("t", np.zeros(n), np.full(n, 48), np.full(n, 128))
    cfg = SimulateConfig(**H100_8B, concurrency=clients, engine=EngineConfig(async_scheduling=async_scheduling))
    return simulate(trace, cfg).summary


@pytest.mark.parametrize("clients", [1, 4])
def test_async_scheduling_takes_the_cpu_step_time_off_every_iteration(clients):
    cpu = step_model(**H100_8B).iteration_overhead_s
    sync, asy = _closed_loop(False, clients), _closed_loop(True, clients)
    assert sync["iterations"] == asy["iterations"]  # the same schedule, only shorter steps
    # one CPU step time less per output token, and per first token (the clients send together and
    # return together: every first token comes out of one prefill step)
    assert sync["tpot_s"]["mean"] - asy["tpot_s"]["mean"] == pytest.approx(cpu, rel=1e-6)
    assert sync["ttft_s"]["mean"] - asy["ttft_s"]["mean"] == pytest.approx(cpu, rel=1e-6)
    assert asy["simulated_s"] < sync["simulated_s"]


def test_the_command_line_flag_sets_it(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("arrived_at_s,prompt_tokens,output_tokens\n" + "0,48,64\n" * 4)
    base = ["simulate", *[a for k, v in H100_8B.items() for a in (f"--{k}", str(v))], "--trace", str(p),
            "--concurrency", "1", "--json"]
    tpot = {}
    for flag in ("--async-scheduling", "--no-async-scheduling"):
        assert main([*base, flag]) == 0
        tpot[flag] = json.loads(capsys.readouterr().out)["tpot_s"]["mean"]
    cpu = step_model(**H100_8B).iteration_overhead_s
    assert tpot["--no-async-scheduling"] - tpot["--async-scheduling"] == pytest.approx(cpu, rel=1e-6)


def test_the_vllm_launcher_passes_async_scheduling_on():
    on = build_command(ServerSpec(name="a", backend="vllm", model="/m", port=9000,
                                  engine=EngineConfig(async_scheduling=True)))
    off = build_command(ServerSpec(name="a", backend="vllm", model="/m", port=9000, engine=EngineConfig()))
    assert "--async-scheduling" in on and "--async-scheduling" not in off


def test_where_the_cpu_floor_binds_a_decode_step_is_the_step_models_own():
    """A CPU step time longer than a small batch's forward: max(forward, CPU) is not affine in the
    context, so the core must not extrapolate it from two points (``LLMCore.decode_s``)."""
    from dataclasses import replace

    from orchestrator.engines.llm_core import LLMCore

    base = step_model(**H100_8B)
    step = replace(base, iteration_overhead_s=0.02).with_scheduling(True)     # 20 ms: binds at small contexts
    core = LLMCore(name="c", step=step, kv_tokens=1 << 20, sink=lambda s, now: None,
                   config=EngineConfig(async_scheduling=True))
    for n in (1, 8):
        for ctx in (0.0, 1e3, 1e5, 1e6, 1e7):
            assert core.decode_s(n, ctx) == pytest.approx(step.step_s(0, 0.0, n, ctx), rel=1e-12)
    assert core.decode_s(1, 0.0) == pytest.approx(0.02)


def test_served_overheads_survive_the_engines_scheduling_mode():
    """The closed loop's ``ServedStep`` (per-step and per-call serving overheads) and its CPU-share
    rescaling keep their terms when the engine core applies its scheduling mode (``engine_step``)."""
    from harness.closedloop_meter import ScaledStep
    from harness.closedloop_model import ServedStep
    from profiler.engine import engine_step

    base = step_model(**H100_8B)
    served = ServedStep(base, per_step_s=0.003, per_call_s=0.01)
    for cfg in (EngineConfig(), EngineConfig(async_scheduling=True)):
        got = engine_step(ScaledStep(served, 2.0), cfg)
        want = 2.0 * (base.with_scheduling(cfg.async_scheduling).decode_step_s(4, 500.0) + 0.003)
        assert got.decode_step_s(4, 500.0) == pytest.approx(want, rel=1e-12)
