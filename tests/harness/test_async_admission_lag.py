"""Async scheduling's admission lag (issue 23): vLLM with ``async_scheduling`` plans step n+1 as
step n starts (``EngineCore.step_with_batch_queue``, two batches in flight), so a request that
reaches a busy engine during step n is first scheduled in step n+2; an idle engine schedules it at
once (``LLMCore._late``)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.simulate import SimulateConfig, simulate
from harness.trace import Trace
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_seq import Seq
from orchestrator.runtime.events import Event, Simulator
from profiler.engine import EngineConfig
from tests.harness.helpers import ConstStep

STEP = 0.01


class _Submit(Event):
    __slots__ = ("core", "seq")
    priority = 2

    def __init__(self, time: float, core: LLMCore, seq: Seq) -> None:
        self.time, self.core, self.seq = time, core, seq

    def handle(self, sim: Simulator):
        return self.core.submit(self.seq, sim.now)


def _first_token(arrivals: list[tuple[float, Seq]], async_scheduling: bool) -> list[float]:
    """Each (time, seq) submitted to one vllm-v1 core whose every step takes 10 ms (the step time
    does not depend on the scheduling mode here: only the admission does)."""
    loop = Simulator()
    core = LLMCore(name="c", step=ConstStep(STEP), kv_tokens=1 << 16, sink=lambda s, now: None, loop=loop,
                   config=EngineConfig(async_scheduling=async_scheduling))
    for t, s in arrivals:
        loop.push(_Submit(t, core, s))
    loop.run()
    core.check()
    return [s.first_s for _, s in arrivals]


def test_a_request_reaching_a_busy_engine_waits_one_more_step():
    """A decodes in 10 ms steps; B arrives 0.5 ms into step 2 (0.010-0.020). Synchronous: step 3
    (planned as step 2 ends) prefills B, first token at 0.030. Async: step 3 was planned as step 2
    started, before B arrived, so B is prefilled in step 4, first token at 0.040."""
    def run(flag):
        return _first_token([(0.0, Seq(1, 16, 50)), (0.0105, Seq(2, 16, 2))], flag)
    assert run(False) == pytest.approx([STEP, 3 * STEP])
    assert run(True) == pytest.approx([STEP, 4 * STEP])


def test_an_idle_engine_admits_at_once_in_both_modes():
    """B arrives after A is done (idle engine) and C exactly as the step that finishes A ends (a
    closed-loop client's next request): nothing was planned for the next step, so neither waits."""
    for flag in (False, True):
        idle = _first_token([(0.0, Seq(1, 16, 3)), (1.0, Seq(2, 16, 2))], flag)
        assert idle == pytest.approx([STEP, 1.0 + STEP])
        same = _first_token([(0.0, Seq(1, 16, 3)), (3 * STEP, Seq(2, 16, 2))], flag)
        assert same == pytest.approx([STEP, 4 * STEP])


def test_requests_queued_before_the_plan_are_admitted_in_order_the_late_ones_after():
    """Request 2 waited since before step 1 (its budget was full): admitted in step 2 with no lag.
    Requests 3 and 4 arrive during step 2: both wait one step more, in arrival order."""
    seqs = [(0.0, Seq(1, 64, 20)), (0.0, Seq(2, 8, 20)), (0.012, Seq(3, 8, 2)), (0.015, Seq(4, 8, 2))]
    loop = Simulator()
    core = LLMCore(name="c", step=ConstStep(STEP), kv_tokens=1 << 16, sink=lambda s, now: None, loop=loop,
                   config=EngineConfig(async_scheduling=True, max_num_batched_tokens=64, max_num_seqs=64))
    for t, s in seqs:
        loop.push(_Submit(t, core, s))
    loop.run()
    core.check()
    first = [s.first_s for _, s in seqs]
    # 1's prompt fills step 1's budget, 2 is prefilled in step 2 (queued since 0); 3 and 4 arrived during step 2
    # (started 0.010), so step 3 (planned at 0.010) cannot take them: both prefill in step 4
    assert first == pytest.approx([STEP, 2 * STEP, 4 * STEP, 4 * STEP])
    assert [s.sched_s for _, s in seqs] == pytest.approx([0.0, STEP, 3 * STEP, 3 * STEP])


def test_closed_loop_clients_out_of_step_wait_about_one_step_more():
    """Four clients whose requests end at different steps: each next request reaches a busy engine,
    so its first token comes about one step later than under synchronous scheduling, although
    async steps are shorter (the CPU step time overlaps the forward)."""
    n = 64
    trace = Trace("t", np.zeros(n), np.full(n, 48), np.arange(n) % 7 * 9 + 20)
    out = {}
    for flag in (False, True):
        cfg = SimulateConfig(model="llama-3.1-8b", gpu="h100-sxm", concurrency=4,
                             engine=EngineConfig(async_scheduling=flag))
        out[flag] = simulate(trace, cfg).summary
    sync, asy = out[False], out[True]
    assert asy["tpot_s"]["mean"] < sync["tpot_s"]["mean"]
    step = asy["tpot_s"]["mean"]         # a decode step of this batch
    assert 0.5 * step < asy["ttft_s"]["mean"] - sync["ttft_s"]["mean"] < 1.05 * step
