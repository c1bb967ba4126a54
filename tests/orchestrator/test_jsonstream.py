"""The incremental JSON parser on split and streamed input."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.jsonstream import IncrementalJsonList, JsonStreamError, stream_pieces


def test_emits_each_element_when_complete():
    p = IncrementalJsonList()
    assert p.feed('["a b", "c') == ["a b"]
    assert p.feed('"') == []
    assert p.feed("]") == ["c"]
    assert p.done


def test_strings_with_brackets_commas_escapes_and_nested_values():
    text = json.dumps(['x, ]"[y', {"k": [1, 2]}, [3, "]"], "back\\slash", 7])
    p = IncrementalJsonList()
    out = []
    for ch in text:
        out += p.feed(ch)
    assert out == json.loads(text)


def test_bad_streams_raise():
    with pytest.raises(JsonStreamError):
        IncrementalJsonList().feed('{"a": 1}')
    with pytest.raises(JsonStreamError):
        IncrementalJsonList().feed('[1,,2]')
    with pytest.raises(JsonStreamError):
        IncrementalJsonList().feed('[1] x')
    with pytest.raises(JsonStreamError):
        stream_pieces('[1, 2', 3)
    assert IncrementalJsonList().feed("[ ]") == []


@settings(max_examples=150, deadline=None)
@given(items=st.lists(st.one_of(st.text(max_size=12), st.integers(), st.lists(st.text(max_size=4), max_size=3)),
                      max_size=6),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=20))
def test_any_split_gives_json_loads_result(items, cuts):
    text = json.dumps(items)
    bounds = sorted({0, len(text), *[c % (len(text) + 1) for c in cuts]})
    p = IncrementalJsonList()
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        out += p.feed(text[lo:hi])
    assert out == items and p.done


def test_stream_pieces_reports_steps_in_order():
    text = json.dumps(["one two", "three", "four five six"])
    pieces = stream_pieces(text, 10)
    assert [v for _, v in pieces] == json.loads(text)
    steps = [s for s, _ in pieces]
    assert steps == sorted(steps) and steps[-1] == 10 and steps[0] < 10
