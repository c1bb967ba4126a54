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
from collections.abc import AsyncIterator
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


#: the longest stream line (one server-sent event) read: a token chunk is ~200 bytes, so 1 MiB
#: bounds a broken or hostile server's line without refusing any real one
MAX_EVENT_BYTES = 2**20


async def bounded_lines(chunks: AsyncIterator[bytes], limit: int = MAX_EVENT_BYTES) -> AsyncIterator[str]:
    """The text lines of a byte stream (``\n`` or ``\r\n`` ends a line), each at most ``limit``
    bytes: a longer line is a ``malformed`` ServerError as soon as the buffer passes the limit,
    so memory stays bounded whatever the server sends."""
    buf = bytearray()
    async for piece in chunks:
        buf += piece
        while (i := buf.find(b"\n")) >= 0:
            if i > limit:
                break
            line = bytes(buf[:i]).rstrip(b"\r")
            del buf[:i + 1]
            yield line.decode("utf-8", "replace")
        if len(buf) > limit:
            raise ServerError(f"a stream line longer than {limit:,} bytes", "malformed")
    if buf:
        yield bytes(buf).rstrip(b"\r").decode("utf-8", "replace")


def _tokens(usage: Any) -> dict:
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise ValueError("'usage' is not an object")
    for k in ("prompt_tokens", "completion_tokens"):
        v = usage.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"'usage.{k}' is not a count")
    return usage


def event_parts(ev: dict, chat: bool) -> tuple[str | None, str | None, dict, bool]:
    """``(text, finish_reason, usage, has_choice)`` of one completion (or stream event) object,
    ``text`` from ``choices[0].text`` (``.message.content`` / ``.delta.content`` for chat); a
    ValueError naming the field when the object has the wrong shape (``choices: "x"``,
    ``text: 123``, ``usage: "lots"``, ``delta: "hi"``)."""
    usage = _tokens(ev.get("usage"))
    choices = ev.get("choices")
    if choices is None or choices == []:
        return None, None, usage, False
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise ValueError("'choices' is not a list of objects")
    ch = choices[0]
    if chat:
        inner = ch.get("delta", ch.get("message")) or {}
        if not isinstance(inner, dict):
            raise ValueError("'delta' / 'message' is not an object")
        text = inner.get("content")
    else:
        text = ch.get("text")
    if text is not None and not isinstance(text, str):
        raise ValueError("the text is not a string")
    finish = ch.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError("'finish_reason' is not a string")
    return text, finish, usage, True
