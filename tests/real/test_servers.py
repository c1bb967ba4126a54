"""OpenAI-compatible client and launcher against a real ``transformers serve`` process on CPU,
serving the tiny random Llama the tests build (nothing downloaded)."""
from __future__ import annotations

import socket

import pytest

from harness.servers.calls import ServerDeadError
from harness.servers.client import OpenAIClient
from harness.servers.engine import OpenAIEngine
from harness.servers.launcher import Fleet, ServerSpec, ServerStartError
from orchestrator.engines.base import Invocation
from orchestrator.primitives import Kind


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_declared_dead_after_retries():
    c = OpenAIClient(base_url=f"http://127.0.0.1:{free_port()}", model="m", retries=1, backoff_s=0.01, timeout_s=2)
    assert not c.health()
    with pytest.raises(ServerDeadError):
        c.complete("hi", max_tokens=2)
    assert c.dead and c.failures == 1
    with pytest.raises(ServerDeadError, match="dead"):   # refused at once from now on
        c.complete("hi", max_tokens=2)


def test_start_failure_reports_the_log(tmp_path):
    bad = ServerSpec(name="bad", model=str(tmp_path / "no-such-model"), port=free_port(), startup_timeout_s=60,
                     extra_args=("--no-such-flag",))
    with pytest.raises(ServerStartError, match="exited"):
        Fleet([bad], log_dir=tmp_path).start()


@pytest.fixture(scope="module")
def fleet(tiny_llama_dir, tmp_path_factory):
    spec = ServerSpec(name="llm0", model=str(tiny_llama_dir), port=free_port(), dtype="float32",
                      startup_timeout_s=180)
    with Fleet([spec], log_dir=tmp_path_factory.mktemp("server-logs")) as f:
        yield f


def test_completion_streamed_equals_unstreamed(fleet):
    c = fleet.client("llm0", timeout_s=60)
    assert c.health()
    whole = c.complete("the harbour is", max_tokens=8)
    deltas: list[str] = []
    streamed = c.complete("the harbour is", max_tokens=8, on_text=deltas.append)
    # random weights emit stray bytes: a streaming detokenizer holds back an unfinished UTF-8 tail
    assert streamed.rstrip("\ufffd") == whole.rstrip("\ufffd") and len(deltas) >= 2
    assert "".join(deltas) == streamed


def test_openai_engine_runs_split_prefill_and_decode(fleet):
    eng = OpenAIEngine(name="llm0", client=fleet.client("llm0", timeout_s=60), max_batch=4)
    segs = ("answer briefly", "where do ships dock?", "context: the north harbour")
    r = eng.submit([Invocation("a/pp", Kind.PARTIAL_PREFILLING, {"segments": segs[:2]}, {}, "a"),
                    Invocation("b/p", Kind.PREFILLING, {"segments": segs}, {}, "b")]).result(60)
    assert eng.holds_kv("a") and eng.client.requests == 1          # the prefix was sent ahead
    eng.submit([Invocation("a/fp", Kind.FULL_PREFILLING, {"segments": segs[2:]}, {}, "a")]).result(60)
    out = eng.submit([Invocation("a/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 6}, "a"),
                      Invocation("b/d", Kind.DECODING, {}, {"fmt": "text", "output_tokens": 6}, "b")]).result(120)
    a, b = (o.value for o in out.outputs)
    assert a == b and a                                          # same prompt either way, greedy
    assert not eng.holds_kv("a") and r.duration_s >= 0
    eng.close()


def test_engine_that_dies_mid_run_fails_its_requests_and_keeps_results(fleet):
    c = fleet.client("llm0", timeout_s=30, retries=1, backoff_s=0.05)
    done = [c.complete("first", max_tokens=3)]
    fleet.servers["llm0"].kill()
    assert fleet.dead() == ["llm0"]
    failed = 0
    for prompt in ("second", "third"):
        try:
            done.append(c.complete(prompt, max_tokens=3))
        except ServerDeadError:
            failed += 1
    assert len(done) == 1 and failed == 2 and c.dead
