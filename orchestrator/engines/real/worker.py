"""Asynchronous batches for real engines: each instance runs its batches on its own thread;
``submit`` returns at once with a :class:`FuturePendingBatch` whose ``result()`` blocks."""
from __future__ import annotations

import threading
import time
from abc import abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

from orchestrator.engines.base import (BatchResult, Engine, Invocation, InvocationOutput, PendingBatch,
                                       PieceCallback, check_kinds)

__all__ = ["BatchWorker", "FuturePendingBatch", "PieceCallback", "WorkerEngine", "check_kinds"]


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
            t0, c0 = time.perf_counter(), time.thread_time()
            outs = tuple(fn(t0))
            end = time.perf_counter()
            return BatchResult(outs, end - t0, time.thread_time() - c0, end)
        return FuturePendingBatch(self._pool.submit(job))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


class WorkerEngine(Engine):
    """An engine instance whose batches run on its own :class:`BatchWorker`: ``submit`` checks
    the kinds and returns at once; the batch runs in ``_run(batch, t0, on_piece)``."""

    def __init__(self, *, name: str, kind: str, serves: frozenset, max_batch: int) -> None:
        self.name, self.kind, self.serves = name, kind, serves
        self._max_batch = max_batch
        self._worker = BatchWorker(name)

    def max_batch_size(self) -> int:
        return self._max_batch

    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> FuturePendingBatch:
        """Start the batch on this instance's worker thread (``now_s`` unused: times are measured)."""
        check_kinds(self, batch)
        batch = list(batch)
        return self._worker.run(lambda t0: self._run(batch, t0, on_piece))

    @abstractmethod
    def _run(self, batch: list[Invocation], t0: float,
             on_piece: PieceCallback | None) -> Sequence[InvocationOutput]:
        """Run the batch (``t0``: perf_counter at its start, for ``done_s`` offsets)."""

    def close(self) -> None:
        self._worker.shutdown()
