"""The iteration-level LLM instance follows vLLM's schedule (Ayo's vllm/core/scheduler.py)."""
from __future__ import annotations

import pytest

from orchestrator import load_app, simulate
from orchestrator.batching import ByKVSlots
from orchestrator.engines import Invocation, IterationLLMEngine, LinearLLMProfile
from orchestrator.primitives import Kind

PROF = LinearLLMProfile(prefill_base_ms=10, prefill_per_token_ms=1.0, prefill_attn_ms=0.0,
                        decode_base_ms=5, decode_per_seq_ms=0, decode_per_kctx_ms=0)


def _pre(key, text, kind=Kind.PREFILLING):
    return Invocation(key, kind, {"segments": (text,)}, {"kv_chain": key}, kv_key=key)


def _dec(key, n=3, fmt="text", items=1):
    return Invocation(f"{key}/d", Kind.DECODING, {}, {"fmt": fmt, "output_tokens": n, "n_items": items}, kv_key=key)


def test_waiting_prompts_share_one_prefill_pass():
    e = IterationLLMEngine(name="x", profile=PROF)
    e.enqueue([_pre("a", "w " * 4)])
    e.enqueue([_pre("b", "w " * 6)])
    it = e.start_iteration(0.0)
    assert it.kind == "prefill" and {k for k, _ in it.done} == {"a", "b"}
    assert it.duration_s == pytest.approx((10 + 10) / 1e3)          # one fixed cost for both


def test_token_budget_is_padded_and_splits_passes():
    e = IterationLLMEngine(name="x", profile=PROF, max_num_batched_tokens=10)
    e.enqueue([_pre("a", "w " * 4), _pre("b", "w " * 6), _pre("c", "w")])
    assert [k for k, _ in e.start_iteration(0.0).done] == ["a"]      # 2 x max(4, 6) = 12 > 10
    assert [k for k, _ in e.start_iteration(0.0).done] == ["b"]


def test_prefills_stall_decodes_and_full_prefill_jumps_the_queue():
    e = IterationLLMEngine(name="x", profile=PROF)
    e.enqueue([_pre("a", "w w")])
    e.start_iteration(0.0)
    e.enqueue([_dec("a", n=2)])
    e.enqueue([_pre("b", "w w w", Kind.PARTIAL_PREFILLING)])
    assert e.start_iteration(0.0).kind == "prefill"                  # prompts first: decode waits
    e.enqueue([_pre("c", "w")])
    e.enqueue([_pre("b", "x", Kind.FULL_PREFILLING)])
    it = e.start_iteration(0.0)
    assert [k for k, _ in it.done] == ["b", "c"] and it.done[0][1] == ("w w w", "x")
    assert e.start_iteration(0.0).kind == "decode"


def test_decode_finishes_at_its_last_step_and_streams_json_items():
    e = IterationLLMEngine(name="x", profile=PROF)
    e.enqueue([_pre("a", "q")])
    e.start_iteration(0.0)
    e.enqueue([_dec("a", n=12, fmt="json_list", items=3)])
    pieces, steps = [], 0
    while True:
        it = e.start_iteration(0.0)
        steps += 1
        pieces += [(steps, i) for _, i, _ in it.pieces]
        if it.done:
            break
    assert steps == 12 and [i for _, i in pieces] == [0, 1, 2] and pieces[0][0] < 12
    assert e.start_iteration(0.0) is None and not e.has_work()


def test_kv_slots_count_running_decodes():
    e = IterationLLMEngine(name="x", profile=PROF)
    e.enqueue([_pre("a", "w " * 5)])
    e.start_iteration(0.0)
    e.enqueue([_dec("a", n=4)])
    e.start_iteration(0.0)
    assert e.occupied_kv_tokens() == 6 and ByKVSlots().key(e, 0) == 6.0


def test_runtime_drives_iterations_and_keeps_outputs():
    app = load_app("advanced_rag")
    res = simulate(app.template(), [app.query] * 3, [0.0, 0.1, 0.2], app.build_engines(), scheme="teola")
    assert len(res) == 3 and all(r.latency_s > 0 for r in res)
    eng = app.build_engines()
    simulate(app.template(), [app.query], [0.0], eng, scheme="teola")
    assert sum(i.iterations["prefill"] for i in eng["llm"]) >= 1 and not any(i.has_work() for i in eng["llm"])
