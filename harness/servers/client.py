"""An OpenAI-compatible HTTP client (``/v1/completions``, streaming or not; ``/health``) with
timeouts and retries, and :class:`OpenAIEngine`, which makes one server an orchestrator engine.

Works with any server speaking the OpenAI completions API: ``transformers serve``,
``vllm serve``, ``trtllm-serve``. Retries cover connection errors, timeouts and 5xx answers with
exponential backoff; when they are exhausted on a connection failure the server is declared
dead (:class:`EngineDeadError`) and the client refuses further calls at once, so a caller can
count the remaining requests as failed and keep every result obtained so far.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from orchestrator import ops
from orchestrator.engines.base import Engine, EngineError, Invocation, InvocationOutput
from orchestrator.engines.real.worker import FuturePendingBatch, PieceCallback, check_kinds
from orchestrator.jsonstream import IncrementalJsonList, JsonStreamError
from orchestrator.primitives import Kind, PREFILL_KINDS


class ServerError(EngineError):
    """The server answered with an error (4xx, or 5xx after the retries)."""


class EngineDeadError(ServerError):
    """The server cannot be reached any more (connection refused/reset after the retries)."""


@dataclass(frozen=True)
class Completion:
    """One non-streamed completion and what the server says it cost (``usage``; None when the
    server does not report it)."""
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None


def exact_output_body(backend: str | None, max_tokens: int) -> dict:
    """Request fields that make ``backend`` generate exactly ``max_tokens`` tokens (EOS ignored):
    vLLM and TensorRT-LLM take ``ignore_eos``; ``transformers serve`` rejects unknown fields but
    takes a ``generation_config`` JSON (``min_new_tokens = max_new_tokens``). ``None``: nothing is
    asked (a generic server); the caller records the tokens it actually got."""
    if backend is None:
        return {}
    if backend in ("vllm", "trtllm"):
        return {"ignore_eos": True}
    if backend == "transformers":
        n = int(max_tokens)
        return {"generation_config": json.dumps({"max_new_tokens": n, "min_new_tokens": n, "do_sample": False})}
    raise KeyError(f"unknown backend {backend!r}; known: transformers, vllm, trtllm (or none)")


def served_model(base_url: str, *, timeout_s: float = 5.0) -> str:
    """The first model id ``GET /v1/models`` lists (the name to put in requests)."""
    import httpx
    r = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s)
    r.raise_for_status()
    data = r.json().get("data") or []
    if not data:
        raise ServerError(f"{base_url}: /v1/models lists no model")
    return str(data[0]["id"])


class OpenAIClient:
    """One server. ``timeout_s``: per request (connect and read); ``retries``: extra attempts on
    connection errors, timeouts and 5xx, waiting ``backoff_s * 2**attempt`` between them."""

    def __init__(self, *, base_url: str, model: str, timeout_s: float = 60.0, retries: int = 2,
                 backoff_s: float = 0.2, name: str | None = None) -> None:
        import httpx
        self._httpx = httpx
        self.base_url, self.model = base_url.rstrip("/"), model
        self.name = name or self.base_url
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)
        self.dead = False
        self.requests = 0
        self.failures = 0

    def close(self) -> None:
        self._http.close()

    def health(self, timeout_s: float = 2.0) -> bool:
        """True when ``GET /health`` (or ``/v1/models``) answers 200."""
        for path in ("/health", "/v1/models"):
            try:
                if self._http.get(path, timeout=timeout_s).status_code == 200:
                    return True
            except self._httpx.HTTPError:
                return False
        return False

    def _with_retries(self, fn: Callable[[], Any]) -> Any:
        if self.dead:
            raise EngineDeadError(f"server {self.name} is dead")
        httpx = self._httpx
        self.requests += 1
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except httpx.HTTPStatusError as exc:
                code = exc.response.status_code
                if code < 500 or attempt == self.retries:
                    self.failures += 1
                    raise ServerError(f"server {self.name}: HTTP {code}: {exc.response.text[:200]}") from None
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if attempt == self.retries:
                    self.failures += 1
                    self.dead = True
                    raise EngineDeadError(f"server {self.name} unreachable: {exc}") from None
            except httpx.TimeoutException:
                if attempt == self.retries:
                    self.failures += 1
                    raise ServerError(f"server {self.name}: timed out after {self.timeout_s} s") from None
            time.sleep(self.backoff_s * 2 ** attempt)

    def completion(self, prompt: str, *, max_tokens: int, extra: dict | None = None) -> Completion:
        """Greedy, non-streamed completion of ``prompt`` with the server's token ``usage``."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0.0,
                **(extra or {})}

        def call() -> Completion:
            r = self._http.post("/v1/completions", json=body)
            r.raise_for_status()
            js = r.json()
            choice, usage = js["choices"][0], js.get("usage") or {}
            return Completion(choice.get("text") or "", usage.get("prompt_tokens"), usage.get("completion_tokens"),
                              choice.get("finish_reason"))
        return self._with_retries(call)

    def complete(self, prompt: str, *, max_tokens: int, on_text: Callable[[str], None] | None = None,
                 extra: dict | None = None) -> str:
        """Greedy completion of ``prompt``; with ``on_text`` the answer is streamed (SSE) and each
        text delta handed to it as it arrives. Returns the whole completion."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0.0,
                **(extra or {})}
        if on_text is None:
            def call() -> str:
                r = self._http.post("/v1/completions", json=body)
                r.raise_for_status()
                return r.json()["choices"][0]["text"]
            return self._with_retries(call)

        def stream() -> str:
            parts: list[str] = []
            with self._http.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
                r.raise_for_status()
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    choices = json.loads(data).get("choices") or [{}]
                    delta = choices[0].get("text") or ""
                    if delta:
                        parts.append(delta)
                        on_text(delta)
            return "".join(parts)
        return self._with_retries(stream)


class OpenAIEngine(Engine):
    """An LLM engine on an OpenAI-compatible server (continuous batching is the server's).

    PREFILLING records the prompt; PARTIAL_PREFILLING sends the prefix as a 1-token completion so
    a server with prefix caching (vLLM ``--enable-prefix-caching``, TensorRT-LLM KV reuse) holds
    its KV cache, and FULL_PREFILLING appends the rest; DECODING sends the whole prompt, streams
    the answer and, for ``json_list``, feeds the incremental JSON parser so each completed item
    is reported while the server still generates. Invocations of a batch run concurrently.
    ``json_list`` needs a server that emits JSON (a real instruction model, or guided decoding via
    ``extra_body``, e.g. vLLM's ``{"guided_json": ...}``); an unparsable stream stops streaming
    pieces and the decode's value is the raw text.
    """
    continuous = True
    streams = True

    def __init__(self, *, name: str, client: OpenAIClient, max_batch: int = 16, warm_prefix: bool = True,
                 extra_body: dict | None = None) -> None:
        self.name, self.kind = name, "llm"
        self.serves = frozenset(PREFILL_KINDS | {Kind.DECODING})
        self.client, self._max_batch = client, max_batch
        self.warm_prefix, self.extra_body = warm_prefix, dict(extra_body or {})
        self._prompts: dict[str, str] = {}
        self._lock = threading.Lock()
        # batches and their requests on separate pools: a batch waiting on its requests never
        # holds the thread one of them needs (at most max_batch items are in flight)
        self._batches = ThreadPoolExecutor(max_workers=max_batch, thread_name_prefix=f"oai-{name}-b")
        self._pool = ThreadPoolExecutor(max_workers=max_batch, thread_name_prefix=f"oai-{name}")

    def max_batch_size(self) -> int:
        return self._max_batch

    def occupied_kv_tokens(self) -> int:
        with self._lock:
            return sum(ops.n_tokens(p) for p in self._prompts.values())

    def holds_kv(self, kv_key: str) -> bool:
        return kv_key in self._prompts

    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> FuturePendingBatch:
        check_kinds(self, batch)
        batch = list(batch)
        return FuturePendingBatch(self._batches.submit(self._batch, batch, on_piece))

    def _batch(self, batch: list[Invocation], on_piece: PieceCallback | None):
        from orchestrator.engines.base import BatchResult
        t0 = time.perf_counter()
        futs = [self._pool.submit(self._one, inv, t0, on_piece) for inv in batch] \
            if len(batch) > 1 else None
        outs = [f.result() for f in futs] if futs else [self._one(batch[0], t0, on_piece)]
        return BatchResult(tuple(outs), time.perf_counter() - t0)

    def _one(self, inv: Invocation, t0: float, on_piece: PieceCallback | None) -> InvocationOutput:
        if inv.kind in PREFILL_KINDS:
            text = "\n".join(ops.prompt_segments(inv.inputs["segments"]))
            if inv.kind == Kind.FULL_PREFILLING:
                with self._lock:
                    if inv.kv_key not in self._prompts:
                        raise EngineError(f"{self.name}: FullPrefilling {inv.key} has no prompt {inv.kv_key!r}")
                    self._prompts[inv.kv_key] += "\n" + text
            else:
                with self._lock:
                    self._prompts[inv.kv_key] = text
                if inv.kind == Kind.PARTIAL_PREFILLING and self.warm_prefix:
                    self.client.complete(text, max_tokens=1, extra=self.extra_body)
            return InvocationOutput(tuple(ops.prompt_segments(inv.inputs["segments"])), time.perf_counter() - t0)
        with self._lock:
            prompt = self._prompts.pop(inv.kv_key, None)
        if prompt is None:
            raise EngineError(f"{self.name}: Decoding {inv.key} has no prompt {inv.kv_key!r}")
        pieces: list = []
        parser = IncrementalJsonList() if inv.params.get("fmt") == "json_list" else None

        def on_text(delta: str) -> None:
            nonlocal parser
            if parser is None:
                return
            try:
                for el in parser.feed(delta):
                    pieces.append((time.perf_counter() - t0, [el]))
                    if on_piece is not None:
                        on_piece(inv.key, len(pieces) - 1, [el])
            except JsonStreamError:
                parser = None
        text = self.client.complete(prompt, max_tokens=int(inv.params.get("output_tokens", 16)),
                                    on_text=on_text, extra=self.extra_body)
        return InvocationOutput(text, time.perf_counter() - t0, tuple(pieces))

    def close(self) -> None:
        self._batches.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
