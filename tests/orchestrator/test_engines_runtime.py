"""Simulated engines (KV continuation, profiles, profiler adapter) and the runtime."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import make_graph
from orchestrator import Component, load_app, simulate
from orchestrator.engines import (EngineError, Invocation, LinearLLMProfile, StepModelProfile, TableProfile,
                                  load_engine_spec, llm_instances)
from orchestrator.engines.sim import SimLLMEngine
from orchestrator.primitives import Kind
from orchestrator.runtime import make_payload

PROF = LinearLLMProfile(prefill_base_ms=10, prefill_per_token_ms=1.0, prefill_attn_ms=0.0,
                        decode_base_ms=5, decode_per_seq_ms=0, decode_per_kctx_ms=0)


def _inv(kind, key, segs=(), **params):
    return Invocation(f"q/{key}", kind, {"segments": segs}, {"kv_chain": "d", "fmt": "text", "output_tokens": 3, **params},
                      kv_key="q/d")


def test_full_prefill_continues_partial_kv_without_recomputing_prefix():
    e = SimLLMEngine(name="llm", profile=PROF)
    r1 = e.submit([_inv(Kind.PARTIAL_PREFILLING, "pp", ("a b c d",))]).result()
    assert r1.duration_s == pytest.approx((10 + 4) / 1e3)
    r2 = e.submit([_inv(Kind.FULL_PREFILLING, "fp", ("e f",))]).result()
    assert r2.duration_s == pytest.approx((10 + 2) / 1e3)          # only the 2 new tokens
    assert r2.outputs[0].value == ("a b c d", "e f") and e.occupied_kv_tokens() == 6
    whole = SimLLMEngine(name="llm", profile=PROF)
    whole.submit([_inv(Kind.PREFILLING, "p", ("a b c d", "e f"))])
    out_split = e.submit([Invocation("q/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 3}, "q/d")]).result()
    out_whole = whole.submit([Invocation("q/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 3}, "q/d")]).result()
    assert out_split.outputs[0].value == out_whole.outputs[0].value
    assert out_split.duration_s == pytest.approx(3 * 5 / 1e3) and e.occupied_kv_tokens() == 0


def test_full_prefill_or_decode_without_kv_is_an_error():
    e = SimLLMEngine(name="llm", profile=PROF)
    with pytest.raises(EngineError):
        e.submit([_inv(Kind.FULL_PREFILLING, "fp", ("x",))])
    with pytest.raises(EngineError):
        e.submit([Invocation("q/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 3}, "q/d")])


def test_prefix_caching_skips_a_seen_first_segment():
    e = SimLLMEngine(name="llm", profile=PROF, prefix_caching=True)
    a = e.submit([Invocation("1", Kind.PREFILLING, {"segments": ("s s s", "x")}, {}, "k1")]).result().duration_s
    b = e.submit([Invocation("2", Kind.PREFILLING, {"segments": ("s s s", "y")}, {}, "k2")]).result().duration_s
    assert a == pytest.approx(0.014) and b == pytest.approx(0.011)


def test_json_decode_streams_pieces_before_it_finishes():
    e = SimLLMEngine(name="llm", profile=PROF)
    e.submit([Invocation("p", Kind.PREFILLING, {"segments": ("q",)}, {}, "k")])
    out = e.submit([Invocation("d", Kind.DECODING, {}, {"fmt": "json_list", "output_tokens": 30, "n_items": 3},
                               "k")]).result().outputs[0]
    offs = [o for o, _ in out.pieces]
    assert len(offs) == 3 and offs == sorted(offs) and offs[0] < out.done_s


class _FakeStepModel:
    def step_s(self, prefill_tokens, attn2, decode_batch, decode_ctx, *, prefill_seqs=1):
        return 1e-3 * prefill_tokens + 1e-9 * attn2 + (0.01 + 1e-6 * decode_ctx if decode_batch else 0.0)


def test_step_model_adapter_matches_profiler_contract():
    p = StepModelProfile(_FakeStepModel())
    assert p.prefill_s([100], [0]) == pytest.approx(0.1 + 1e-9 * 100 * 100)
    assert p.prefill_s([100], [900]) == pytest.approx(0.1 + 1e-9 * (1000**2 - 900**2))
    assert p.decode_step_s(4, 1000) == pytest.approx(0.011)     # total context passed through
    e = llm_instances(name="x", profile=p, n_instances=2)
    assert len(e) == 2 and e[0].max_batch_size() >= 1


def test_table_profile_interpolates_and_extrapolates():
    t = TableProfile((1, 2, 4), (10, 20), ((1.0, 2.0, 4.0), (2.0, 4.0, 8.0)))
    assert t.batch_s(3, 10) == pytest.approx(3e-3)
    assert t.batch_s(8, 15) == pytest.approx(12e-3)
    with pytest.raises(ValueError):
        TableProfile((2, 1), (10,), ((1.0, 2.0),))


def test_engine_specs_state_provenance_and_unknown_names_fail():
    for name in ["bge-large-en-v1.5", "bge-reranker-large", "pgvector", "web-search", "llama-2-7b_rtx3090"]:
        assert "ESTIMATE" in load_engine_spec(name).provenance or "PAPER" in load_engine_spec(name).provenance
    with pytest.raises(KeyError, match="known"):
        load_engine_spec("gpt-5")


def test_runtime_balances_llm_instances_and_reports_latency():
    app = load_app("naive_rag")
    eng = app.build_engines()
    rng = np.random.default_rng(0)
    cfgs = app.query_configs(6, rng)
    res = simulate(app.template(), cfgs, [0.0] * 6, eng, scheme="teola", seed=0)
    assert all(r.latency_s > 0 for r in res) and [r.qid for r in res] == list(range(6))
    again = simulate(app.template(), cfgs, [0.0] * 6, app.build_engines(), scheme="teola", seed=0)
    assert [r.latency_s for r in again] == [r.latency_s for r in res]     # deterministic under a seed


def test_runtime_rejects_missing_engines_and_mismatched_inputs():
    app = load_app("search_gen")
    eng = app.build_engines()
    del eng["websearch"]
    with pytest.raises(KeyError, match="websearch"):
        simulate(app.template(), [app.query], [0.0], eng)
    with pytest.raises(ValueError):
        simulate(app.template(), [app.query], [0.0, 1.0], app.build_engines())


def test_teola_beats_the_chain_on_one_naive_rag_query():
    app = load_app("naive_rag")
    lat = {s: simulate(app.template(), [app.query], [0.0], app.build_engines(), scheme=s)[0].latency_s
           for s in ["llamadist-to", "teola"]}
    assert lat["teola"] < lat["llamadist-to"]


def test_real_profiler_adapter_when_available():
    pytest.importorskip("profiler.analytic")
    from orchestrator.engines import profiler_llm_profile
    p = profiler_llm_profile("llama-2-7b", "a6000")
    assert 0 < p.prefill_s([200], [0]) < p.prefill_s([1000], [0])
    assert p.prefill_s([800], [200]) < p.prefill_s([1000], [0])          # never recomputes the prefix
    assert p.decode_step_s(16, 16 * 1000) < 16 * p.decode_step_s(1, 1000)
