"""Simulated engines (KV continuation, profiles, profiler adapter) and the runtime."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator import load_app, simulate
from orchestrator.engines import (AYO_ENGINE, EngineError, Invocation, LinearLLMProfile, TableProfile,
                                  load_engine_spec, llm_instances)
from orchestrator.engines.sim import SimLLMEngine
from orchestrator.primitives import Kind

PROF = LinearLLMProfile(prefill_base_ms=10, prefill_per_token_ms=1.0, prefill_attn_ms=0.0,
                        decode_base_ms=5, decode_per_seq_ms=0, decode_per_kctx_ms=0)


def _inv(kind, key, segs=(), **params):
    return Invocation(f"q/{key}", kind, {"segments": segs}, {"kv_chain": "d", "fmt": "text", "output_tokens": 3, **params},
                      kv_key="q/d")


def test_full_prefill_continues_partial_kv_without_recomputing_prefix():
    e = SimLLMEngine(name="llm", step=PROF)
    r1 = e.submit([_inv(Kind.PARTIAL_PREFILLING, "pp", ("a b c d",))]).result()
    assert r1.duration_s == pytest.approx((10 + 4) / 1e3)
    r2 = e.submit([_inv(Kind.FULL_PREFILLING, "fp", ("e f",))]).result()
    assert r2.duration_s == pytest.approx((10 + 2) / 1e3)          # only the 2 new tokens
    assert r2.outputs[0].value == ("a b c d", "e f") and e.core.parked["q/d"] == (6, True)
    whole = SimLLMEngine(name="llm", step=PROF)
    whole.submit([_inv(Kind.PREFILLING, "p", ("a b c d", "e f"))])
    out_split = e.submit([Invocation("q/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 3}, "q/d")]).result()
    out_whole = whole.submit([Invocation("q/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 3}, "q/d")]).result()
    assert out_split.outputs[0].value == out_whole.outputs[0].value
    # the full prefill's logits gave the first token: 2 decode steps of 5 ms remain
    assert out_split.duration_s == pytest.approx(2 * 5 / 1e3) and e.occupied_kv_tokens() == 0


def test_full_prefill_or_decode_without_kv_is_an_error():
    e = SimLLMEngine(name="llm", step=PROF)
    with pytest.raises(EngineError):
        e.submit([_inv(Kind.FULL_PREFILLING, "fp", ("x",))])
    with pytest.raises(EngineError):
        e.submit([Invocation("q/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 3}, "q/d")])


def test_prefix_caching_skips_a_seen_first_segment():
    e = SimLLMEngine(name="llm", step=PROF, config=AYO_ENGINE.model_copy(update={"prefix_caching": True}))
    a = e.submit([Invocation("1", Kind.PREFILLING, {"segments": ("s s s", "x")}, {}, "k1")]).result().duration_s
    b = e.submit([Invocation("2", Kind.PREFILLING, {"segments": ("s s s", "y")}, {}, "k2")]).result().duration_s
    assert a == pytest.approx(0.014) and b == pytest.approx(0.011)


def test_json_decode_streams_pieces_before_it_finishes():
    e = SimLLMEngine(name="llm", step=PROF)
    e.submit([Invocation("p", Kind.PREFILLING, {"segments": ("q",)}, {}, "k")])
    out = e.submit([Invocation("d", Kind.DECODING, {}, {"fmt": "json_list", "output_tokens": 30, "n_items": 3},
                               "k")]).result().outputs[0]
    offs = [o for o, _ in out.pieces]
    assert len(offs) == 3 and offs == sorted(offs) and offs[0] < out.done_s


class _FakeStepModel:
    def step_s(self, prefill_tokens, attn2, decode_batch, decode_ctx, *, prefill_seqs=1):
        return 1e-3 * prefill_tokens + 1e-9 * attn2 + (0.01 + 1e-6 * decode_ctx if decode_batch else 0.0)


def test_a_full_prefill_pays_attention_over_its_cached_prefix():
    e = SimLLMEngine(name="x", step=_FakeStepModel())
    e.submit([_inv(Kind.PARTIAL_PREFILLING, "pp", (" ".join(["t"] * 900),))])
    r = e.submit([_inv(Kind.FULL_PREFILLING, "fp", (" ".join(["t"] * 100),))]).result()
    assert r.duration_s == pytest.approx(0.1 + 1e-9 * (1000**2 - 900**2))
    insts = llm_instances(name="x", step=_FakeStepModel(), n_instances=2)
    assert len(insts) == 2 and insts[0].max_batch_size() >= 1


def test_linear_profile_matches_its_formula():
    n, c = 100.0, 900.0
    want = (10 + 1.0 * n + 0.0) / 1e3
    assert PROF.step_s(100, (c + n) ** 2 - c ** 2, 0, 0.0) == pytest.approx(want)
    p = LinearLLMProfile(prefill_base_ms=0, prefill_per_token_ms=0, prefill_attn_ms=2.0, decode_base_ms=5,
                         decode_per_seq_ms=1, decode_per_kctx_ms=3)
    assert p.step_s(100, (c + n) ** 2 - c ** 2, 0, 0.0) == pytest.approx(2.0 * n * (c + n / 2) / 1e3 / 1e3)
    assert p.step_s(0, 0.0, 4, 2000.0) == pytest.approx((5 + 4 + 6) / 1e3)


def test_table_profile_interpolates_and_extrapolates():
    t = TableProfile((1, 2, 4), (10, 20), ((1.0, 2.0, 4.0), (2.0, 4.0, 8.0)))
    assert t.batch_s(3, 10) == pytest.approx(3e-3)
    assert t.batch_s(8, 15) == pytest.approx(12e-3)
    with pytest.raises(ValueError):
        TableProfile((2, 1), (10,), ((1.0, 2.0),))


def test_engine_specs_state_provenance_and_unknown_names_fail():
    for name in ["bge-large-en-v1.5", "bge-reranker-large", "pgvector", "web-search", "llama-2-7b_rtx3090"]:
        prov = load_engine_spec(name).provenance
        assert any(w in prov for w in ("ESTIMATE", "PAPER", "PUBLISHED", "MEASURED")), name
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


def test_profiler_step_model_through_the_one_adapter():
    from profiler.steps import step_model
    sm = step_model("llama-2-7b", "a6000")
    assert step_model("llama-2-7b", "a6000") is sm                        # cached
    assert 0 < sm.step_s(200, 200.0 ** 2, 0, 0.0) < sm.step_s(1000, 1000.0 ** 2, 0, 0.0)
    assert sm.step_s(800, 1000.0 ** 2 - 200 ** 2, 0, 0.0) < sm.step_s(1000, 1000.0 ** 2, 0, 0.0)
    assert sm.step_s(0, 0.0, 16, 16 * 1000.0) < 16 * sm.step_s(0, 0.0, 1, 1000.0)
