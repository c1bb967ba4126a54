"""Issue 13 item 4: the vLLM (v0) rules behind TTFT, each checked on a small case
(KV capacity, watermark, which sequence is preempted and how it resumes, TTFT across preemption).
The policy is pinned to ``scheduler="vllm"`` (v0) since ``vllm-v1`` became the default (issue 23);
V1's rules: tests/harness/test_vllm_v1_rules.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.simulate import SimulateConfig, simulate
from orchestrator.engines.admission import VllmV0
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_plan import IDLE, IterationPlan
from orchestrator.engines.llm_seq import DECODE, Seq
from profiler.engine import EngineConfig, kv_capacity_tokens, memory_budget_gb
from profiler.steps import gpu_spec, step_model
from tests.harness.helpers import LinearStep, make_trace

GIB = 2**30


def _run(arrivals, prompt, output, **engine):
    engine.setdefault("scheduler", "vllm")
    step = LinearStep()
    cfg = SimulateConfig(model="x", gpu="y", engine=EngineConfig(**engine))
    res = simulate(make_trace(arrivals, prompt, output), cfg, step=step)
    res.instances[0].check()
    return res, step


def test_kv_capacity_of_llama2_70b_tp2_lies_where_vllms_profiling_puts_it():
    """vLLM (v0 ``Worker.determine_num_available_blocks``): KV = total x gpu_memory_utilization -
    (weights + profiled peak activation + non-torch memory), per GPU, with ``total`` what the
    driver reports (79.15 GiB on an A100-80GB). Weights of Llama-2-70B: 68.98e9 parameters in bf16
    over 2 GPUs; peak activation of the 4,096-token profile pass 0.55-0.75 GiB per GPU (its gate/up
    projection output alone is 4,096 x 28,672 bf16 = 224 MiB); non-torch 0.1-0.7 GiB per GPU
    (NCCL, plus the CUDA context before vLLM 0.6.4); 160 KiB of KV per token per GPU."""
    sm = step_model("llama-2-70b", "a100-80gb", 2, 1)
    cfg = EngineConfig()
    mem = memory_budget_gb(cfg, gpu_capacity_gb=gpu_spec("a100-80gb").capacity_gb, n_gpus=2)
    kv = kv_capacity_tokens(sm, cfg, mem_gb=mem)
    per_token = 2 * 80 * 8 * 128 * 2 / 2        # K and V, 80 layers, 8 KV heads of 128 over TP2, bf16
    free = 0.9 * 79.15 * GIB - 68.98e9 * 2 / 2   # per GPU, before activations
    lowest = int((free - (0.75 + 0.7) * GIB) / per_token)
    highest = int((free - (0.55 + 0.1) * GIB) / per_token)
    assert lowest <= kv <= highest               # 36,322 <= 40,568 <= 41,565
    ceiling = int(free / per_token)              # no activation, no runtime at all: 45,825
    vidur = 13 * 4096    # vidur's MemoryPlanner: (0.9 x 80 GiB - layer weights) in whole 4,096-token slots
    assert kv < ceiling < vidur


def test_watermark_keeps_blocks_free_at_admission():
    """vLLM ``can_allocate``: admit when free - blocks(prompt) >= int(watermark x total blocks)."""
    # 10 blocks of 16; watermark 0.1 = 1 block. A takes 5 blocks, B needs 4 (5 - 4 = 1 >= 1): one pass
    res, step = _run([0.0, 0.0], [80, 64], [2, 2], kv_capacity_tokens=160, watermark=0.1)
    t = res.table
    assert t["sched_s"][0] == t["sched_s"][1] == 0.0 and step.calls[0][0] == 144
    # B needs 5 (5 - 5 = 0 < 1): it waits until A ends and frees its blocks
    res, _ = _run([0.0, 0.0], [80, 65], [2, 2], kv_capacity_tokens=160, watermark=0.1)
    t = res.table
    assert t["sched_s"][1] == pytest.approx(t["done_s"][0])
    # without the watermark both fit at once
    res, _ = _run([0.0, 0.0], [80, 65], [2, 2], kv_capacity_tokens=160, watermark=0.0)
    assert res.table["sched_s"][1] == 0.0


def test_preempted_sequence_resumes_by_recomputing_prompt_and_generated_tokens():
    """vLLM ``_preempt`` (RECOMPUTE for a single sequence): the newest running sequence frees its
    blocks and goes back to the head of the queue; on readmission its prompt + generated tokens
    are prefilled again and give the next token. Its first-token
    time stays the first one (vLLM ``maybe_set_first_token_time``; vidur ``prefill_completed_at``)."""
    # 4 blocks of 16; A and B (16-token prompts) decode until their contexts reach 32 tokens and
    # both need a third block: B (admitted last) is preempted after 17 tokens
    res, step = _run([0.0, 0.0], [16, 16], [40, 40], kv_capacity_tokens=64, watermark=0.0)
    inst, t = res.instances[0], res.table
    assert res.summary["preemptions"] == 1 and res.summary["completed"] == 2
    prefills = [c[0] for c in step.calls if c[0]]
    assert prefills == [32, 16 + 17]              # both prompts; then B's prompt + its 17 tokens
    first_pass_end = 0.01 + 1e-4 * 32            # LinearStep: one pass of 32 prompt tokens
    assert t["first_s"][0] == t["first_s"][1] == pytest.approx(first_pass_end)
    assert t["sched_s"][1] == 0.0                 # first admission kept
    assert t["done_s"][1] > t["done_s"][0]        # B is readmitted once A has finished
    assert inst.preemptions == 1


def test_readmission_needs_blocks_for_prompt_and_generated_tokens_above_the_watermark():
    """vLLM ``can_allocate`` on a recomputed sequence counts all its tokens (``get_token_ids``:
    prompt + output); vidur's ``restart`` makes them its prefill tokens. 10 blocks, watermark 1."""
    inst = LLMCore(name="x", step=LinearStep(), kv_tokens=160, sink=lambda s, t: None,
                   config=EngineConfig(scheduler="vllm", watermark=0.1))
    s = Seq(0, 16, 40, 0.0)
    inst.waiting.append(s)
    inst._apply(IterationPlan(chunks=((s, 16),)), 0.0)       # admitted, then preempted mid-prefill
    s.gen = 17                      # as if it had generated 17 tokens
    inst._apply(IterationPlan(preempt=(s,)), 0.0)
    assert inst.waiting[0] is s and inst.new_blocks(s) == 3 and inst.preemptions == 1 and inst.free == 10
    inst.free = 3                   # 3 - 3 = 0 blocks would be left, below the watermark
    assert VllmV0().schedule(inst) is IDLE and inst.waiting[0] is s
    inst.free = 4
    plan = VllmV0().schedule(inst)
    assert plan.chunks == ((s, 33),) and not plan.preempt and not plan.decode
    assert inst._apply(plan, 0.0) > 0.0 and inst.free == 1 and inst.prefilling[0] is s


def test_ttft_of_a_sequence_preempted_before_its_first_token_runs_to_its_eventual_first_token():
    """Chunked prefill (sarathi): a partially prefilled sequence is preempted first; its prompt is
    prefilled again from the start on readmission and its TTFT ends with that prefill."""
    # 7 blocks. R1 (15 tokens) decodes; R2 (96 tokens = 6 blocks) is prefilled in 32-token chunks.
    # R1's context reaches 16 in the second decode iteration and needs a block: R2 is preempted.
    res, step = _run([0.0, 0.0], [15, 96], [40, 2], kv_capacity_tokens=112, watermark=0.0, scheduler="sarathi",
                     chunk_size=32, max_num_seqs=8)
    t = res.table
    assert res.summary["preemptions"] == 1
    assert t["sched_s"][1] == 0.0
    assert t["first_s"][1] > t["done_s"][0]                  # its first token after the re-prefill
    assert sum(c[0] for c in step.calls) == 15 + 17 + 31 + 96   # R2's 48 prefilled tokens are redone
    assert res.summary["ttft_s"]["mean"] == pytest.approx(np.mean(t["first_s"] - t["arrival_s"]))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 3), st.integers(1, 600), st.integers(1, 200)), min_size=2, max_size=50),
       st.integers(40, 200))
def test_victim_is_the_most_recently_admitted_which_is_the_most_recently_arrived(reqs, blocks):
    """Later vLLM v0 and V1 preempt the last of the running queue, i.e. the most recently
    (re)admitted sequence; early vLLM v0 and vidur sort the running sequences by arrival and
    preempt the latest arrival. With FIFO arrivals and preempted sequences re-queued at the head, the two are
    the same sequence: the running sequences are in arrival order and arrived before every waiting
    one, so the last admitted is the last arrived."""
    reqs.sort()
    trace = make_trace([r[0] for r in reqs], [r[1] for r in reqs], [r[2] for r in reqs])
    victims: list[bool] = []
    orig = LLMCore._preempt

    def check(self, s):
        if s.state == DECODE:
            victims.append(s is max(self.running.values(), key=lambda r: (r.arrival_s, r.id)))
        orig(self, s)

    LLMCore._preempt = check
    try:
        cfg = SimulateConfig(model="x", gpu="y", engine=EngineConfig(scheduler="vllm", kv_capacity_tokens=16 * blocks))
        res = simulate(trace, cfg, step=LinearStep())
    finally:
        LLMCore._preempt = orig
    assert all(victims)
    assert res.summary["completed"] + res.summary["failed"] == len(reqs)
    assert math.isfinite(res.summary["simulated_s"])


def test_what_if_agrees_with_vidur_at_moderate_load_on_equal_capacity():
    """Issue 13 target: TTFT mean and p90 within 25% of vidur's, TPOT and E2E within 5%, on the
    same requests and KV capacity (experiments/kinds/bench_vidur.py; vidur's figures recorded there)."""
    from experiments.kinds import bench_vidur
    from profiler.catalog import shared_data_path

    if not (shared_data_path() / "vidur" / "data" / "processed_traces" / "splitwise_conv.csv").exists():
        pytest.skip("vidur's processed conversation trace is not in the shared data")
    rows = {r["case"]: r for r in bench_vidur.ours()}
    for case in ("x6/vidur-kv", "x7/vllm-kv"):
        r = rows[case]
        assert all(abs(r[f"ttft_{q}_vs_vidur"] - 1) <= 0.25 for q in ("mean", "p90")), r
        assert all(abs(r[f"{k}_{q}_vs_vidur"] - 1) <= 0.05 for k in ("tpot", "e2e") for q in ("mean", "p90")), r
    assert rows["x6/vidur-kv"]["kv_capacity_tokens"] == 53_248 and rows["x7/vllm-kv"]["kv_capacity_tokens"] == 40_560
