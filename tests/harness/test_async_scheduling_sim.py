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
