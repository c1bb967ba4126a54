"""How much CPU the closed loop's servers got while they had work (a diagnostic of machine noise).

Linux keeps, per thread, the time it ran and the time it waited runnable on a run queue
(``/proc/<pid>/task/<tid>/schedstat``: ``run_ns wait_ns slices``). Over a window, a server's
*CPU share* is run / (run + wait): 1 when nothing else wanted its core, 0.5 when another job took
half of the time it was ready to compute. The loop measures it during each probe and each replay
block; :class:`ScaledStep` turns a step model calibrated at one share into the one at another
(time = CPU work / share). The window's own share is known only after the window, so a model
rescaled by it is an explanation of a block (how far other jobs' CPU use accounts for the
error), never the prediction the block is judged by.
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.closedloop_model import WrappedStep

#: not a calibration rule: the previous block's calibration rescaled by the servers' CPU share
#: during the block itself, known only afterwards: how much of an error the machine's other jobs explain
RESCALED = "previous, rescaled by the block's CPU share"


def sched_ns(pids: list[int]) -> tuple[int, int]:
    """Run and run-queue wait time (ns) summed over every thread of ``pids`` (0, 0 where the OS
    has no ``schedstat``, or for a process that is gone)."""
    run = wait = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                r, w, *_ = task.read_text().split()
            except (OSError, ValueError):
                continue
            run, wait = run + int(r), wait + int(w)
    return run, wait


@dataclass
class CpuWindow:
    """One window's measurements: the servers' run and wait time, this process's CPU time (the
    load generator's, which shares the cores) and the wall time."""
    run_s: float
    wait_s: float
    client_cpu_s: float
    wall_s: float

    @property
    def share(self) -> float | None:
        """The servers' CPU share while runnable (None without schedstat)."""
        busy = self.run_s + self.wait_s
        return self.run_s / busy if busy > 0 else None

    def as_dict(self) -> dict:
        return {"server_run_s": self.run_s, "server_wait_s": self.wait_s, "server_cpu_share": self.share,
                "client_cpu_s": self.client_cpu_s, "wall_s": self.wall_s}


class CpuMeter:
    """``with CpuMeter(pids) as m: ...`` then ``m.window``: the servers' and the client's CPU use."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.window: CpuWindow | None = None

    @staticmethod
    def _client_s() -> float:
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    def __enter__(self) -> CpuMeter:
        self._t0, self._c0, self._s0 = time.monotonic(), self._client_s(), sched_ns(self.pids)
        return self

    def __exit__(self, *exc: object) -> None:
        run, wait = sched_ns(self.pids)
        self.window = CpuWindow((run - self._s0[0]) / 1e9, (wait - self._s0[1]) / 1e9,
                                self._client_s() - self._c0, time.monotonic() - self._t0)


@dataclass(frozen=True)
class ScaledStep(WrappedStep):
    """``base`` with every iteration's time multiplied by ``factor`` (a CPU share's ratio)."""
    factor: float = 1.0

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        return self.factor * self.base.step_s(prefill_tokens, prefill_attn_tokens2, decode_batch,
                                              decode_context_tokens, prefill_seqs=prefill_seqs)

    @property
    def async_floor_s(self) -> float:
        return self.factor * getattr(self.base, "async_floor_s", 0.0)


def rescaled(step: Any, calibrated_at: float | None, now: float | None) -> Any:
    """``step`` (calibrated while the servers had CPU share ``calibrated_at``) at share ``now``;
    unchanged when either is unknown."""
    if not calibrated_at or not now:
        return step
    return ScaledStep(step, calibrated_at / now)
