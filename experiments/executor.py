"""The one cell executor of every sweep: local worker processes or Ray, resumable, interruptible.

A sweep is a list of :class:`Cell`: a name and a call ``fn(*args, **kwargs)`` returning a
``pandas.DataFrame`` (or, with ``tables``, a mapping of named DataFrames). :func:`run_cells` runs
the cells whose files are missing and writes each result atomically, in this process, as it
arrives (``cells/<name>.parquet``; with ``tables``, ``cells/<name>__<table>.parquet``, the first
table last: its presence marks the cell done). It then returns every cell's result read back
from its files, in the cells' order, so a table built from them does not depend on where or in
which order the cells ran, nor on whether they ran in this run or an earlier one (resume). Cells
with equal names are one unit of work.

How cells run is the experiment config's, not the kind's (``Execution`` of
:mod:`experiments.context`: top-level keys of the config, or ``--runtime``, ``--workers`` and
``--ray-address`` of ``python -m experiments.run``)::

    runtime: local      # local (default): worker processes on this machine; ray: Ray tasks
    workers: 4          # local: processes (1: in this process); ray: cells in flight (default: the
                        # cluster's CPUs)

Ray joins ``--ray-address`` / ``RAY_ADDRESS`` or starts a private local instance (loopback only,
token authentication: :func:`orchestrator.runtime.ray_runtime.init_ray`, which also ships this
checkout to the workers). Ctrl-C or SIGTERM stops the sweep: finished cells are kept, running
ones are cancelled (Ray) or their processes killed (local); a local worker also dies with its
parent when that is killed outright (:func:`die_with_parent`), and so does a local Ray started
here (:mod:`experiments.reaper`).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from experiments.context import Execution, RunContext, atomic_write_parquet

Result = pd.DataFrame | dict[str, pd.DataFrame]


@dataclass(frozen=True)
class Cell:
    """One unit of a sweep. ``fn`` must be a module-level function (it is pickled by reference to
    worker processes and Ray workers); ``args`` and ``kwargs`` are pickled by value."""
    name: str
    fn: Callable[..., Result]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    tables: tuple[str, ...] = ()       # non-empty: fn returns {table: DataFrame}
    label: str = ""                    # shown beside the progress bar when the cell finishes
    cpus: float = 1.0                  # Ray: CPUs the cell's task holds (0: its work runs in actors of its own)
    gpus: float = 0.0                  # Ray: GPUs the cell's task holds (Ray sets CUDA_VISIBLE_DEVICES)


def cell_files(ctx: RunContext, cell: Cell) -> list:
    """The cell's files, the one that marks it done first."""
    if not cell.tables:
        return [ctx.cell_path(cell.name)]
    return [ctx.cell_path(f"{cell.name}__{t}") for t in cell.tables]


def is_done(ctx: RunContext, cell: Cell) -> bool:
    return all(p.exists() for p in cell_files(ctx, cell))


def read_cell(ctx: RunContext, cell: Cell) -> Result:
    files = cell_files(ctx, cell)
    if not cell.tables:
        return pd.read_parquet(files[0])
    return {t: pd.read_parquet(p) for t, p in zip(cell.tables, files)}


def _write(ctx: RunContext, cell: Cell, result: Result) -> None:
    if not cell.tables:
        if not isinstance(result, pd.DataFrame):
            raise TypeError(f"cell {cell.name}: {cell.fn.__qualname__} returned {type(result).__name__}, "
                            f"not a DataFrame")
        atomic_write_parquet(cell_files(ctx, cell)[0], result)
        return
    if not isinstance(result, Mapping):
        raise TypeError(f"cell {cell.name}: {cell.fn.__qualname__} returned {type(result).__name__}, not a "
                        f"mapping of the tables {', '.join(cell.tables)}")
    missing = [t for t in cell.tables if t not in result]
    if missing:
        raise TypeError(f"cell {cell.name}: {cell.fn.__qualname__} returned no table {missing[0]!r}")
    for t, path in reversed(list(zip(cell.tables, cell_files(ctx, cell)))):   # the marker last
        atomic_write_parquet(path, result[t])


def run_cells(ctx: RunContext, cells: Sequence[Cell], *, desc: str = "cells",
              on_done: Callable[[Cell, Result], None] | None = None, max_parallel: int | None = None) -> list[Result]:
    """Run every cell of ``cells`` not finished yet with ``ctx.execution`` (module docstring),
    write each as it finishes (``on_done(cell, result)`` is called after), and return all the
    cells' results, read from their files, in the order of ``cells``. ``max_parallel`` caps the
    cells in flight whatever the runtime (1: cells that measure wall time)."""
    from tqdm import tqdm
    unique = list({c.name: c for c in cells}.values())
    todo = [c for c in unique if not is_done(ctx, c)]
    ex = ctx.execution
    bar = tqdm(total=len(unique), initial=len(unique) - len(todo), disable=not ctx.progress, desc=desc, unit="cell")

    def done(cell: Cell, result: Result) -> None:
        _write(ctx, cell, result)
        if cell.label:
            bar.set_postfix_str(cell.label)
        bar.update()
        if on_done is not None:
            on_done(cell, result)

    try:
        if ex.runtime == "ray":
            _run_ray(todo, done, ex, max_parallel)
        else:
            n = min(ex.workers or 1, max_parallel or len(todo) or 1, len(todo) or 1)
            if n <= 1:
                for cell in todo:
                    done(cell, cell.fn(*cell.args, **cell.kwargs))
            else:
                _run_processes(todo, done, n)
    finally:
        bar.close()
    return [read_cell(ctx, c) for c in cells]


def _call(fn: Callable[..., Result], args: tuple, kwargs: Mapping[str, Any]) -> Result:
    return fn(*args, **kwargs)


# -- local worker processes ----------------------------------------------------------------------
def _run_processes(todo: list[Cell], done: Callable[[Cell, Result], None], workers: int) -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_worker_init, initargs=(os.getpid(),))
    try:
        pending = {pool.submit(_call, c.fn, c.args, dict(c.kwargs)): c for c in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                done(pending.pop(f), f.result())
    except BaseException:
        _kill_pool(pool)
        raise
    pool.shutdown(wait=True)


def _kill_pool(pool: Any) -> None:
    """Stop a pool now: queued cells dropped, running ones killed (their results are lost; the
    cells stay unfinished). ``ProcessPoolExecutor`` gained ``kill_workers`` in Python 3.14."""
    procs = list(getattr(pool, "_processes", {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):
            pass
    for p in procs:
        p.join(timeout=5)
    if manager is not None:
        # the pool's manager thread closes its wake-up pipe once it sees the workers gone; CPython
        # 3.11's exit hook checks that pipe, then writes to it, so a close between the two printed
        # "Exception ignored ... Bad file descriptor" after the one-line message (test_signals)
        manager.join(timeout=5)


def _worker_init(parent_pid: int) -> None:
    """A pool worker: Ctrl-C is its parent's to handle (the parent then kills it), and it dies
    with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent_pid)


PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> None:
    """Make this process receive ``sig`` when its parent process dies, however it dies (kill -9
    included): Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)`` through ctypes), else a
    daemon thread that polls the parent's pid once a second. ``parent_pid``: the parent as the
    caller knew it; if it is already gone (it died before this call), exit at once."""
    parent = parent_pid if parent_pid is not None else os.getppid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:           # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent, sig), daemon=True, name="die-with-parent").start()


def _watch_parent(parent: int, sig: int) -> None:
    import time
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), sig)


# -- Ray -----------------------------------------------------------------------------------------
def _run_ray(todo: list[Cell], done: Callable[[Cell, Result], None], ex: Execution,
             max_parallel: int | None) -> None:
    if not todo:
        return
    from orchestrator.runtime.ray_runtime import init_ray
    started = "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    local = started and not (ex.ray_address or os.environ.get("RAY_ADDRESS"))
    reaper = None
    if local:                        # a Ray started here goes with this process, even on kill -9
        from experiments.reaper import start_reaper
        reaper = start_reaper()
    on_term = signal.getsignal(signal.SIGTERM)
    try:
        ray = init_ray(ex.ray_address, num_cpus=ex.workers if local else None, log_to_driver=True,
                       logging_level=logging.ERROR)     # not Ray's notes on packaging this checkout
        if callable(on_term) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_term)     # Ray's driver aborts on SIGTERM: ours stops cleanly
        _ray_loop(ray, todo, done, ex, max_parallel, shutdown=started)
    finally:
        if reaper is not None:
            reaper.terminate()
            reaper.wait()


def _ray_loop(ray: Any, todo: list[Cell], done: Callable[[Cell, Result], None], ex: Execution,
              max_parallel: int | None, *, shutdown: bool) -> None:
    limit = min(x for x in (ex.workers, max_parallel, len(todo)) if x is not None)
    if ex.workers is None and max_parallel is None:
        limit = max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(_call)
    running: dict[Any, Cell] = {}
    queue = list(todo)
    try:
        while queue or running:
            while queue and len(running) < limit:
                c = queue.pop(0)
                running[task.options(num_cpus=c.cpus, num_gpus=c.gpus).remote(c.fn, c.args, dict(c.kwargs))] = c
            ready, _ = ray.wait(list(running), num_returns=1)
            done(running.pop(ready[0]), ray.get(ready[0]))
    finally:
        for ref in running:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - Ray may be shutting down already
                pass
        if shutdown:
            ray.shutdown()
