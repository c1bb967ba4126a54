"""Simulated engines sharing a few CPU cores (``teola_apps`` ``cpu_cores``; ``factory.share_cores``):
egalitarian processor sharing, re-timed whenever an execution starts or ends.

An execution (a non-LLM engine's batch, an LLM core's iteration) is ``work`` seconds of its engine's
time alone on a core. While ``k`` executions run beside ``background`` runnable tasks of other
programs, each advances at ``1 / factor(k)`` seconds of work per second, ``factor(k) = max(1, (k +
background) / cores) * (1 + same_process * (k - 1))``: with ``k + background`` at most ``cores`` every
one has a core to itself; ``same_process`` is what the executions of ONE process cost each other
beyond the cores (the interpreter lock; measured for two, ``experiments/scripts/inprocess_sharing.py``;
linear in the others running is an assumption for more).
When an execution starts or ends every running one's remaining work is re-timed at the new rate, so
a batch is slowed by executions that start after it and sped up when others end. The cores keep one
pending end event (the earliest end at the current rate); a start or end replaces it (a version
counter: an event made before the last change does nothing when it comes up).

Only the discrete-event runtime (``orchestrator.runtime.sim``) times executions on shared cores; GPU
colocation (``llm_timing.Colocation``, the harness's) is a different model and untouched by this one.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from orchestrator.engines.llm_core import LLMCore
from orchestrator.runtime.events import P_DONE, Event, Simulator

#: what an execution's owner is told when it ends: ``done(now, loop)`` returns the events it causes
Done = Callable[[float, Simulator], Iterable[Event] | None]


class _Execution:
    __slots__ = ("left", "done", "same_process")

    def __init__(self, left: float, done: Done, same_process: float) -> None:
        self.left, self.done, self.same_process = left, done, same_process


class _End(Event):
    """The earliest end on the cores at the rate in force when it was made (``version``)."""
    __slots__ = ("cores", "version")
    priority = P_DONE

    def __init__(self, time: float, cores: SharedCores, version: int) -> None:
        super().__init__(time)
        self.cores, self.version = cores, version

    def handle(self, sim: Simulator) -> list[Event] | None:
        return self.cores.end(self, sim)


class SharedCores:
    """``cores`` CPU cores shared by every execution started on them (module docstring)."""

    #: remaining time (s, at the current rates) within which executions end together with the earliest one
    EPS_S = 1e-9

    def __init__(self, cores: int, background: float = 0.0, same_process: float = 0.0,
                 decode_same_process: float | None = None) -> None:
        if cores < 1:
            raise ValueError(f"cores: {cores} (at least 1)")
        if background < 0:
            raise ValueError(f"background: {background} (at least 0)")
        decode = same_process if decode_same_process is None else decode_same_process
        if min(same_process, decode) < 0:
            raise ValueError(f"same_process: {same_process}, decode_same_process: {decode} (at least 0)")
        self.cores, self.background = cores, background
        self.same_process, self.decode_same_process = same_process, decode
        self.running: list[_Execution] = []     # in start order (ends at one instant: that order)
        self._t = 0.0                           # when every ``left`` was last brought up to date
        self._version = 0

    def factor(self, k: int, same_process: float | None = None) -> float:
        """How many times longer than alone work takes while ``k`` executions run, for an execution
        that the others of its process cost ``same_process`` each (default: the cores' own)."""
        s = self.same_process if same_process is None else same_process
        return max(1.0, (k + self.background) / self.cores) * (1.0 + s * max(0, k - 1))

    def start(self, now: float, work_s: float, done: Done, *, decode: bool = False) -> list[Event]:
        """Start ``work_s`` seconds of work at ``now`` (``decode``: an LLM iteration that only
        decodes); ``done`` is called when it ends. Returns the cores' new end event (for the loop
        that runs them)."""
        if work_s < 0:
            raise ValueError(f"work_s: {work_s} (at least 0)")
        self._advance(now)
        self.running.append(_Execution(work_s, done, self.decode_same_process if decode else self.same_process))
        return [self._next_end()]

    def end(self, event: _End, sim: Simulator) -> list[Event] | None:
        """``event`` comes up: if nothing started or ended since it was made, the executions whose
        work is done end (their ``done`` in start order) and the next end is scheduled."""
        if event.version != self._version:
            return None                         # made before the last start or end: stale
        now = event.time
        self._advance(now)
        k = len(self.running)
        wall = [e.left * self.factor(k, e.same_process) for e in self.running]     # left at the current rates
        first = min(wall)
        ended = [e for e, w in zip(self.running, wall) if w <= first + self.EPS_S]
        self.running = [e for e, w in zip(self.running, wall) if w > first + self.EPS_S]
        self._version += 1                      # the rate changed: any end made before is stale
        out: list[Event] = []
        for e in ended:
            out.extend(e.done(now, sim) or ())
        if self.running:
            out.append(self._next_end())
        return out

    def _advance(self, now: float) -> None:
        if now < self._t:
            raise ValueError(f"shared cores: time {now} s is before their clock ({self._t} s)")
        if self.running and now > self._t:
            k, dt = len(self.running), now - self._t
            for e in self.running:
                e.left -= dt / self.factor(k, e.same_process)
        self._t = now

    def _next_end(self) -> _End:
        self._version += 1
        k = len(self.running)
        first = max(0.0, min(e.left * self.factor(k, e.same_process) for e in self.running))
        return _End(self._t + first, self, self._version)


class SharedCoresLLMCore(LLMCore):
    """An :class:`LLMCore` whose iterations run on :class:`SharedCores`: each is its step time of
    work there, and the core's iteration end comes from the cores (not the core's own event)."""

    __slots__ = ("shared",)

    def __init__(self, *, shared: SharedCores, **kw) -> None:
        super().__init__(**kw)
        self.shared = shared

    def _start(self, now: float) -> Sequence[Event] | None:
        events = super()._start(now)
        if not self.busy:                       # no iteration started
            return events
        assert events, "an LLMCore that starts an iteration returns its end event"
        work = self.time - now                  # the iteration's step time (its core alone)
        ends = self.shared.start(now, work, self._iteration_done, decode=not self.chunks)
        return list(events[:-1]) + ends         # the core's own end event (last) replaced

    def _iteration_done(self, now: float, sim: Simulator) -> Iterable[Event] | None:
        self.time = now
        return self.handle(sim)
