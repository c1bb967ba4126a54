"""Asynchronous batches for real engines: each instance runs its batches on its own thread;
``submit`` returns at once with a :class:`FuturePendingBatch` whose ``result()`` blocks."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

from orchestrator.engines.base import BatchResult, Invocation, InvocationOutput, PendingBatch

#: ``on_piece(invocation_key, piece_index, value)``: a streamed, semantically complete piece.
PieceCallback = Callable[[str, int, Any], None]


class FuturePendingBatch(PendingBatch):
    """A batch running on a worker; ``result()`` waits for it (re-raising its error)."""

    def __init__(self, future: Future) -> None:
        super().__init__(None)
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> BatchResult:
        return self._future.result(timeout)

    def add_done_callback(self, fn: Callable[["FuturePendingBatch"], None]) -> None:
        self._future.add_done_callback(lambda _f: fn(self))


class BatchWorker:
    """One thread per engine instance: batches run one after another, in submission order."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-{name}")
        self.lock = threading.Lock()

    def run(self, fn: Callable[[float], Sequence[InvocationOutput]]) -> FuturePendingBatch:
        """Run ``fn(t0)`` (``t0``: perf_counter at batch start, for ``done_s`` offsets)."""
        def job() -> BatchResult:
            t0 = time.perf_counter()
            outs = tuple(fn(t0))
            return BatchResult(outs, time.perf_counter() - t0)
        return FuturePendingBatch(self._pool.submit(job))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def check_kinds(engine: Any, batch: Sequence[Invocation]) -> None:
    from orchestrator.engines.base import EngineError
    for inv in batch:
        if inv.kind not in engine.serves:
            raise EngineError(f"engine {engine.name!r} cannot run {inv.kind}; serves {sorted(engine.serves)}")
