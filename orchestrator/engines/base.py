"""The one engine interface, for simulated and real engines alike.

The engine scheduler hands an engine *instance* a batch of primitive invocations (inputs already
resolved) and gets back, per invocation, its output, when it became final (offset from batch
start) and any pieces streamed before that; plus the batch's duration. ``submit`` is async-ish:
it returns a :class:`PendingBatch`; a simulated engine resolves it at once (its times are
modelled), a real engine may run on a worker and resolve it when done (times measured).

LLM engines keep KV caches keyed by ``Invocation.kv_key``: PartialPrefilling creates one,
FullPrefilling extends it on the same instance without recomputing the prefix, Decoding reads it
and frees it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from orchestrator.primitives import Kind


@dataclass(frozen=True)
class Invocation:
    """One primitive execution. ``n_items``: its batch size in the engine's units (texts,
    queries, pairs; 1 sequence for LLM primitives)."""
    key: str
    kind: Kind
    inputs: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    kv_key: str | None = None
    n_items: int = 1


@dataclass(frozen=True)
class InvocationOutput:
    """``value``; ``done_s``: seconds from batch start until it is final; ``pieces``:
    ``(offset_s, value)`` for each semantically complete piece streamed earlier (JSON items)."""
    value: Any
    done_s: float
    pieces: tuple[tuple[float, Any], ...] = ()


@dataclass(frozen=True)
class BatchResult:
    outputs: tuple[InvocationOutput, ...]
    duration_s: float


class PendingBatch:
    """A submitted batch; ``result()`` blocks until it is done (immediately for simulation)."""

    def __init__(self, result: BatchResult | None = None) -> None:
        self._result = result

    def done(self) -> bool:
        return self._result is not None

    def result(self) -> BatchResult:
        if self._result is None:
            raise RuntimeError("batch not finished")
        return self._result


class EngineError(RuntimeError):
    """An invocation the engine cannot run (unknown kind, missing KV cache)."""


class Engine(ABC):
    """One engine instance. ``kind``: "llm", "embedding", "reranker", "vectordb", "websearch"."""
    name: str
    kind: str
    serves: frozenset[Kind]
    #: True when the instance takes new work while a batch runs (iteration-level / continuous
    #: batching, as vLLM does) up to ``max_batch_size()`` items in flight; False: one batch at a time.
    continuous: bool = False

    @abstractmethod
    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None) -> PendingBatch:
        """Start a batch; all invocations' kinds must be in ``serves``. ``now_s`` is the
        simulated clock (simulated engines model contention with it; real ones ignore it)."""

    @abstractmethod
    def max_batch_size(self) -> int:
        """Profiled maximum efficient batch size in items (doubling until throughput stalls)."""

    def occupied_kv_tokens(self) -> int:
        """KV-cache tokens held (LLM engines); 0 otherwise."""
        return 0

    def holds_kv(self, kv_key: str) -> bool:
        return False
