"""Runs fuzz cases (tests/fuzz_corpus.py) in this process, one after another, each through its
entry point's ``main(argv)`` with standard output and error captured, a wall-clock bound
(SIGALRM) and its peak memory measured (``VmHWM`` reset through ``/proc/self/clear_refs``); the
process's address space is capped (``RLIMIT_AS``). Reads the cases as JSON on standard input,
writes one JSON result per case on standard output.

    python tests/fuzz_runner.py --limit-s 30 --rlimit-mb 6000 < cases.json
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

# this file's folder (tests/) is not a place to import the project from: tests/experiments would
# shadow the experiments package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from flowmaker.procmem import reset_peak_rss, status_bytes  # noqa: E402 - after the path is set


def _hwm_mb() -> float | None:
    peak = status_bytes("VmHWM")
    return None if peak is None else peak / 2**20


class Hang(BaseException):
    """The case ran past its bound (a BaseException, so no ``except Exception`` swallows it)."""


def _alarm(signum, frame):  # noqa: ANN001
    raise Hang


def run_case(face: str, argv: list[str], limit_s: float) -> dict:
    mod, fn = face.split(":")
    main = getattr(importlib.import_module(mod), fn)
    out, err = io.StringIO(), io.StringIO()
    reset = reset_peak_rss()
    base = _hwm_mb()
    t0 = time.perf_counter()
    outcome, code, tb = "returned", None, ""
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Hang:
        outcome = "hang"
    except BaseException as exc:  # noqa: BLE001 - a traceback is what the test looks for
        outcome = "exception"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - t0
    peak = _hwm_mb()
    grew = (peak - base) if (reset and peak is not None and base is not None) else None
    return {"outcome": outcome, "code": code, "stdout": out.getvalue()[-2000:], "stderr": err.getvalue()[-5000:],
            "stderr_len": len(err.getvalue()), "traceback": tb, "seconds": seconds, "peak_growth_mb": grew}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-s", type=float, default=30.0)
    ap.add_argument("--rlimit-mb", type=int, default=6000)
    a = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (a.rlimit_mb << 20, a.rlimit_mb << 20))
    signal.signal(signal.SIGALRM, _alarm)
    os.environ.setdefault("MPLBACKEND", "Agg")
    cases = json.load(sys.stdin)
    real_stdout = sys.stdout
    for cid, face, argv in cases:
        r = run_case(face, argv, a.limit_s)
        real_stdout.write(json.dumps({"id": cid, **r}) + "\n")
        real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
