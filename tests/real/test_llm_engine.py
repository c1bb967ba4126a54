"""The torch LLM engine: partial + full prefill continues the KV cache exactly, batched decoding
equals one-by-one decoding, JSON lists stream item by item into the incremental parser."""
from __future__ import annotations

import json

import pytest

from orchestrator.engines.base import EngineError, Invocation
from orchestrator.primitives import Kind

SEGS = ("answer from the context", "where do the ships dock?", "context: ships dock at the north harbour",
        "and the ferry leaves at noon")


def _run(eng, *invs, **kw):
    return eng.submit(list(invs), **kw).result(timeout=60)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_partial_plus_full_prefill_equals_single_prefill(llm, k):
    import torch
    _run(llm, Invocation("s/p", Kind.PREFILLING, {"segments": SEGS}, {}, f"single{k}"))
    _run(llm, Invocation("t/pp", Kind.PARTIAL_PREFILLING, {"segments": SEGS[:k]}, {}, f"split{k}"))
    occupied = llm.occupied_kv_tokens()
    _run(llm, Invocation("t/fp", Kind.FULL_PREFILLING, {"segments": SEGS[k:]}, {}, f"split{k}"))
    a, b = llm._kv.pop(f"single{k}"), llm._kv.pop(f"split{k}")
    assert a.n_tokens == b.n_tokens
    assert llm.occupied_kv_tokens() < occupied + a.n_tokens   # the prefix was not recomputed/duplicated
    torch.testing.assert_close(a.last_logits, b.last_logits, atol=1e-5, rtol=1e-5)
    # the full prefill ran only the new tokens: its cache grew from the partial one
    assert b.cache.get_seq_length() == a.n_tokens


def test_full_prefill_logits_match_single_forward_over_every_position(llm):
    import torch
    ids = llm.prompt_ids(SEGS, first=True)
    _, single = llm.forward(ids)
    cache, first = llm.forward(ids[:7])
    _, rest = llm.forward(ids[7:], cache)
    torch.testing.assert_close(torch.cat([first, rest]), single, atol=1e-5, rtol=1e-5)


def test_full_prefill_without_cache_is_an_engine_error(llm):
    with pytest.raises(EngineError, match="no KV cache"):
        _run(llm, Invocation("x/fp", Kind.FULL_PREFILLING, {"segments": ("more",)}, {}, "nothing-here"))


def test_batched_decode_equals_single_decode_and_frees_the_cache(llm):
    params = [{"fmt": "text", "output_tokens": 12},
              {"fmt": "json_list", "output_tokens": 18, "n_items": 3},
              {"fmt": "yesno", "output_tokens": 6}]
    prompts = [SEGS, SEGS[:2], ("is it raining?",)]

    def prefill(tag):
        for i, segs in enumerate(prompts):
            _run(llm, Invocation(f"{tag}{i}/p", Kind.PREFILLING, {"segments": segs}, {}, f"{tag}{i}"))

    prefill("b")
    batched = _run(llm, *[Invocation(f"b{i}/d", Kind.DECODING, {}, p, f"b{i}") for i, p in enumerate(params)])
    assert not any(llm.holds_kv(f"b{i}") for i in range(3))
    prefill("o")
    single = [_run(llm, Invocation(f"o{i}/d", Kind.DECODING, {}, p, f"o{i}")).outputs[0]
              for i, p in enumerate(params)]
    assert [o.value for o in batched.outputs] == [o.value for o in single]
    items = json.loads(batched.outputs[1].value)
    assert len(items) == 3 and all(isinstance(x, str) and x for x in items)
    assert batched.outputs[2].value.split()[0][:3] in ("yes", "no")


def test_json_list_streams_each_item_before_the_decode_ends(llm):
    _run(llm, Invocation("j/p", Kind.PREFILLING, {"segments": SEGS}, {}, "j"))
    seen = []
    out = _run(llm, Invocation("j/d", Kind.DECODING, {}, {"fmt": "json_list", "output_tokens": 30, "n_items": 3}, "j"),
               on_piece=lambda key, i, v: seen.append((key, i, v))).outputs[0]
    items = json.loads(out.value)
    assert [(k, i, v) for k, i, v in seen] == [("j/d", i, [x]) for i, x in enumerate(items)]
    offsets = [off for off, _ in out.pieces]
    assert offsets == sorted(offsets) and offsets[0] < out.done_s
    assert [v for _, v in out.pieces] == [[x] for x in items]


def test_unknown_kind_is_refused(llm):
    with pytest.raises(EngineError, match="cannot run"):
        llm.submit([Invocation("e", Kind.EMBEDDING, {"texts": ["a"]})])
