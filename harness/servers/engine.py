""":class:`OpenAIEngine`: one OpenAI-compatible server (through its
:class:`~harness.servers.client.OpenAIClient`) as an orchestrator engine."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Sequence

from orchestrator import ops
from orchestrator.engines.base import Engine, EngineError, Invocation, InvocationOutput, PieceCallback, check_kinds
from orchestrator.engines.real.worker import FuturePendingBatch
from orchestrator.jsonstream import IncrementalJsonList, JsonStreamError
from orchestrator.primitives import Kind, PREFILL_KINDS

if TYPE_CHECKING:
    from harness.servers.client import OpenAIClient


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
