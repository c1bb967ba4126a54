"""ClusterSim with instances that start and stop while it runs (harness.adaptive's backend)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from orchestrator.runtime.events import Event
from profiler.engine import EngineConfig
from selector.deployment import InstanceSpec, Route
from tests.harness.helpers import ConstStep


class _At(Event):
    __slots__ = ("fn",)
    priority = 2

    def __init__(self, time, fn):
        super().__init__(time)
        self.fn = fn

    def handle(self, sim):
        self.fn()
        return None


def _task(*ids):
    return SimTask("t", 1e9, (SimStage("s", 1, 100, 3, (Route(ids),)),))


def _sim(step=0.1, gpus=(0,)):
    return ClusterSim(gpu="a6000", instances=[InstanceSpec("i0", "m", 1, 1, gpus, 10.0)], tasks=[_task("i0")],
                      step_override=ConstStep(step), engine=EngineConfig(max_num_seqs=1))


def _wl(arrivals):
    n = len(arrivals)
    return Workload(np.asarray(arrivals, float), np.zeros(n, np.int64), np.ones(n), np.ones(n), np.full(n, 0.5))


def test_switch_routes_new_requests_only_and_old_instance_finishes_its_own():
    sim = _sim()
    arr = np.arange(20) * 0.5                   # every 0.5 s; a call takes 3 iterations of 0.1 s
    switch_s = 4.9

    def switch():
        sim.add_instance(InstanceSpec("i1", "m", 1, 1, (1,), 10.0))
        sim.set_task(0, _task("i1"))

    sim.sim.push(_At(switch_s, switch))
    res = sim.run(_wl(arr))
    assert not res["failed"].any()
    before = int((arr < switch_s).sum())
    assert sim.instances["i0"].completed == before
    assert sim.instances["i1"].completed == len(arr) - before
    assert np.allclose(res["done_s"] - arr, 0.3)    # alone on its GPU: no waiting, no slowdown


def test_remove_instance_only_when_idle_and_drops_its_routes():
    sim = _sim()
    sim.run(_wl([0.0]))
    sim.add_instance(InstanceSpec("i1", "m", 1, 1, (1,), 10.0))
    sim.set_task(0, _task("i1"))
    sim.remove_instance("i0")
    assert "i0" not in sim.instances and all("i0" not in ids for ids in sim._groups)
    with pytest.raises(ValueError, match="already exists"):
        sim.add_instance(InstanceSpec("i1", "m", 1, 1, (1,), 10.0))
    sim2 = _sim()
    sim2.begin(_wl([0.0]))
    sim2.sim.push_all(sim2.arrive_one(0, 0.0))
    sim2.sim.run(until_s=0.05)                      # mid-call
    with pytest.raises(ValueError, match="still has 1 call"):
        sim2.remove_instance("i0")


def test_added_instance_on_a_shared_gpu_is_colocated():
    sim = _sim(gpus=(0,))
    two = SimTask("t", 1e9, (SimStage("s", 1, 100, 3, (Route(("i0",)),)),))
    other = SimTask("u", 1e9, (SimStage("s", 1, 100, 3, (Route(("j",)),)),))
    sim.tasks = [two, SimTask("u", 1e9, (), placed=False)]

    def add():
        sim.add_instance(InstanceSpec("j", "m", 1, 1, (0,), 10.0))   # same GPU as i0
        sim.set_task(1, other)

    sim.sim.push(_At(0.0, add))
    wl = Workload(np.array([1.0, 1.0]), np.array([0, 1]), np.ones(2), np.ones(2), np.full(2, 0.5))
    res = sim.run(wl)
    lat = res["done_s"] - 1.0
    assert (lat >= 0.5 - 1e-9).all() and lat.max() <= 0.6 + 1e-9   # alone 0.3: busy together, slowed


def test_untracked_gpu_slots_give_the_same_run():
    def run(track):
        insts = [InstanceSpec("a", "m", 1, 1, (0, 1), 10.0), InstanceSpec("b", "m", 1, 1, (1,), 10.0)]
        tasks = [SimTask("t", 1e9, (SimStage("s", 2, 100, 5, (Route(("a",)),)), SimStage("u", 1, 50, 9, (Route(("b",)),))))]
        sim = ClusterSim(gpu="a6000", instances=insts, tasks=tasks, step_override=ConstStep(0.05), track_busy=track)
        rng = np.random.default_rng(2)
        return sim, sim.run(_wl(np.sort(rng.uniform(0, 30, 200))))
    (on, a), (off, b) = run(True), run(False)
    assert np.array_equal(a["done_s"], b["done_s"]) and on.events == off.events
    assert on.gpu_busy_s[1] > 0 and off.gpu_busy_s == {}
