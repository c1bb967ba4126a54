"""The re-selection controller on real ``transformers serve`` processes (CPU, the tiny random Llama
of conftest standing in for the catalog model): the load rises and falls, a server is launched
mid-run, becomes healthy, takes calls, and is drained and stopped (issue 19 item 4)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.adaptive.config import ControllerConfig, TaskModel
from harness.adaptive.diurnal import DiurnalProfile, diurnal_workload
from harness.adaptive.live import run_live_day
from harness.cluster import Workload
from harness.live import LiveSettings
from harness.trace import Trace
from solvers.registry import get_solver
from tests.harness.test_adaptive import problem

CFG = ControllerConfig(interval_s=1.0, window_s=6.0, window_long_s=8.0, up_gap_s=3.0, cooldown_s=8.0, headroom=1.0,
                       drift_down=0.3)


def _step_workload(seed=0):
    """0.2 req/s for 16 s, 1.0 req/s for 40 s, 0.2 req/s for 50 s (Poisson, seeded). A server takes
    ~15 s to start on this CPU (longer on a slow or busy one), and the rise may take two moves up
    (the first window straddles the step): the high phase outlasts a slow start, so the server
    launched mid-run is ready while calls still overlap (at 0.2 req/s each call finds the first
    instance idle and takes it: a CI run whose server was ready only after the step failed that
    way); the long tail leaves the move down (cooldown_s after that) and the drain time before the
    requests run out and the control loop stops."""
    rng = np.random.default_rng(seed)
    parts, t = [], 0.0
    for rate, span in ((0.2, 16.0), (1.0, 40.0), (0.2, 50.0)):
        n = rng.poisson(rate * span)
        parts.append(np.sort(rng.uniform(t, t + span, n)))
        t += span
    a = np.concatenate(parts)
    n = len(a)
    return Workload(a, np.zeros(n, np.int64), np.ones(n), np.ones(n), rng.uniform(size=n)), t


def _day(tiny_llama_dir, tmp_path, workload, end_s, initial):
    task = TaskModel(problem("a", gpus=4, capacity=0.45), {"w": [(24, 3)]})
    return run_live_day([task], problem(gpus=4).cluster, get_solver("flowmaker"), workload, gpu="a6000",
                        initial_rates=[initial], end_s=end_s, config=CFG, log_dir=tmp_path / "servers",
                        settings=LiveSettings(max_prompt_tokens=24, max_output_tokens=3, max_concurrency=8),
                        stand_in=str(tiny_llama_dir), spec_args={"dtype": "float32"}, startup_timeout_s=180)


def _check(res, n):
    s = res.summary
    assert s["requests"] == n and s["failed"] == 0, s
    moves = [d for d in res.decisions if d["outcome"] == "migrate"]
    assert {"up", "down"} <= {d["reason"] for d in moves}, res.decisions
    late = [r for r in res.instances if r["start_s"] > 0]
    assert late and all(r["ready_s"] is None or r["ready_s"] > r["start_s"] for r in late)
    served = [r for r in late if s["calls_by_instance"].get(r["instance"], 0) > 0]
    assert served, (late, s["calls_by_instance"])                      # a server launched mid-run took calls
    assert any(r["released_s"] is not None for r in res.instances)     # and one was drained and stopped
    assert s["gb_peak"] > s["gb_min"] and s["reserved_gb_s"] > 0


def test_live_controller_launches_and_drains_servers(tiny_llama_dir, tmp_path):
    wl, end = _step_workload()
    res = _day(tiny_llama_dir, tmp_path, wl, end, initial=0.2)
    _check(res, len(wl))
    logs = sorted(p.name for p in (tmp_path / "servers").glob("*.log"))
    assert len(logs) >= 2 and any("@" in name for name in logs)


@pytest.mark.slow
def test_live_compressed_day(tiny_llama_dir, tmp_path):
    """A four-minute day (the default profile compressed 360x) on live servers."""
    prof = DiurnalProfile(peak_x=1.0, compression=360.0)
    trace = Trace("t", np.arange(20.0), np.full(20, 24), np.full(20, 3))
    wl = diurnal_workload(trace, [1.0], prof, seed=1)
    res = _day(tiny_llama_dir, tmp_path, wl, prof.duration_s, initial=float(prof.multiplier(0.0)))
    _check(res, len(wl))
