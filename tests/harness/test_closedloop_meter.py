"""The closed loop's CPU-share meter: run and run-queue wait times of the servers' threads, and a
step model rescaled from one share to another."""
from __future__ import annotations

import os
import sys

import pytest

from harness.closedloop_meter import CpuMeter, CpuWindow, ScaledStep, rescaled, sched_ns
from harness.closedloop_model import ServedStep


class _Step:
    def step_s(self, prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens, *, prefill_seqs=1):
        return 1e-3 * prefill_tokens + 1e-2 * decode_batch

    weights_gb = 0.5


def test_share_is_run_over_runnable_time():
    assert CpuWindow(3.0, 1.0, 0.5, 10.0).share == pytest.approx(0.75)
    assert CpuWindow(0.0, 0.0, 0.0, 1.0).share is None            # never runnable, or no schedstat
    d = CpuWindow(1.0, 1.0, 0.2, 4.0).as_dict()
    assert d["server_cpu_share"] == 0.5 and d["client_cpu_s"] == 0.2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_the_meter_sees_this_process_compute():
    assert sched_ns([2 ** 22 + 12345]) == (0, 0)                   # no such process: nothing, no error
    with CpuMeter([os.getpid()]) as m:
        sum(i * i for i in range(300_000))
    w = m.window
    if sched_ns([os.getpid()]) == (0, 0):
        pytest.skip("kernel without schedstat")
    assert w.run_s > 0 and w.wait_s >= 0 and 0 < w.share <= 1 and w.client_cpu_s > 0 and w.wall_s > 0


def test_a_step_at_half_the_share_takes_twice_as_long():
    served = ServedStep(_Step(), per_step_s=0.002, per_call_s=0.05)
    slow = rescaled(served, 0.8, 0.4)
    assert isinstance(slow, ScaledStep) and slow.factor == pytest.approx(2.0)
    assert slow.prefill_s(100) == pytest.approx(2 * served.prefill_s(100))
    assert slow.decode_step_s(1, 50.0) == pytest.approx(2 * served.decode_step_s(1, 50.0))
    assert slow.weights_gb == 0.5
    assert rescaled(served, None, 0.4) is served and rescaled(served, 0.8, None) is served
