"""Quiet decode stretches (``LLMCore`` built with ``coast``, issue 22 item 7): a core that runs a
stretch of quiet decode iterations as one heap entry behaves bit for bit as one that runs every
iteration as an event: the same per-call times, iterations, tokens, KV blocks, busy times and
event counts, under every policy, with preemptions, shared GPUs, an instance added on a coasting
core's GPU and a loop run in pieces (all with the profiler's step times: see the last test for
what exact ties between two cores' events may change)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from harness.simulate import SimulateConfig, simulate
from orchestrator.engines.llm_core import LLMCore
from orchestrator.runtime.events import Event, Simulator
from profiler.engine import EngineConfig
from selector.deployment import InstanceSpec, Route
from tests.harness.helpers import ConstStep, make_trace, poisson_trace

CORE_STATE = ("iterations", "prefill_iterations", "tokens", "busy_s", "free", "dit", "ctx_sum", "preemptions",
              "completed", "rejected", "outstanding", "time")


def _no_coast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LLMCore, "_coast", lambda self: False)


def _state(instances) -> list:
    return [[getattr(i, k) for k in CORE_STATE] for i in instances]


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            assert x.tobytes() == y.tobytes(), k
        else:
            assert x == y, k


def _simulated(trace, cfg: SimulateConfig, stretches: list[int]) -> dict:
    coasted = []
    real = LLMCore._settle

    def count(self, j):       # how many iterations ran inside stretches (the test must exercise them)
        coasted.append(j)
        return real(self, j)

    LLMCore._settle = count
    try:
        r = simulate(trace, cfg)
    finally:
        LLMCore._settle = real
    stretches.append(sum(coasted))
    out = {k: r.table[k] for k in ("arrival_s", "sched_s", "first_s", "done_s", "failed")}
    out.update(events=r.summary["events"], simulated_s=r.summary["simulated_s"], state=_state(r.instances))
    return out


@pytest.mark.parametrize("engine", [
    dict(scheduler="vllm-v1"), dict(scheduler="vllm-v1", long_prefill_token_threshold=64, kv_capacity_tokens=6000),
    dict(scheduler="vllm", kv_capacity_tokens=5000), dict(scheduler="sarathi", kv_capacity_tokens=5000),
    dict(scheduler="padded"), dict(scheduler="vllm-v1", async_scheduling=True),
])
def test_what_if_coasting_changes_nothing(engine, monkeypatch):
    trace = poisson_trace(6.0, 400, np.arange(400) % 300 + 20, np.arange(400) * 7 % 200 + 1, seed=3)
    cfg = SimulateConfig(model="llama-3.1-8b", gpu="a100-80gb", replicas=2, router="round-robin",
                         engine=EngineConfig(**engine))
    stretches: list[int] = []
    on = _simulated(trace, cfg, stretches)
    _no_coast(monkeypatch)
    off = _simulated(trace, cfg, stretches)
    _same(on, off)
    assert stretches[0] > 1000 and stretches[1] == 0


def test_closed_loop_coasting_changes_nothing(monkeypatch):
    trace = make_trace(np.zeros(300), np.arange(300) % 500 + 1, np.arange(300) % 90 + 1)
    cfg = SimulateConfig(model="llama-3.1-8b", gpu="a100-80gb", concurrency=24,
                         engine=EngineConfig(scheduler="vllm", kv_capacity_tokens=4000))
    stretches: list[int] = []
    on = _simulated(trace, cfg, stretches)
    _no_coast(monkeypatch)
    _same(on, _simulated(trace, cfg, stretches))
    assert stretches[0] > 100


class _At(Event):
    __slots__ = ("fn",)
    priority = 2

    def __init__(self, time: float, fn) -> None:
        self.time, self.fn = time, fn

    def handle(self, sim: Simulator) -> None:
        self.fn()


def _cluster(step) -> tuple[ClusterSim, Workload]:
    """Two stages: classify on i0 (GPU 0, alone) and i1 (GPU 1, shared with r1), respond on r0
    (GPU 2) and r1; at 20 s an instance joins GPU 2, where r0 then runs colocated."""
    insts = [InstanceSpec("i0", "qwen2.5-3b", 1, 1, (0,), 20.0), InstanceSpec("i1", "qwen2.5-3b", 1, 1, (1,), 20.0),
             InstanceSpec("r0", "llama-3.1-8b", 1, 1, (2,), 40.0), InstanceSpec("r1", "llama-3.1-8b", 1, 1, (1,), 40.0)]
    stages = (SimStage("classify", 1, 300, 16, (Route(("i0", "i1")),)), SimStage("respond", 2, 316, 60, (Route(("r0", "r1")),)))
    sim = ClusterSim(gpu="a6000", instances=insts, tasks=[SimTask("chat", 1e9, stages)], step_override=step,
                     busy_until_s=35.0, engine=EngineConfig(kv_capacity_tokens=20000))
    sim.sim.push(_At(20.0, lambda: sim.add_instance(InstanceSpec("x", "llama-3.1-8b", 1, 1, (2,), 40.0))))
    rng = np.random.default_rng(1)
    n = 300
    wl = Workload(np.sort(np.round(rng.uniform(0, 40, n), 1)), np.zeros(n, np.int64), rng.uniform(0.2, 3, n),
                  rng.uniform(0.2, 3, n), np.full(n, 0.5))
    return sim, wl


def _cluster_run(step, pieces: tuple[float, ...]) -> dict:
    sim, wl = _cluster(step)
    sim.begin(wl)
    sim._start()
    out: dict = {}
    for i, until in enumerate(pieces):           # the loop run in pieces, read between them
        sim.sim.run(until_s=until)
        out[f"state{i}"] = _state(sim.instances.values())
        out[f"busy{i}"] = sim.gpu_busy_s
    sim.sim.run()
    out.update(done_s=sim.done_s, failed=sim.failed, events=sim.events, now=sim.makespan_s,
               state=_state(sim.instances.values()), busy=sim.gpu_busy_s)
    return out


def test_cluster_coasting_changes_nothing(monkeypatch):
    on = _cluster_run(None, (7.0, 19.5, 33.3))
    assert any(v > 0 for v in on["busy"].values())
    _no_coast(monkeypatch)
    _same(on, _cluster_run(None, (7.0, 19.5, 33.3)))


def test_exact_ties_between_cores_may_be_ordered_otherwise(monkeypatch):
    """The one place coasting may differ (documented in LLMCore): with a constant step time,
    identical cores end iterations at the same instant to the bit, and the order in which two
    such simultaneous events are handled decides routing; coasting keeps every call served
    and the iteration count, but not necessarily that order."""
    on = _cluster_run(ConstStep(0.02), ())
    _no_coast(monkeypatch)
    off = _cluster_run(ConstStep(0.02), ())
    assert not on["failed"].any() and not off["failed"].any()
    # every iteration end counted once as an event: the other events (arrival instants, the join) agree
    assert on["events"] - sum(s[0] for s in on["state"]) == off["events"] - sum(s[0] for s in off["state"])


def test_reschedule_moves_an_entry_earlier_only():
    loop = Simulator()
    seen: list[str] = []

    class _E(Event):
        __slots__ = ("name",)

        def __init__(self, time: float, name: str) -> None:
            self.time, self.name = time, name

        def handle(self, sim: Simulator) -> None:
            seen.append(self.name)

    a, b = _E(5.0, "a"), _E(3.0, "b")
    entry = loop.push(a)
    loop.push(b)
    a.time = 6.0
    with pytest.raises(ValueError, match="cannot move"):
        loop.reschedule(entry)
    a.time = 1.0
    loop.reschedule(entry)
    loop.run()
    assert seen == ["a", "b"] and loop.events_handled == 2
