"""What one call to an OpenAI-compatible server is, apart from the client that makes it
(:mod:`harness.servers.client`, whose docstring tells the protocol): the faults a call ends
with, its result (:class:`Generation`), the request fields that fix a backend's output length,
``Retry-After``, and the one event loop every client's blocking calls run on.
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Coroutine

from orchestrator.engines.base import EngineDeadError, EngineError

FAULT_KINDS = ("deadline", "timeout", "overloaded", "server", "http", "stream_error", "truncated", "malformed",
               "diverged", "dead")


class ServerError(EngineError):
    """A call failed; ``kind`` is one of :data:`FAULT_KINDS` (``harness.servers.client``'s docstring)."""

    def __init__(self, message: str, kind: str = "http") -> None:
        super().__init__(message)
        self.kind = kind


class ServerDeadError(ServerError, EngineDeadError):
    """The server cannot be reached any more (connection refused/reset after the retries); an
    orchestrator ``EngineDeadError``, so the wall-clock runtime retires the instance."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "dead")


@dataclass(frozen=True)
class Generation:
    """One completed call. Times in seconds from when the call was made (its first attempt):
    ``ttft_s`` (None unstreamed), ``latency_s`` (last token chunk, or the whole answer),
    ``itl_s`` the gaps between token chunks; token counts from the server's ``usage`` (None
    when it reports none; ``usage_reported`` False then)."""
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None
    ttft_s: float | None = None
    latency_s: float = 0.0
    itl_s: tuple[float, ...] = ()
    attempts: int = 1
    usage_reported: bool = True

    @property
    def tpot_s(self) -> float | None:
        """(latency - TTFT) / (completion tokens - 1); None unstreamed or for one token."""
        n = self.completion_tokens
        if self.ttft_s is None or n is None or n < 2:
            return None
        return (self.latency_s - self.ttft_s) / (n - 1)


Completion = Generation   # the name of the earlier, unstreamed result


def exact_output_body(backend: str | None, max_tokens: int) -> dict:
    """Request fields that make ``backend`` generate exactly ``max_tokens`` tokens (EOS ignored):
    vLLM and TensorRT-LLM take ``ignore_eos``; ``transformers serve`` rejects unknown fields but
    takes a ``generation_config`` JSON (``min_new_tokens = max_new_tokens``). ``None``: nothing is
    asked (a generic server); the caller records the tokens it actually got."""
    if backend is None:
        return {}
    if backend in ("vllm", "trtllm"):
        return {"ignore_eos": True}
    if backend == "torch":
        return {}                 # harness/servers/torchserve.py always generates max_tokens

    if backend == "transformers":
        n = int(max_tokens)
        return {"generation_config": json.dumps({"max_new_tokens": n, "min_new_tokens": n, "do_sample": False})}
    raise KeyError(f"unknown backend {backend!r}; known: transformers, vllm, trtllm, torch (or none)")


def served_model(base_url: str, *, timeout_s: float = 5.0, api_key: str | None = None) -> str:
    """The first model id ``GET /v1/models`` lists (the name to put in requests)."""
    import httpx
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    r = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s, headers=headers)
    r.raise_for_status()
    data = r.json().get("data") or []
    if not data:
        raise ServerError(f"{base_url}: /v1/models lists no model", "malformed")
    return str(data[0]["id"])


# ---- one event loop for every client's blocking calls ---------------------------------------
_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_THREAD: threading.Thread | None = None
_LOOP_LOCK = threading.Lock()


def client_loop() -> asyncio.AbstractEventLoop:
    """The shared event loop (a daemon thread, started on first use) that blocking calls run on."""
    global _LOOP, _LOOP_THREAD
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            _LOOP_THREAD = threading.Thread(target=_LOOP.run_forever, daemon=True, name="openai-client-loop")
            _LOOP_THREAD.start()
        return _LOOP


def run_sync(coro: Coroutine) -> Any:
    """Run ``coro`` on :func:`client_loop` and wait for it (not from inside that loop)."""
    loop = client_loop()
    if threading.current_thread() is _LOOP_THREAD:
        coro.close()
        raise RuntimeError("run_sync called from the client loop itself (use the async methods there)")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def is_client_loop(loop: Any) -> bool:
    """Whether ``loop`` is :func:`client_loop`'s (started)."""
    return loop is _LOOP and _LOOP is not None


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (seconds or an HTTP date); None if unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
