"""The control loop on the cluster simulator: a short compressed day (issue 19)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.adaptive.config import ControllerConfig, TaskModel
from harness.adaptive.diurnal import DiurnalProfile, diurnal_workload
from harness.adaptive.sim import simulate_day
from harness.trace import Trace
from solvers.registry import get_solver
from tests.harness.test_adaptive import problem

PROFILE = DiurnalProfile(compression=240.0, peak_x=3.0)          # a day in 360 simulated seconds
CFG = ControllerConfig(interval_s=2, window_s=8, window_long_s=12, up_gap_s=4, cooldown_s=10, headroom=1.0,
                       startup_fixed_s=2.0, load_gb_per_s=10.0)


@pytest.fixture(scope="module")
def day():
    trace = Trace("t", np.arange(40.0), np.full(40, 60), np.arange(4, 44)[::-1].copy())
    tasks = [TaskModel(problem("a", gpus=6), {"w": [(60, 24)]})]
    wl = diurnal_workload(trace, [1.0], PROFILE, seed=3)
    run = lambda cfg, rates: simulate_day(tasks, problem(gpus=6).cluster, get_solver("flowmaker"), wl, gpu="a6000",
                                          initial_rates=rates, end_s=PROFILE.duration_s, config=cfg)
    peak = 3.0 * PROFILE.peak_multiplier()
    return wl, run(CFG, [3.0 * float(PROFILE.multiplier(0.0))]), run(CFG.model_copy(update={"adaptive": False}), [peak])


def test_adaptive_day_follows_the_load_and_pays_for_what_it_held(day):
    wl, ada, static = day
    s = ada.summary
    assert s["requests"] == len(wl) and s["failed"] == 0 and s["completed"] == len(wl)
    assert s["migrations"] >= 2 and s["gb_peak"] > s["gb_min"]
    assert {d["reason"] for d in ada.decisions if d["outcome"] == "migrate"} >= {"up", "down"}
    assert s["reserved_gb_s"] == pytest.approx(sum(r["mem_gb"] * ((r["released_s"] if r["released_s"] is not None
                                                              else s["residency_s"]) - r["start_s"])
                                               for r in ada.instances))
    steps = ada.gb_steps
    integral = sum(g * (t2 - t1) for (t1, g), (t2, _) in zip(steps, steps[1:]))
    assert integral == pytest.approx(s["reserved_gb_s"])
    # every instance started mid-run became ready only after its modelled start-up, and every
    # released one was released after it drained (no request failed)
    for r in ada.instances:
        if r["start_s"] > 0:
            assert r["ready_s"] is None or r["ready_s"] >= r["start_s"] + 2.0
        if r["released_s"] is not None:
            assert r["released_s"] >= r["drain_s"]
    assert static.summary["migrations"] == 0 and static.summary["gb_min"] == static.summary["gb_peak"]
    assert s["reserved_gb_s"] < static.summary["reserved_gb_s"]
    assert s["goodput"] >= static.summary["goodput"] - 0.02


def test_the_same_day_twice_gives_the_same_result(day):
    wl, ada, _ = day
    trace = Trace("t", np.arange(40.0), np.full(40, 60), np.arange(4, 44)[::-1].copy())
    tasks = [TaskModel(problem("a", gpus=6), {"w": [(60, 24)]})]
    again = simulate_day(tasks, problem(gpus=6).cluster, get_solver("flowmaker"),
                         diurnal_workload(trace, [1.0], PROFILE, seed=3), gpu="a6000",
                         initial_rates=[3.0 * float(PROFILE.multiplier(0.0))], end_s=PROFILE.duration_s, config=CFG)
    assert again.summary["goodput"] == ada.summary["goodput"]
    assert again.summary["reserved_gb_s"] == ada.summary["reserved_gb_s"]
    assert [d["outcome"] for d in again.decisions] == [d["outcome"] for d in ada.decisions]
