"""An OpenAI-compatible HTTP client (``/v1/completions`` or ``/v1/chat/completions``, streamed or
not; ``/health``) with an overall deadline per call and careful retries. A call's faults
(:data:`~harness.servers.calls.FAULT_KINDS`), its result (``Generation``) and the shared event loop
are :mod:`harness.servers.calls`; :class:`~harness.servers.engine.OpenAIEngine` makes one client's
server an orchestrator engine.

Works with any server speaking the OpenAI API: ``transformers serve``, ``vllm serve``,
``trtllm-serve``. One implementation, asynchronous (:meth:`OpenAIClient.agenerate`, httpx's
``AsyncClient`` with a connection pool sized to the caller's concurrency); the blocking methods
run it on one shared event-loop thread (:func:`run_sync`).

Streamed calls are measured as ``vllm bench serve`` measures them
(``vllm/benchmarks/lib/endpoint_request_func.py``): ``stream_options.include_usage`` asks for
the token counts; TTFT is the time from sending to the first chunk carrying a token, the
inter-token gaps are the times between token chunks, ``latency`` ends at the last token chunk
and ``tpot = (latency - ttft) / (completion_tokens - 1)``.

Every call either returns a complete :class:`Generation` or raises a :class:`ServerError` whose
``kind`` says why (counted in ``OpenAIClient.faults``):

- ``deadline``: the whole call (attempts, waits, keep-alive pings included) ran past its
  deadline (``timeout_s``);
- ``timeout``: no byte for ``read_timeout_s`` once the request was sent. Never re-sent: the
  server may still be generating, and a second copy adds load exactly when it is overloaded;
- ``overloaded``: 429 beyond the retries or the deadline (``Retry-After`` is honoured, seconds
  or an HTTP date); ``server``: 5xx after the retries; ``http``: any other 4xx (no retry);
- ``stream_error``: an ``{"error": ...}`` event in the stream; ``truncated``: a stream that ends
  cleanly without ``[DONE]`` (servers that never send it, ``transformers serve``, must end with
  a ``finish_reason`` instead: ``done_marker=False``); ``malformed``: a 200 whose body (or an
  event) is not JSON, has no ``choices`` or has the wrong shape (``calls.event_parts``), or a
  stream line over ``calls.MAX_EVENT_BYTES``; ``diverged``: a retried stream that does not repeat
  what the first attempt already delivered;
- ``dead`` (:class:`~harness.servers.calls.ServerDeadError`): the server could not be reached after the retries
  (connection refused or reset before a response); later calls fail at once.

Retries happen only where nothing was generated for the caller or nothing is lost: connection
failures before a response, 429 and 5xx answers, and a connection cut mid-stream. A stream
retried after a cut is deduplicated: the text already handed to ``on_text`` is checked against
the new stream and not delivered again, so ``on_text`` sees every piece exactly once (greedy
decoding makes the repeat identical; anything else is ``diverged``).
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.servers.calls import (Generation, ServerDeadError, ServerError, bounded_lines, event_parts, is_client_loop,
                                   retry_after_s, run_sync)


class _Cut(Exception):
    """The connection broke mid-stream (retried with deduplication)."""


@dataclass
class _Attempt:
    """State of one call across its attempts (what was delivered survives a retry)."""
    t0: float
    delivered: str = ""
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    last_s: float | None = None
    attempts: int = 0


class OpenAIClient:
    """One server. ``timeout_s``: the overall deadline of one call, every attempt and wait
    included; ``read_timeout_s``: silence tolerated once a request is sent (default
    ``timeout_s``); ``retries``: extra attempts (module docstring: which failures), waiting
    ``backoff_s * 2**attempt`` (or ``Retry-After``); ``chat``: use ``/v1/chat/completions``;
    ``api_key``: sent as a bearer token; ``backend``: ``transformers`` implies
    ``done_marker=False`` (its streams end with a ``finish_reason``, no ``[DONE]``);
    ``max_connections``: the connection pool (size it to the concurrency you drive)."""

    def __init__(self, *, base_url: str, model: str, timeout_s: float = 60.0, retries: int = 2,
                 backoff_s: float = 0.2, name: str | None = None, read_timeout_s: float | None = None,
                 chat: bool = False, api_key: str | None = None, backend: str | None = None,
                 done_marker: bool | None = None, max_connections: int = 64) -> None:
        import httpx
        self._httpx = httpx
        self.base_url, self.model = base_url.rstrip("/"), model
        self.name = name or self.base_url
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.read_timeout_s = read_timeout_s if read_timeout_s is not None else timeout_s
        self.chat, self.api_key, self.backend = chat, api_key, backend
        self.done_marker = (backend != "transformers") if done_marker is None else done_marker
        self.max_connections = max_connections
        self._aclient: Any = None
        self._aclient_loop: Any = None
        self.dead = False
        self.requests = 0
        self.failures = 0
        self.faults: Counter = Counter()

    # ---- plumbing ----
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _http(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is not loop:
            httpx = self._httpx
            limits = httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections)
            self._aclient = httpx.AsyncClient(base_url=self.base_url, limits=limits, headers=self._headers(),
                                              timeout=httpx.Timeout(self.read_timeout_s))
            self._aclient_loop = loop
        return self._aclient

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None

    def close(self) -> None:
        if self._aclient is not None and is_client_loop(self._aclient_loop):
            run_sync(self.aclose())
        self._aclient = None

    def health(self, timeout_s: float = 2.0) -> bool:
        """True when ``GET /health`` (or ``/v1/models``) answers 200."""
        for path in ("/health", "/v1/models"):
            try:
                if self._httpx.get(self.base_url + path, timeout=timeout_s, headers=self._headers()).status_code == 200:
                    return True
            except self._httpx.HTTPError:
                return False
        return False

    def _fail(self, exc: ServerError) -> ServerError:
        self.failures += 1
        self.faults[exc.kind] += 1
        if exc.kind == "dead":
            self.dead = True
        return exc

    def _body(self, prompt: str, max_tokens: int, extra: dict | None, stream: bool) -> tuple[str, dict]:
        if self.chat:
            path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
        else:
            path, body = "/v1/completions", {"prompt": prompt}
        body = {"model": self.model, **body, "max_tokens": int(max_tokens), "temperature": 0.0, **(extra or {})}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return path, body

    # ---- the call ----
    async def agenerate(self, prompt: str, *, max_tokens: int, extra: dict | None = None, stream: bool = True,
                        on_text: Callable[[str], None] | None = None, deadline_s: float | None = None) -> Generation:
        """Greedy completion of ``prompt`` (module docstring: timing, retries, faults). Must run
        on one event loop per client (the loop of its first call). ``on_text`` gets each text
        piece once, in order, as it arrives (streamed calls)."""
        if self.dead:
            raise self._fail(ServerDeadError(f"server {self.name} is dead"))
        self.requests += 1
        budget = self.timeout_s if deadline_s is None else deadline_s
        st = _Attempt(time.perf_counter())
        try:
            async with asyncio.timeout(budget):
                return await self._attempts(st, prompt, max_tokens, extra, stream, on_text)
        except TimeoutError:
            raise self._fail(ServerError(f"server {self.name}: no complete answer within the {budget:g} s deadline "
                                         f"({st.attempts} attempt(s))", "deadline")) from None
        except ServerError as exc:
            raise self._fail(exc) from None

    async def _attempts(self, st: _Attempt, prompt: str, max_tokens: int, extra: dict | None, stream: bool,
                        on_text: Callable[[str], None] | None) -> Generation:
        httpx = self._httpx
        path, body = self._body(prompt, max_tokens, extra, stream)
        for attempt in range(self.retries + 1):
            st.attempts = attempt + 1
            last = attempt == self.retries
            wait = self.backoff_s * 2 ** attempt
            try:
                if stream:
                    return await self._stream(st, path, body, on_text)
                return await self._plain(st, path, body)
            except httpx.HTTPStatusError as exc:
                code, text = exc.response.status_code, exc.response.text[:200]
                if code == 429:
                    if last:
                        raise ServerError(f"server {self.name}: HTTP 429 (overloaded) after {st.attempts} attempts",
                                          "overloaded") from None
                    wait = retry_after_s(exc.response.headers.get("retry-after")) or wait
                elif code >= 500:
                    if last:
                        raise ServerError(f"server {self.name}: HTTP {code}: {text}", "server") from None
                else:
                    raise ServerError(f"server {self.name}: HTTP {code}: {text}", "http") from None
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                if last:
                    raise ServerDeadError(f"server {self.name} unreachable: {type(exc).__name__}: {exc}") from None
            except httpx.ReadTimeout:
                raise ServerError(f"server {self.name}: nothing received for {self.read_timeout_s:g} s "
                                  f"(not re-sent)", "timeout") from None
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, _Cut) as exc:
                if last:
                    raise ServerDeadError(f"server {self.name}: connection lost ({type(exc).__name__}: {exc})") \
                        from None
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def _plain(self, st: _Attempt, path: str, body: dict) -> Generation:
        r = await self._http().post(path, json=body)
        r.raise_for_status()
        return self._parse_plain(st, r)

    def _parse_plain(self, st: _Attempt, r: Any) -> Generation:
        try:
            js = r.json()
            if not isinstance(js, dict):
                raise ValueError("not an object")
            text, finish, usage, has_choice = event_parts(js, self.chat)
            if not has_choice:
                raise ValueError("no 'choices'")
        except ValueError as exc:
            raise ServerError(f"server {self.name}: malformed answer ({exc}): {r.text[:200]!r}",
                              "malformed") from None
        return Generation(text or "", usage.get("prompt_tokens"), usage.get("completion_tokens"),
                          finish, None, time.perf_counter() - st.t0, (), st.attempts, bool(usage))

    async def _stream(self, st: _Attempt, path: str, body: dict, on_text: Callable[[str], None] | None) -> Generation:
        acc, usage, finish, done, token_chunks = "", {}, None, False, 0
        async with self._http().stream("POST", path, json=body) as r:
            if r.status_code >= 400:
                await r.aread()
                r.raise_for_status()
            if "event-stream" not in r.headers.get("content-type", "event-stream"):
                await r.aread()          # the server answered in one piece: read it as such
                return self._parse_plain(st, r)
            try:
                async for line in bounded_lines(r.aiter_bytes()):
                    if not line.startswith("data:"):
                        continue              # blank separators, ": keep-alive" comments, event: lines
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    ev = self._event(data)
                    try:
                        text, ch_finish, ev_usage, has_choice = event_parts(ev, self.chat)
                    except ValueError as exc:
                        raise ServerError(f"server {self.name}: malformed stream event ({exc}): {data[:120]!r}",
                                          "malformed") from None
                    usage = ev_usage or usage
                    if not has_choice:
                        continue
                    delta = text or ""
                    finish = ch_finish or finish
                    if delta or not ch_finish:
                        token_chunks += 1
                        now = time.perf_counter() - st.t0
                        if st.ttft_s is None:
                            st.ttft_s = now
                        elif st.last_s is not None and now > st.last_s:
                            st.itl_s.append(now - st.last_s)
                        st.last_s = now
                    if delta:
                        acc += delta
                        self._deliver(st, acc, on_text)
            except (self._httpx.RemoteProtocolError, self._httpx.ReadError) as exc:
                raise _Cut(str(exc)) from None
            except ServerError as exc:
                if exc.kind == "malformed" and not str(exc).startswith("server "):
                    raise ServerError(f"server {self.name}: {exc}", "malformed") from None
                raise
        if not (done or (not self.done_marker and finish is not None)):
            raise ServerError(f"server {self.name}: stream ended without "
                              f"{'[DONE]' if self.done_marker else 'a finish_reason'} after {len(acc)} characters",
                              "truncated")
        if len(acc) < len(st.delivered):
            raise ServerError(f"server {self.name}: a retried stream returned less than was delivered", "diverged")
        n = usage.get("completion_tokens")
        return Generation(acc, usage.get("prompt_tokens"), n if n is not None else token_chunks, finish, st.ttft_s,
                          st.last_s if st.last_s is not None else time.perf_counter() - st.t0, tuple(st.itl_s),
                          st.attempts, bool(usage))

    def _event(self, data: str) -> dict:
        try:
            ev = json.loads(data)
        except ValueError:
            raise ServerError(f"server {self.name}: malformed stream event {data[:120]!r}", "malformed") from None
        if not isinstance(ev, dict):
            raise ServerError(f"server {self.name}: malformed stream event {data[:120]!r}", "malformed")
        if "error" in ev or ev.get("object") == "error":
            err = ev.get("error", ev)
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise ServerError(f"server {self.name}: error in stream: {str(msg)[:200]}", "stream_error")
        return ev

    def _deliver(self, st: _Attempt, acc: str, on_text: Callable[[str], None] | None) -> None:
        """Hand ``on_text`` what ``acc`` holds beyond what was already delivered (a retried
        stream first re-reads the delivered text; it must match)."""
        k = min(len(acc), len(st.delivered))
        if acc[:k] != st.delivered[:k]:
            raise ServerError(f"server {self.name}: a retried stream diverged from the text already delivered",
                              "diverged")
        if len(acc) > len(st.delivered):
            new, st.delivered = acc[len(st.delivered):], acc
            if on_text is not None:
                on_text(new)

    # ---- blocking faces ----
    def generate(self, prompt: str, *, max_tokens: int, extra: dict | None = None, stream: bool = True,
                 on_text: Callable[[str], None] | None = None, deadline_s: float | None = None) -> Generation:
        """:meth:`agenerate`, blocking (runs on :func:`client_loop`)."""
        return run_sync(self.agenerate(prompt, max_tokens=max_tokens, extra=extra, stream=stream, on_text=on_text,
                                       deadline_s=deadline_s))

    def completion(self, prompt: str, *, max_tokens: int, extra: dict | None = None) -> Generation:
        """Greedy, unstreamed completion of ``prompt`` with the server's token ``usage``."""
        return self.generate(prompt, max_tokens=max_tokens, extra=extra, stream=False)

    def complete(self, prompt: str, *, max_tokens: int, on_text: Callable[[str], None] | None = None,
                 extra: dict | None = None) -> str:
        """Greedy completion of ``prompt``; with ``on_text`` the answer is streamed and each text
        piece handed to it once, as it arrives. Returns the whole completion."""
        return self.generate(prompt, max_tokens=max_tokens, extra=extra, stream=on_text is not None,
                             on_text=on_text).text
