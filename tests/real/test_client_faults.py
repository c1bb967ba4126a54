"""The servers' client against a scripted fake server (tests/real/fake_openai.py), one test per
fault of issue 14 item 6 and issue 16 item 2. Each reproduction uses only the client's blocking
API (``complete`` / ``completion``), which the earlier client had too: against it, each of these
tests fails (it returned partial or empty text as success, hung on keep-alives, raised raw
JSON/KeyError errors, re-sent timed-out generations, delivered retried text twice and gave up on
429)."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from harness.servers.client import OpenAIClient
from harness.servers.calls import ServerError
from tests.real.fake_openai import FakeServer, Step, chunk, stream_events

PIECES = ["alpha ", "beta ", "gamma ", "delta"]


@pytest.fixture
def fake():
    s = FakeServer()
    yield s
    s.close()


def _client(fake, **kw) -> OpenAIClient:
    kw = {"timeout_s": 5.0, "retries": 1, "backoff_s": 0.01, **kw}
    return OpenAIClient(base_url=fake.url, model="fake", **kw)


def test_error_event_in_the_stream_is_a_counted_failure_not_empty_text(fake):
    fake.script(Step(events=[{"error": "CUDA out of memory"}]))
    c = _client(fake)
    with pytest.raises(ServerError, match="out of memory") as e:
        c.complete("p", max_tokens=4, on_text=lambda d: None)
    assert getattr(e.value, "kind", None) == "stream_error" and c.failures == 1


def test_stream_without_done_is_truncated_not_success(fake):
    fake.script(Step(events=[chunk(0, "alpha "), chunk(1, "beta ")], done=False))
    c = _client(fake)
    got: list[str] = []
    with pytest.raises(ServerError, match="without") as e:
        c.complete("p", max_tokens=4, on_text=got.append)
    assert getattr(e.value, "kind", None) == "truncated" and c.failures == 1


def test_transformers_streams_end_with_a_finish_reason_instead_of_done(fake):
    fake.script(Step(events=stream_events(PIECES), done=False),           # complete: finish_reason, usage
                Step(events=[chunk(0, "alpha ")], done=False))             # cut short, cleanly
    c = _client(fake, backend="transformers")
    assert c.complete("p", max_tokens=4, on_text=lambda d: None) == "".join(PIECES)
    with pytest.raises(ServerError, match="finish_reason"):
        c.complete("p", max_tokens=4, on_text=lambda d: None)


def test_keep_alives_do_not_outlive_the_overall_deadline(fake):
    fake.script(Step(events=[chunk(0, "alpha ")], ping_s=0.3))             # then pings, never ends
    c = _client(fake, timeout_s=1.0, retries=2)
    t = time.monotonic()
    with pytest.raises(ServerError, match="deadline") as e:
        c.complete("p", max_tokens=4, on_text=lambda d: None)
    assert time.monotonic() - t < 2.5 and getattr(e.value, "kind", None) == "deadline"
    assert len(fake.requests) == 1 and c.failures == 1


@pytest.mark.parametrize("body", ["{not json", json.dumps({"id": "x", "object": "text_completion"}),
                                  json.dumps({"choices": []})])
def test_malformed_200_is_a_server_error(fake, body):
    fake.script(Step(kind="json", body=body))
    c = _client(fake)
    with pytest.raises(ServerError, match="malformed") as e:
        c.completion("p", max_tokens=4)
    assert getattr(e.value, "kind", None) == "malformed" and c.failures == 1


def test_a_stream_retried_after_a_cut_never_delivers_text_twice(fake):
    fake.script(Step(events=stream_events(PIECES), cut_after=2),           # "alpha beta " then the socket dies
                Step(events=stream_events(PIECES)))
    c = _client(fake)
    got: list[str] = []
    text = c.complete("p", max_tokens=4, on_text=got.append)
    assert text == "".join(PIECES) and "".join(got) == text and len(fake.requests) == 2


def test_a_retried_stream_that_diverges_fails(fake):
    fake.script(Step(events=stream_events(PIECES), cut_after=2), Step(events=stream_events(["other ", "text"])))
    c = _client(fake)
    got: list[str] = []
    with pytest.raises(ServerError, match="diverged"):
        c.complete("p", max_tokens=4, on_text=got.append)
    assert "".join(got) == "alpha beta "


def test_a_generation_that_timed_out_is_not_sent_again(fake):
    fake.script(Step(events=stream_events(PIECES), delay_s=1.5), Step(events=stream_events(PIECES)))
    c = _client(fake, timeout_s=5.0, read_timeout_s=0.4, retries=2)
    with pytest.raises(ServerError, match="not re-sent") as e:
        c.completion("p", max_tokens=4)
    time.sleep(0.2)
    assert getattr(e.value, "kind", None) == "timeout" and len(fake.requests) == 1


def test_429_waits_for_retry_after_then_succeeds(fake):
    fake.script(Step(kind="json", status=429, body='{"error": "busy"}', headers={"Retry-After": "0.4"}),
                Step(events=stream_events(PIECES)))
    c = _client(fake, backoff_s=0.0)
    assert c.complete("p", max_tokens=4, on_text=lambda d: None) == "".join(PIECES)
    assert len(fake.requests) == 2 and fake.times[1] - fake.times[0] >= 0.35


def test_streamed_timing_api_key_and_chat(fake):
    fake.script(Step(events=stream_events(PIECES, prompt_tokens=7)),
                Step(events=[{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]}
                             for t in ("x", "y")] + [{"choices": [], "usage": {"prompt_tokens": 3,
                                                                               "completion_tokens": 2}}]))
    g = _client(fake, api_key="sk-test").generate("p", max_tokens=4)
    assert g.text == "".join(PIECES) and (g.prompt_tokens, g.completion_tokens) == (7, 4)
    assert 0 < g.ttft_s <= g.latency_s and len(g.itl_s) == 3
    assert g.tpot_s == pytest.approx((g.latency_s - g.ttft_s) / 3)
    req = fake.requests[-1]
    assert req["headers"]["authorization"] == "Bearer sk-test" and req["body"]["stream_options"] == {"include_usage": True}
    chat = _client(fake, chat=True).generate("hello", max_tokens=2)
    assert chat.text == "xy" and fake.requests[-1]["path"] == "/v1/chat/completions"
    assert fake.requests[-1]["body"]["messages"] == [{"role": "user", "content": "hello"}]


def test_replay_live_counts_every_failed_call(fake):
    """A malformed answer used to escape the call's bookkeeping: the call vanished from `calls`."""
    from harness.cluster import Workload
    from harness.live import LiveSettings, replay_live
    from harness.servers.deploy import Endpoint
    from tests.real.test_live_replay import A, B, TOKENS, _deployments, _problems
    ok = Step(events=stream_events(["a", "b"]))
    probes = [Step(kind="json", body=json.dumps({"choices": [{"text": "x"}], "usage": {"prompt_tokens": n}}))
              for n in (16, 64)]
    fake.script(*probes, *probes, ok, ok, ok, Step(kind="json", body="{not json"))   # A, B, B; then request 2's A
    eps = {i: Endpoint(_client(fake, retries=0)) for i in (A, B)}
    wl = Workload(np.array([0.0, 1.0]), np.zeros(2, dtype=np.int64), np.ones(2), np.ones(2), np.full(2, 0.5))
    res = replay_live(_problems(), _deployments(), TOKENS, wl, endpoints=eps, price_per_gb_s=0.0,
                      settings=LiveSettings(max_output_tokens=2))
    s = res.summary
    assert s["completed"] == 1 and s["failed"] == 1 and s["calls"] == 4 and s["calls_failed"] == 1
    assert s["call_faults"] == "malformed:1"


WRONG_SHAPES = [  # issue 28 item 8: valid JSON of the wrong shape escaped as raw exceptions, uncounted
    ({"choices": ["x"]}, False), ({"choices": {"0": {"text": "a"}}}, False), ({"choices": "x"}, False),
    ({"choices": [{"text": 123}]}, False), ({"choices": [{"text": "a"}], "usage": "lots"}, False),
    ({"choices": [{"text": "a"}], "usage": {"completion_tokens": "many"}}, False),
    ({"choices": [{"text": "a", "finish_reason": 7}]}, False),
    ({"choices": [{"delta": "hi"}]}, True), ({"choices": [{"delta": {"content": ["hi"]}}]}, True),
]


@pytest.mark.parametrize("event, chat", WRONG_SHAPES, ids=[json.dumps(e)[:40] for e, _ in WRONG_SHAPES])
def test_a_stream_event_of_the_wrong_shape_is_a_counted_malformed_fault(fake, event, chat):
    fake.script(Step(events=[chunk(0, "alpha "), event]))
    c = _client(fake, chat=chat)
    with pytest.raises(ServerError, match="malformed") as e:
        c.complete("p", max_tokens=4, on_text=lambda d: None)
    assert getattr(e.value, "kind", None) == "malformed" and c.failures == 1
    assert c.faults["malformed"] == 1


@pytest.mark.parametrize("event, chat", WRONG_SHAPES[:5], ids=[json.dumps(e)[:40] for e, _ in WRONG_SHAPES[:5]])
def test_a_plain_answer_of_the_wrong_shape_is_a_counted_malformed_fault(fake, event, chat):
    fake.script(Step(kind="json", body=json.dumps(event)))
    c = _client(fake, chat=chat)
    with pytest.raises(ServerError, match="malformed") as e:
        c.completion("p", max_tokens=4)
    assert getattr(e.value, "kind", None) == "malformed" and c.failures == 1


def test_an_event_line_over_the_bound_is_malformed_not_read_whole(fake):
    """A 3 MB event line (the issue's was 300 MB and took 1.24 GB) stops at the 1 MiB bound."""
    from harness.servers.calls import MAX_EVENT_BYTES
    fake.script(Step(events=[chunk(0, "x" * (3 * MAX_EVENT_BYTES))]))
    c = _client(fake)
    with pytest.raises(ServerError, match="longer than") as e:
        c.complete("p", max_tokens=4, on_text=lambda d: None)
    assert getattr(e.value, "kind", None) == "malformed" and c.failures == 1
