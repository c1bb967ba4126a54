"""``python -m experiments.reaper PID``: kill what PID started once PID dies (Linux, /proc).

A process killed with SIGKILL cannot stop what it started, and what its children started in
turn escapes a parent-death signal: a local Ray's dashboard and runtime-env agents are children
of the raylet, so when the raylet dies with the runner they are reparented and linger for a
minute or more (they first try to report to Ray's control store, already gone). The reaper
watches PID's process tree twice a second and remembers every descendant (pid and start time,
so a reused pid is never hit); when PID is gone it sends SIGKILL to each remembered process
still running, then exits. :func:`start_reaper` starts one for this process; stop it with
``terminate()`` when what it guards has been shut down cleanly.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5


def proc_stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time in clock ticks)`` of ``pid``, or None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[1]), int(fields[19]))


def descendants(root: int) -> dict[int, int]:
    """``{pid: start time}`` of every live descendant of ``root``."""
    stats = {int(d.name): s for d in Path("/proc").iterdir() if d.name.isdigit() and (s := proc_stat(int(d.name)))}
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        for c, (ppid, start) in stats.items():
            if ppid == p and c not in out:
                out[c] = start
                todo.append(c)
    return out


def watch(root: int) -> None:
    me, seen = os.getpid(), {}
    while proc_stat(root) is not None:
        seen.update(descendants(root))
        seen.pop(me, None)
        time.sleep(POLL_S)
    for pid, start in seen.items():
        st = proc_stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def start_reaper() -> subprocess.Popen | None:
    """A reaper for this process (None where there is no /proc to watch)."""
    from profiler.catalog import repo_root   # here: the reaper process itself stays light

    if not Path(f"/proc/{os.getpid()}/stat").exists():
        return None
    return subprocess.Popen([sys.executable, "-m", "experiments.reaper", str(os.getpid())],
                            cwd=repo_root(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # a Ctrl-C for the runner is not for its reaper
    watch(int(sys.argv[1]))
