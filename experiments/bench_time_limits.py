"""``python -m experiments.bench_time_limits``: does every solver stop at its time limit?

On :func:`selector.stress.many_instances_problem` (a 6-stage workflow over 25 models plus 12
deployed reusable instances: ~3 million size-0 reuse assignments for ``flowmaker``), each
solver runs in a fresh process of its own (so its peak memory is its own) and reports the wall
time of its ``select`` call alone, the overrun past the limit, its status and the process's
peak resident memory. A warm-up ``select`` on a tiny problem first imports the solver's
libraries (ortools, optuna, highspy): importing them is process start, not search.

Target (issue 14): overrun <= ``--max-over`` (0.2 s) for every solver and peak memory bounded
(``--max-rss-mb``); the exit status is 1 when a solver misses either. ``--rlimit-mb`` caps each
child's address space so a runaway solver fails with MemoryError instead of exhausting the
machine.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Any


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
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024          # kB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB


def _child(conn: Any, name: str, limit_s: float, kwargs: dict, rlimit_mb: int | None) -> None:
    import resource
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the parent's: it kills this child
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
    proc = ctx.Process(target=_child, args=(child, name, limit_s, kwargs, rlimit_mb), daemon=True)
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


def main(argv: list[str] | None = None) -> int:
    from flowmaker.entry import OneLineParser, add_version
    from solvers.base import time_limit_arg
    from selector.stress import STRESS_PROBLEMS
    from solvers.registry import names
    ap = OneLineParser(prog="python -m experiments.bench_time_limits", description=__doc__.splitlines()[0])
    add_version(ap)
    ap.add_argument("--solvers", nargs="*", default=None, help=f"default: all ({', '.join(names())})")
    ap.add_argument("--limits", nargs="*", type=time_limit_arg, default=[0.5, 2.0], help="seconds (default 0.5 2)")
    ap.add_argument("--instances", type=int, default=12, help="deployed reusable instances (default 12)")
    ap.add_argument("--utilization", type=float, default=0.5, help="of every instance (0.5: no reuse fits)")
    ap.add_argument("--max-over", type=float, default=0.2, help="allowed overrun, seconds (default 0.2)")
    ap.add_argument("--max-rss-mb", type=float, default=1000.0, help="allowed peak memory (default 1000)")
    ap.add_argument("--rlimit-mb", type=int, default=6000, help="address-space cap per child (default 6000)")
    ap.add_argument("--problems", nargs="*", default=None, choices=sorted(STRESS_PROBLEMS),
                    help="named stress problems (selector.stress; long-200: the 200-stage workflow) instead of "
                         "--instances/--utilization")
    args = ap.parse_args(argv)
    unknown = [n for n in args.solvers or [] if n not in names()]
    if unknown:
        print(f"error: --solvers: unknown solver '{unknown[0]}'; known: {', '.join(names())}", file=sys.stderr)
        return 2
    print(f"{'problem':<18}{'solver':<20}{'limit_s':>8}{'elapsed_s':>11}{'over_s':>9}{'peak_mb':>9}  status")
    bad = 0
    for problem in args.problems or [None]:
        label = problem or f"instances-{args.instances}"
        for limit in args.limits:
            for name in args.solvers or names():
                r = measure_isolated(name, limit, rlimit_mb=args.rlimit_mb, n_instances=args.instances,
                                     utilization=args.utilization, problem_name=problem)
                if "error" in r:
                    bad += 1
                    print(f"{label:<18}{name:<20}{limit:>8g}  error: {r['error']}", flush=True)
                    continue
                ok = r["over_s"] <= args.max_over and r["peak_rss_mb"] <= args.max_rss_mb
                bad += not ok
                print(f"{label:<18}{name:<20}{limit:>8g}{r['elapsed_s']:>11.3f}{r['over_s']:>9.3f}"
                      f"{r['peak_rss_mb']:>9.0f}  {r['status']}{'' if ok else '  MISSED'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    from flowmaker.entry import run
    run(main)
