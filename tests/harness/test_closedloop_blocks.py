"""The closed loop's noise guards without servers: blocks of a load, the queue wait derived from
a one-at-a-time server's call records, core pinning, and the spread over repeats."""
from __future__ import annotations

import os

import numpy as np
import pytest

from harness.closedloop import _fifo_queue, blocks, server_cpus, workload
from harness.closedloop_report import spread
from harness.closedloop_model import LoopConfig, ServedStep, traffic_overheads
from harness.servers.launcher import _pinning


def test_blocks_cover_the_load_in_order_each_from_zero():
    wl = workload(LoopConfig(requests=10), 2.0, seed=0)
    parts = blocks(wl, 4)
    assert [len(p) for p in parts] == [4, 4, 2] and all(p.arrival_s[0] == 0 for p in parts)
    gaps = np.concatenate([np.diff(p.arrival_s) for p in parts])
    whole = np.diff(wl.arrival_s)
    assert np.allclose(gaps, np.delete(whole, [3, 7]))     # the gaps inside blocks are kept
    assert np.array_equal(np.concatenate([p.prompt_scale for p in parts]), wl.prompt_scale)
    assert [len(p) for p in blocks(wl, None)] == [10]


def test_queue_wait_is_the_time_behind_the_previous_call_on_the_same_server():
    calls = [{"instance": "a", "start_s": 0.0, "end_s": 2.0}, {"instance": "a", "start_s": 1.0, "end_s": 3.0},
             {"instance": "b", "start_s": 1.5, "end_s": 2.0}, {"instance": "a", "start_s": 5.0, "end_s": 6.0}]
    _fifo_queue(calls)
    assert [c["queue_s"] for c in calls] == [0.0, 1.0, 0.0, 0.0]


def test_servers_get_distinct_cores_when_pinned():
    assert server_cpus(LoopConfig()) == [(), ()]
    got = server_cpus(LoopConfig(pin_cores=True))
    if not hasattr(os, "sched_getaffinity"):
        assert got == [(), ()]
        return
    mine = os.sched_getaffinity(0)
    assert all(len(c) == 1 and c[0] in mine for c in got)
    assert (got[0] != got[1]) == (len(mine) > 1)
    assert _pinning(()) is None and (_pinning((0,)) is None) == (not hasattr(os, "sched_setaffinity"))


@pytest.mark.parametrize("errs, ok", [((5.0, -12.0, 19.9), "yes"), ((5.0, 25.0, 1.0), "no")])
def test_the_spread_says_whether_every_repeat_is_within_the_target(errs, ok):
    loads = [{"repeat": r, "load": 0.3, "error_pct": {"e2e_mean_s": e, "tpot_mean_s": 1.0, "ttft_mean_s": 50.0},
              "blocks": [{"machine_loadavg_1m": [1.0 + r, 2.0]}]} for r, e in enumerate(errs)]
    text = "\n".join(spread(loads, 20.0))
    row = next(line for line in text.splitlines() if "| E2E mean |" in line)
    assert row.endswith(f"| {ok} |") and f"{min(errs):+.1f}" in row
    assert "(not a target)" in text and "machine load average (1 min) 1.0-3.0" in text


class _Step:
    def step_s(self, prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens, *, prefill_seqs=1):
        return 1e-3 * prefill_tokens + 1e-2 * decode_batch + 1e-5 * decode_context_tokens


def test_traffic_overheads_recover_what_a_served_step_adds_to_replayed_calls():
    truth = ServedStep(_Step(), per_step_s=0.004, per_call_s=0.03)
    calls = []
    for k, (p, o, q) in enumerate([(100, 8, 0.0), (250, 12, 0.7), (60, 5, 0.1), (180, 20, 2.0), (90, 6, None)]):
        ttft = truth.prefill_s(p)
        tpot = truth.decode_step_s(1, p + o / 2)
        calls.append({"prompt_tokens": p, "output_tokens": o, "queue_s": q or 0.0, "ttft_s": ttft + (q or 0.0),
                      "tpot_s": tpot})
    calls.append({"prompt_tokens": None, "output_tokens": None, "queue_s": 0.0, "ttft_s": 9.0, "tpot_s": 9.0})
    per_call, per_step = traffic_overheads(ServedStep(_Step()), calls)     # the call without token counts: left out
    assert per_call == pytest.approx(0.03) and per_step == pytest.approx(0.004)
