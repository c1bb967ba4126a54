"""Issue 8: what-if simulation (schedulers, KV capacity, saturation, trace layouts)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.simulate import SimulateConfig, simulate
from orchestrator.engines.llm_core import LLMCore
from profiler.engine import VLLM_SAMPLER_BYTES_PER_LOGIT, EngineConfig, kv_capacity_tokens
from profiler.steps import step_model
from tests.harness.helpers import LinearStep, make_trace, poisson_trace

A100_7B = dict(model="llama-2-7b", gpu="a100-80gb", tp=1)


def _queue_growth(res) -> float:
    """Least-squares slope of queueing time over arrival time (s of waiting per s of trace)."""
    q = res.table["sched_s"] - res.table["arrival_s"]
    return float(np.polyfit(res.table["arrival_s"], q, 1)[0])


@pytest.mark.parametrize("scheduler", ["vllm-v1", "vllm", "sarathi"])
def test_saturation_queue_grows_above_capacity_and_stays_bounded_below(scheduler):
    cfg = SimulateConfig(**A100_7B, engine=EngineConfig(scheduler=scheduler))
    low = simulate(poisson_trace(2.0, 600, 512, 128), cfg)
    high = simulate(poisson_trace(200.0, 3000, 512, 128), cfg)
    # below capacity: waiting does not trend up and stays far below a second
    assert abs(_queue_growth(low)) < 1e-3 and low.summary["queue_s"]["p99"] < 1.0
    # above it (D/D/1-like fluid limit): waiting grows linearly, by lambda/mu - 1 per second
    assert _queue_growth(high) > 1.0
    assert high.summary["queue_s"]["p99"] > 0.3 * high.summary["simulated_s"]
    assert high.summary["overloaded"] and not low.summary["overloaded"]      # harness.load's verdict


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi"])
def test_preemption_happens_when_the_kv_cache_is_small(scheduler):
    trace = make_trace(np.zeros(40), 300, 400)
    cfg = SimulateConfig(**A100_7B, engine=EngineConfig(scheduler=scheduler, kv_capacity_tokens=4096))
    res = simulate(trace, cfg)
    assert res.summary["preemptions"] > 0
    assert res.summary["completed"] == 40 and res.summary["failed"] == 0
    res.instances[0].check()
    big = simulate(trace, cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"kv_capacity_tokens": 100_000})}))
    assert big.summary["preemptions"] == 0


def test_a_call_larger_than_the_cache_fails_instead_of_looping():
    trace = make_trace([0.0, 0.1], [100, 5000], [10, 10])
    res = simulate(trace, SimulateConfig(**A100_7B, engine=EngineConfig(kv_capacity_tokens=1024)))
    assert res.summary["failed"] == 1 and res.summary["completed"] == 1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 3000), st.integers(1, 300)), min_size=1, max_size=60),
       st.sampled_from([64, 128, 512, 1000]), st.sampled_from([8, 32]), st.integers(600, 20000))
def test_sarathi_never_exceeds_the_token_budget(reqs, chunk, max_batch, kv):
    reqs.sort()
    trace = make_trace([r[0] for r in reqs], [r[1] for r in reqs], [r[2] for r in reqs])
    step = LinearStep()
    if max_batch >= chunk:
        return
    cfg = SimulateConfig(model="x", gpu="y", engine=EngineConfig(scheduler="sarathi", chunk_size=chunk, max_num_batched_tokens=4096,
                                                                 max_num_seqs=max_batch, kv_capacity_tokens=kv))
    res = simulate(trace, cfg, step=step)
    budget = min(chunk, 4096)
    assert all(p + d <= budget for p, _, d, _, _ in step.calls)
    assert res.summary["completed"] + res.summary["failed"] == len(reqs)
    res.instances[0].check()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 3000), st.integers(1, 300)), min_size=1, max_size=60),
       st.integers(600, 20000), st.sampled_from([1, 4, 128]))
def test_vllm_prefill_batches_respect_limits_and_every_call_ends(reqs, kv, max_batch):
    reqs.sort()
    trace = make_trace([r[0] for r in reqs], [r[1] for r in reqs], [r[2] for r in reqs])
    step = LinearStep()
    cfg = SimulateConfig(model="x", gpu="y", engine=EngineConfig(scheduler="vllm", max_num_batched_tokens=2048,
                                                                 max_num_seqs=max_batch, kv_capacity_tokens=kv))
    res = simulate(trace, cfg, step=step)
    for p, _, d, _, seqs in step.calls:
        assert (p == 0) != (d == 0)          # prefill-only or decode-only iterations
        assert p <= 2048 or seqs == 1        # an oversized prompt runs alone
        assert max(seqs, d) <= max_batch
    s = res.summary
    assert s["completed"] + s["failed"] == len(reqs)
    t = res.table
    ok = ~t["failed"]
    assert np.all(t["arrival_s"][ok] <= t["sched_s"][ok])
    assert np.all(t["sched_s"][ok] < t["first_s"][ok]) and np.all(t["first_s"][ok] <= t["done_s"][ok])
    res.instances[0].check()


def test_kv_capacity_is_memory_left_after_weights_and_activations():
    sm = step_model("llama-2-70b", "a100-80gb", 2, 1)
    usable = 2 * 80 * 2**30 / 1e9 * 0.9          # two "80 GB" (80 GiB) GPUs at gpu_mem_util 0.9, in GB
    cfg = EngineConfig()
    kv = kv_capacity_tokens(sm, cfg, mem_gb=usable)
    # vLLM's rule: the forward workspace (split over the GPUs) and the sampler warm-up on one GPU do
    # not coexist, so each GPU reserves the larger of the two
    peak = 2 * max(sm.workspace_gb(cfg.max_num_batched_tokens) / 2,
                   sm.logits_gb(cfg.max_num_seqs, VLLM_SAMPLER_BYTES_PER_LOGIT))
    expect = (usable - sm.weights_gb - peak - sm.runtime_overhead_gb) / sm.kv_gb_per_token
    assert kv == int(expect) == 40_568
    res = simulate(make_trace([0.0], 10, 2), SimulateConfig(model="llama-2-70b", gpu="a100-80gb", tp=2))
    assert res.summary["kv_capacity_tokens"] == kv // 16 * 16


def test_replicas_share_the_load():
    trace = poisson_trace(40.0, 400, 512, 64)
    cfg = SimulateConfig(**A100_7B)
    one = simulate(trace, cfg).summary
    for router in ("round-robin", "least-outstanding"):
        res = simulate(trace, cfg.model_copy(update={"replicas": 4, "router": router}))
        assert all(i.completed > 50 for i in res.instances)
        assert res.summary["e2e_s"]["mean"] <= one["e2e_s"]["mean"]


def test_time_scale_and_max_requests():
    trace = poisson_trace(5.0, 100, 100, 10)
    cfg = SimulateConfig(**A100_7B, max_requests=30, time_scale=2.0)
    res = simulate(trace, cfg)
    assert res.summary["requests"] == 30
    assert res.table["arrival_s"][-1] == pytest.approx(2 * trace.arrived_at_s[29])


def test_tpot_and_ttft_follow_their_definitions():
    res = simulate(make_trace([0.0], 100, 11), SimulateConfig(**A100_7B))
    t = res.table
    assert res.summary["ttft_s"]["mean"] == pytest.approx(t["first_s"][0] - t["arrival_s"][0])
    assert res.summary["tpot_s"]["mean"] == pytest.approx((t["done_s"][0] - t["first_s"][0]) / 10)
    one = simulate(make_trace([0.0], 100, 1), SimulateConfig(**A100_7B))
    assert one.summary["tpot_s"]["mean"] is None


@pytest.mark.parametrize("model, gpu, tp", [("llama-2-70b", "a100-80gb", 2), ("qwen2.5-7b", "a6000", 1),
                                            ("mixtral-8x7b", "h100-sxm", 2)])
def test_memoised_decode_time_equals_the_profiler(model, gpu, tp):
    sm = step_model(model, gpu, tp, 1)
    inst = LLMCore(name="x", step=sm, kv_tokens=1024, sink=lambda c, t: None, config=EngineConfig())
    rng = np.random.default_rng(0)
    for n, ctx in zip(rng.integers(1, 256, 200), rng.integers(1, 500_000, 200)):
        assert inst.decode_s(int(n), int(ctx)) == pytest.approx(sm.step_s(0, 0.0, int(n), float(ctx)), rel=1e-9)
