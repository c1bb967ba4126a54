"""One serving model: an LLM instance fed the same requests through the harness (cluster simulator)
and through the orchestrator (Teola's runtime, prefill and decode primitives) gives identical
per-request times, because both run the one engine core on the one event loop."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from orchestrator.batching import Blind, Pending  # noqa: F401  (Pending: the engine scheduler's unit)
from orchestrator.engines import SimLLMEngine
from orchestrator.graph import GraphEditor
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.sim import QueryRun, SimState, run_events
from profiler.engine import EngineConfig, kv_capacity_tokens
from profiler.steps import step_model
from selector.deployment import InstanceSpec, Route


def _requests(n: int, rate: float, seed: int):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    prompts = rng.integers(50, 1500, n)
    outputs = rng.integers(1, 200, n)
    return arrivals, prompts, outputs


def _harness(arrivals, prompts, outputs, cfg: EngineConfig, mem_gb: float) -> np.ndarray:
    inst = InstanceSpec("m/0", "llama-3.1-8b", 1, 1, (0,), mem_gb)
    stage = SimStage("s", 1, 1, 1, (Route(("m/0",), 1.0),))     # call sizes = the request's own scales
    sim = ClusterSim(gpu="a6000", instances=[inst], tasks=[SimTask("t", 1e9, (stage,))], engine=cfg)
    n = len(arrivals)
    res = sim.run(Workload(arrivals, np.zeros(n, dtype=np.int64), prompts.astype(float), outputs.astype(float),
                           np.zeros(n)))
    return res["done_s"] - arrivals, sim.instances["m/0"]


def _graph(i: int, prompt: int, output: int):
    ed = GraphEditor({}, set(), [], name=f"q{i}")
    text = " ".join(["w"] * prompt)
    ed.add(Node("p", Kind.PREFILLING, "llm", "llm", {"segments": (Lit(text),)}, {"kv_chain": "d"}))
    ed.add(Node("d", Kind.DECODING, "llm", "llm", {"kv": Ref("p")},
                {"kv_chain": "d", "fmt": "text", "output_tokens": output, "n_items": 1}))
    ed.outputs = ["d"]
    return ed.freeze()


def _orchestrator(arrivals, prompts, outputs, cfg: EngineConfig, mem_gb: float) -> np.ndarray:
    sm = step_model("llama-3.1-8b", "a6000")
    eng = SimLLMEngine(name="m/0", step=sm, kv_capacity_tokens=kv_capacity_tokens(sm, cfg, mem_gb=mem_gb), config=cfg)
    sched = EngineScheduler(name="llm", instances=[eng], policy=Blind(), max_batch=1 << 20)
    runs = [QueryRun(i, _graph(i, int(p), int(o)), float(a), {})
            for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))]
    res = run_events(SimState(schedulers={"llm": sched}, dispatch_overhead_s=0.0), runs)
    return np.array([r.latency_s for r in res]), eng.core


@pytest.mark.parametrize("scheduler, rate, mem_gb", [("vllm", 2.0, 24.0), ("vllm", 12.0, 19.6),
                                                     ("sarathi", 8.0, 20.1), ("padded", 6.0, 24.0)])
def test_harness_and_orchestrator_give_identical_per_request_times(scheduler, rate, mem_gb):
    cfg = EngineConfig(scheduler=scheduler)
    arrivals, prompts, outputs = _requests(300, rate, seed=3)
    h, hcore = _harness(arrivals, prompts, outputs, cfg, mem_gb)
    o, ocore = _orchestrator(arrivals, prompts, outputs, cfg, mem_gb)
    assert np.all(np.isfinite(h)) and np.all(h > 0)
    np.testing.assert_allclose(o, h, rtol=1e-12, atol=1e-12)
    assert (hcore.iterations, hcore.preemptions) == (ocore.iterations, ocore.preemptions)
    hcore.check()
    ocore.check()


def test_the_comparison_exercises_batching_queueing_and_preemption():
    cfg = EngineConfig()
    arrivals, prompts, outputs = _requests(300, 12.0, seed=3)
    h, core = _harness(arrivals, prompts, outputs, cfg, 19.6)
    assert core.preemptions > 0 and core.iterations < sum(outputs)      # preempted, and batched
    alone = np.array([_harness(arrivals[i:i + 1], prompts[i:i + 1], outputs[i:i + 1], cfg, 19.6)[0][0]
                      for i in range(0, 300, 30)])
    assert np.all(h[::30] >= alone - 1e-12) and np.any(h[::30] > 1.5 * alone)   # queueing happened
