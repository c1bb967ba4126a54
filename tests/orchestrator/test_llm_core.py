"""The one engine core as Teola's LLM engine sees it (vLLM's schedule, Ayo's padded prefill)."""
from __future__ import annotations

import pytest

from orchestrator import load_app, simulate
from orchestrator.batching import ByKVSlots
from orchestrator.engines import AYO_ENGINE, Invocation, LinearLLMProfile, SimLLMEngine
from orchestrator.primitives import Kind
from orchestrator.runtime.events import Event, Simulator

PROF = LinearLLMProfile(prefill_base_ms=10, prefill_per_token_ms=1.0, prefill_attn_ms=0.0,
                        decode_base_ms=5, decode_per_seq_ms=0, decode_per_kctx_ms=0)


def _pre(key, text, kind=Kind.PREFILLING):
    return Invocation(key, kind, {"segments": (text,)}, {"kv_chain": key}, kv_key=key)


def _dec(key, n=3, fmt="text", items=1):
    return Invocation(f"{key}/d", Kind.DECODING, {}, {"fmt": fmt, "output_tokens": n, "n_items": items}, kv_key=key)


class _Rec:
    def __init__(self) -> None:
        self.done, self.pieces = {}, []

    def done_(self, key, value, now):
        self.done[key] = (now, value)

    def piece(self, key, index, value, now):
        self.pieces.append((key, index, now))

    def failed(self, key, reason, now):
        self.done[key] = (now, "FAILED")


class _At(Event):
    def __init__(self, time, engine, invs):
        super().__init__(time)
        self.engine, self.invs = engine, invs

    def handle(self, sim):
        return self.engine.enqueue(self.invs, self.time)


def _drive(engine, schedule):
    """Enqueue ``(time_s, [invocations])`` in order on a private loop; returns the recorder."""
    rec = _Rec()
    rec.done_ = rec.done_
    engine.attach(type("T", (), {"done": lambda s, *a: rec.done_(*a), "piece": lambda s, *a: rec.piece(*a),
                                 "failed": lambda s, *a: rec.failed(*a)})())
    loop = Simulator()
    engine.bind(loop)
    for t, invs in schedule:
        loop.push(_At(t, engine, invs))
    loop.run()
    return rec


def test_waiting_prompts_share_one_prefill_pass():
    e = SimLLMEngine(name="x", step=PROF)
    rec = _drive(e, [(0.0, [_pre("a", "w " * 4), _pre("b", "w " * 6)])])
    assert rec.done["a"][0] == rec.done["b"][0] == pytest.approx((10 + 10) / 1e3)   # one fixed cost for both
    assert e.iterations == {"prefill": 1, "decode": 0}


def test_token_budget_is_padded_and_splits_passes():
    e = SimLLMEngine(name="x", step=PROF, config=AYO_ENGINE.model_copy(update={"max_num_batched_tokens": 10}))
    rec = _drive(e, [(0.0, [_pre("a", "w " * 4), _pre("b", "w " * 6), _pre("c", "w")])])
    # 2 x max(4, 6) = 12 > 10: a alone; then b; then 2 x max(6, 1) = 12 > 10: c alone
    assert [round(rec.done[k][0], 6) for k in "abc"] == [0.014, 0.030, 0.041]


def test_prefills_stall_decodes_and_full_prefill_jumps_the_queue():
    e = SimLLMEngine(name="x", step=PROF, config=AYO_ENGINE.model_copy(update={"max_num_batched_tokens": 1}))
    rec = _drive(e, [(0.0, [_pre("a", "w w"), _pre("b", "w w w", Kind.PARTIAL_PREFILLING)]),
                     (0.016, [_dec("a", n=3), _pre("x", "w " * 30)]),
                     (0.030, [_pre("c", "w")]), (0.031, [_pre("b", "y", Kind.FULL_PREFILLING)])])
    # a budget of 1 token admits one prompt per pass (padded: 2 x max(n) > 1)
    assert rec.done["a"][0] == pytest.approx(0.012) and rec.done["b"][0] > 0.065
    assert rec.done["x"][0] == pytest.approx(0.025 + 0.040)
    # b's continued prompt was queued ahead of c; a's decode waited for every prompt
    assert rec.done["b"] == (pytest.approx(0.065 + 0.011), ("w w w", "y"))
    assert rec.done["c"][0] == pytest.approx(0.076 + 0.011)
    assert rec.done["a/d"][0] == pytest.approx(0.087 + 2 * 0.005)


def test_decode_after_a_prefill_takes_n_minus_one_steps_and_streams_json_items():
    e = SimLLMEngine(name="x", step=PROF)
    rec = _drive(e, [(0.0, [_pre("a", "q")]), (0.012, [_dec("a", n=12, fmt="json_list", items=3)])])
    assert rec.done["a/d"][0] == pytest.approx(0.012 + 11 * 0.005)     # the prefill gave token 1
    times = [t for _, _, t in rec.pieces]
    assert [i for _, i, _ in rec.pieces] == [0, 1, 2] and times == sorted(times) and times[0] < rec.done["a/d"][0]
    assert not e.has_work() and e.occupied_kv_tokens() == 0


def test_kv_slots_count_parked_and_running_sequences():
    e = SimLLMEngine(name="x", step=PROF)
    _drive(e, [(0.0, [_pre("a", "w " * 5)])])
    assert e.core.parked["a"] == (5, True) and e.occupied_kv_tokens() == 16   # one block of 16
    assert ByKVSlots().key(e, 0) == 16.0


def test_a_prompt_that_never_fits_fails_instead_of_waiting_forever():
    e = SimLLMEngine(name="x", step=PROF, kv_capacity_tokens=64)
    rec = _drive(e, [(0.0, [_pre("a", "w " * 100), _pre("b", "w")])])
    assert rec.done["a"][1] == "FAILED" and rec.done["b"][1] == ("w",)


def test_runtime_drives_the_core_and_keeps_outputs():
    app = load_app("advanced_rag")
    res = simulate(app.template(), [app.query] * 3, [0.0, 0.1, 0.2], app.build_engines(), scheme="teola")
    assert len(res) == 3 and all(r.latency_s > 0 for r in res)
    eng = app.build_engines()
    simulate(app.template(), [app.query], [0.0], eng, scheme="teola")
    assert sum(i.iterations["prefill"] for i in eng["llm"]) >= 1 and not any(i.has_work() for i in eng["llm"])
