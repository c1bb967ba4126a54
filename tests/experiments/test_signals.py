"""Issue 28, item 7: SIGTERM is handled as Ctrl-C is (one line, non-zero exit, finished cells
kept) and no process of ours outlives its parent, whether the parent dies by SIGTERM or by
SIGKILL (worker pools, the time-limit benchmark's child); Ctrl-C during ``bayesian`` prints one
line, not optuna's trial traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from experiments.reaper import descendants, proc_stat
from tests.experiments.test_interrupt import _interrupt

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    return set(descendants(pid))


def _alive(pid: int) -> bool:
    return proc_stat(pid) is not None


def _wait_for(cond, within_s: float, what: str) -> None:
    t_end = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < t_end, f"never: {what}"
        time.sleep(0.1)


def _sweep(tmp_path: Path) -> tuple[list[str], Path]:
    """A sweep of long cells on two local worker processes (milp then exhaustive on 7 stages)."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("experiment: sig\nkind: selector_scaling\nworkers: 2\nparams:\n  depths: [1, 7, 7]\n"
                   "  seeds: [0, 1]\n  catalog_sizes: []\n  solvers: [milp, exhaustive]\n  time_limit_s: 60\n"
                   "  publish: false\n")
    args = [sys.executable, "-m", "experiments.run", str(cfg), "--results", str(tmp_path / "res"), "--run-id", "r",
            "--no-progress"]
    return args, tmp_path / "res" / "sig" / "r" / "cells"


def _start_with_workers(args: list[str], n: int) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for(lambda: len(_children(proc.pid)) >= n or proc.poll() is not None, 90, f"{n} worker processes")
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.0)                                      # the workers are inside their first cells
        return proc, _children(proc.pid)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def _none_alive_after(pids: set[int], seconds: float = 5.0) -> list[int]:
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for p in left:                                            # do not leave them to the next test
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left


def _killpg(proc: subprocess.Popen) -> None:
    """Whatever is left of the test's process group (only after a failure)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def test_sigterm_stops_a_sweep_with_one_line_and_kills_its_workers(tmp_path) -> None:
    """Before: SIGTERM killed the runner (exit -15, no message) and left its pool workers alive."""
    args, _ = _sweep(tmp_path)
    proc, workers = _start_with_workers(args, 2)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)      # an orphaned worker holds the pipes: a timeout
        assert _none_alive_after(workers) == []
    finally:
        _killpg(proc)
    assert proc.returncode == 143, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("terminated: finished results are kept"), err


def test_kill_9_of_a_sweep_takes_its_workers_with_it(tmp_path) -> None:
    """Before: kill -9 of the runner left its pool workers orphaned and running their cells."""
    args, _ = _sweep(tmp_path)
    proc, workers = _start_with_workers(args, 2)
    try:
        proc.kill()
        proc.communicate(timeout=30)
        assert _none_alive_after(workers) == []
    finally:
        _killpg(proc)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_time_limit_benchmark_child_dies_with_its_parent(tmp_path, how: int) -> None:
    """Before: the benchmark's measuring child outlived SIGTERM (and kill -9) of the benchmark."""
    cfg = tmp_path / "b.yaml"
    cfg.write_text("experiment: b\nkind: bench_time_limits\nparams: {solvers: [exhaustive], limits_s: [60]}\n")
    args = [sys.executable, "-m", "experiments.run", str(cfg), "--results", str(tmp_path / "res"), "--no-progress"]
    proc, children = _start_with_workers(args, 1)
    try:
        proc.send_signal(how)
        out, err = proc.communicate(timeout=30)
        assert _none_alive_after(children) == []
        if how == signal.SIGTERM:
            lines = err.strip().splitlines()
            assert proc.returncode == 143 and len(lines) == 1 and lines[0].startswith("terminated"), (out, err)
    finally:
        _killpg(proc)


def test_ctrl_c_during_bayesian_prints_one_line(tmp_path) -> None:
    """Before: 46 lines, optuna's 'Trial 3 failed' warning with the trial's traceback."""
    flag = tmp_path / "in-trial"
    code = textwrap.dedent(f"""
        import pathlib, time
        import solvers.bayesian as bayesian
        real = bayesian.evaluate
        def slow(*args):
            pathlib.Path({str(flag)!r}).touch()
            time.sleep(0.5)                      # the interrupt lands inside a trial
            return real(*args)
        bayesian.evaluate = slow
        from flowmaker.entry import run
        from selector.cli import main
        from selector.stress import many_instances_problem
        import json
        p = pathlib.Path({str(tmp_path / 'p.json')!r})
        p.write_text(json.dumps(many_instances_problem().to_dict()))
        run(main, ["solve", str(p), "--solver", "bayesian", "--time-limit", "60"])
    """)
    done = _interrupt([sys.executable, "-c", code], lambda p: flag.exists() and time.sleep(0.2) is None)
    assert done.returncode == 130, done
    assert [ln for ln in done.stderr.splitlines() if ln.strip()] == ["interrupted"], done.stderr


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_sweep_on_a_local_ray_takes_ray_with_it(tmp_path, how: int) -> None:
    """A local Ray started by the runner (GCS, raylet, agents, workers) is gone 5 s after the
    runner dies. Before the reaper, its dashboard and runtime-env agents outlived kill -9 by a
    minute or more; before the SIGTERM handler was put back after ray.init, SIGTERM aborted."""
    args, _ = _sweep(tmp_path)
    cfg = Path(args[3])
    cfg.write_text(cfg.read_text().replace("workers: 2", "runtime: ray\nworkers: 2"))
    proc = subprocess.Popen(args, cwd=REPO, env={**ENV, "RAY_AUTH_MODE": "disabled"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        busy = lambda: [p for p in _children(proc.pid) if b"ray::_call" in _cmdline(p)]   # noqa: E731
        _wait_for(lambda: len(busy()) >= 2 or proc.poll() is not None, 240, "two Ray workers in cells")
        assert proc.poll() is None, proc.communicate()
        ours = _children(proc.pid)
        proc.send_signal(how)
        out, err = proc.communicate(timeout=60)
        assert _none_alive_after(ours) == []
        if how == signal.SIGTERM:
            assert proc.returncode == 143 and "terminated: finished results are kept" in err, (out, err)
    finally:
        _killpg(proc)
