"""``python -m experiments.run bench_time_limits``: does every solver stop at its time limit?

On :func:`selector.stress.many_instances_problem` (a 6-stage workflow over 25 models plus 12
deployed reusable instances: ~3 million size-0 reuse assignments for ``flowmaker``), each
solver runs in a fresh process of its own (so its peak memory is its own) and reports the wall
time of its ``select`` call alone, the overrun past the limit, its status and the process's
peak resident memory. A warm-up ``select`` on a tiny problem first imports the solver's
libraries (ortools, optuna, highspy): importing them is process start, not search.

Target (issue 14): overrun <= ``params.max_over_s`` (0.2 s) for every solver and peak memory
bounded (``params.max_rss_mb``); a solver that misses either is marked ``MISSED`` (a warning,
``met`` false in ``results.parquet``). ``params.rlimit_mb`` caps each child's address space so a
runaway solver fails with MemoryError instead of exhausting the machine.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext
from experiments.kinds._bench import Report
from flowmaker.entry import UserError
from flowmaker.procmem import status_bytes


def measure(name: str, limit_s: float, *, n_instances: int = 12, utilization: float = 0.5,
            problem_name: str | None = None) -> dict[str, Any]:
    """Time ``get_solver(name).select`` on the stress problem in this process (after a warm-up);
    ``problem_name`` picks one of ``selector.stress.STRESS_PROBLEMS`` instead."""
    import time

    from selector.stress import STRESS_PROBLEMS, many_instances_problem
    from selector.synthetic import synthetic_problem
    from solvers.registry import get_solver

    solver = get_solver(name)
    solver.prepare()
    solver.select(synthetic_problem(n_stages=1, n_models=2), time_limit_s=5.0)   # imports, caches
    problem = (STRESS_PROBLEMS[problem_name]() if problem_name
               else many_instances_problem(n_instances=n_instances, utilization=utilization))
    t0 = time.perf_counter()
    plan = solver.select(problem, time_limit_s=limit_s)
    elapsed = time.perf_counter() - t0
    rss_mb = peak_rss_mb()
    return {"solver": name, "limit_s": limit_s, "elapsed_s": elapsed, "over_s": elapsed - limit_s,
            "status": plan.status, "peak_rss_mb": rss_mb, "problem": problem.task.name}


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB: ``VmHWM`` of ``/proc/self/status``, which belongs
    to the process's own address space (a spawned child starts afresh). ``ru_maxrss`` is not
    used where /proc exists: Linux carries it across fork and exec, so a child of a 1 GB parent
    reports the parent's 1 GB."""
    import resource
    peak = status_bytes("VmHWM")
    if peak is not None:
        return peak / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB


def _child(conn: Any, name: str, limit_s: float, kwargs: dict, rlimit_mb: int | None, parent_pid: int) -> None:
    import resource
    import signal

    from experiments.executor import die_with_parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C (and SIGTERM) are the parent's: it kills this child
    die_with_parent(parent_pid)                      # ... and kill -9 of the parent kills it too
    if rlimit_mb:
        resource.setrlimit(resource.RLIMIT_AS, (rlimit_mb << 20, rlimit_mb << 20))
    try:
        conn.send(measure(name, limit_s, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, e.g. MemoryError
        conn.send({"solver": name, "limit_s": limit_s, "error": f"{type(exc).__name__}: {exc}"})


def measure_isolated(name: str, limit_s: float, *, rlimit_mb: int | None = 6000, wait_s: float = 60.0,
                     **kwargs: Any) -> dict[str, Any]:
    """:func:`measure` in a fresh spawned process; a child still running after ``limit_s + wait_s``
    is killed and reported as an error."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, name, limit_s, kwargs, rlimit_mb, os.getpid()), daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(limit_s + wait_s):
            return parent.recv()
        return {"solver": name, "limit_s": limit_s, "error": f"still running {limit_s + wait_s:g} s after start"}
    except EOFError:
        return {"solver": name, "limit_s": limit_s, "error": f"child died (exit code {proc.exitcode})"}
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    solvers: list[str] | None = None                            # default: every registered solver
    limits_s: list[float] = Field(default=[0.5, 2.0], min_length=1)
    instances: int = Field(default=12, ge=0)                    # deployed reusable instances
    utilization: float = Field(default=0.5, ge=0, le=1)         # of every instance (0.5: no reuse fits)
    problems: list[str] | None = None                           # named selector.stress problems instead
    max_over_s: float = 0.2                                     # allowed overrun
    max_rss_mb: float = 1000.0                                  # allowed peak memory
    rlimit_mb: int = Field(default=6000, ge=1)                  # address-space cap per child


def _check(params: Params) -> None:
    from selector.stress import STRESS_PROBLEMS
    from solvers.registry import names
    unknown = [n for n in params.solvers or [] if n not in names()]
    if unknown:
        raise UserError(f"field 'params.solvers': unknown solver '{unknown[0]}'; known: {', '.join(names())}")
    bad = [f"field 'params.limits_s': {v!r} is not a number of seconds > 0" for v in params.limits_s if not v > 0]
    bad += [f"field 'params.problems': unknown stress problem {p!r}; known: {', '.join(sorted(STRESS_PROBLEMS))}"
            for p in params.problems or [] if p not in STRESS_PROBLEMS]
    if bad:
        raise UserError(bad[0])


def run(params: Params, ctx: RunContext) -> None:
    from solvers.registry import names
    _check(params)
    report = Report(ctx, "Solvers against their time limits (bench_time_limits)")
    report.line(f"{'problem':<18}{'solver':<20}{'limit_s':>8}{'elapsed_s':>11}{'over_s':>9}{'peak_mb':>9}  status")
    log = logging.getLogger(__name__)
    for problem in params.problems or [None]:
        label = problem or f"instances-{params.instances}"
        for limit in params.limits_s:
            for name in params.solvers or names():
                r = measure_isolated(name, limit, rlimit_mb=params.rlimit_mb, n_instances=params.instances,
                                     utilization=params.utilization, problem_name=problem)
                r = {"problem": label, **r}
                if "error" in r:
                    report.line(f"{label:<18}{name:<20}{limit:>8g}  error: {r['error']}")
                    report.row({**r, "met": False})
                    log.warning("%s on %s at %g s: %s", name, label, limit, r["error"])
                    continue
                ok = r["over_s"] <= params.max_over_s and r["peak_rss_mb"] <= params.max_rss_mb
                report.line(f"{label:<18}{name:<20}{limit:>8g}{r['elapsed_s']:>11.3f}{r['over_s']:>9.3f}"
                            f"{r['peak_rss_mb']:>9.0f}  {r['status']}{'' if ok else '  MISSED'}")
                report.row({**r, "met": ok})
                if not ok:
                    log.warning("%s on %s missed its %g s limit or memory bound", name, label, limit)
    report.write()
