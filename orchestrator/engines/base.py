"""The one engine interface, for simulated and real engines alike.

The engine scheduler hands an engine *instance* a batch of primitive invocations (inputs already
resolved) and gets back, per invocation, its output, when it became final (offset from batch
start) and any pieces streamed before that; plus the batch's duration. ``submit`` is async-ish:
it returns a :class:`PendingBatch`; a simulated engine resolves it at once (its times are
modelled), a real engine may run on a worker and resolve it when done (times measured). An
engine that ``streams`` also reports each piece the moment it is complete, to ``on_piece``.

LLM engines keep KV caches keyed by ``Invocation.kv_key``: PartialPrefilling creates one,
FullPrefilling extends it on the same instance without recomputing the prefix, Decoding reads it
and frees it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from orchestrator.primitives import Kind


#: ``on_piece(invocation_key, piece_index, value)``: a streamed, semantically complete piece.
PieceCallback = Callable[[str, int, Any], None]


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
    """``duration_s``: the batch's time on its instance. Real engines also give ``cpu_s``, the CPU
    time of the thread that ran it (a server process's own CPU, e.g. PostgreSQL's, not counted), and
    ``ended_at``, ``time.perf_counter()`` when it ended (what a wall-clock host times its hand-back by)."""
    outputs: tuple[InvocationOutput, ...]
    duration_s: float
    cpu_s: float | None = None
    ended_at: float | None = None


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


class EngineDeadError(EngineError):
    """The engine is gone for good (its server cannot be reached): a runtime gives the instance
    no more work. Real engines raise a subclass (``harness.servers.calls.ServerDeadError``)."""


class Engine(ABC):
    """One engine instance. ``kind``: "llm", "embedding", "reranker", "vectordb", "websearch"."""
    name: str
    kind: str
    serves: frozenset[Kind]
    #: True when the instance takes new work while a batch runs (iteration-level / continuous
    #: batching, as vLLM does) up to ``max_batch_size()`` items in flight; False: one batch at a time.
    continuous: bool = False
    #: True when ``submit`` calls ``on_piece`` as each piece completes (real engines); False:
    #: pieces are only in the result's ``InvocationOutput.pieces`` (modelled offsets).
    streams: bool = False

    @abstractmethod
    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> PendingBatch:
        """Start a batch; all invocations' kinds must be in ``serves`` (:func:`check_kinds`).
        ``now_s`` is the simulated clock (simulated engines model contention with it; real ones
        ignore it). ``on_piece`` gets streamed pieces live where the engine ``streams``."""

    @abstractmethod
    def max_batch_size(self) -> int:
        """Profiled maximum efficient batch size in items (doubling until throughput stalls)."""

    def occupied_kv_tokens(self) -> int:
        """KV-cache tokens held (LLM engines); 0 otherwise."""
        return 0

    def holds_kv(self, kv_key: str) -> bool:
        return False


def check_kinds(engine: Engine, batch: Sequence[Invocation]) -> None:
    """Raise :class:`EngineError` unless ``engine`` serves every invocation's kind."""
    for inv in batch:
        if inv.kind not in engine.serves:
            raise EngineError(f"engine {engine.name!r} cannot run {inv.kind}; serves {sorted(engine.serves)}")
