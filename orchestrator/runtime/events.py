"""The one discrete-event loop: a heap of ``(time, priority, seq, event)``.

The cluster and what-if simulators (``harness``) and the orchestrator's discrete-event runtime
run on it. Events are small objects whose ``handle(sim)`` returns the new events it causes (or
None); everything else (engine cores, admission policies, routers, workflows, graph
schedulers) lives outside this loop. Ties in time are broken by ``priority`` (lower first),
then by insertion order, so a run is deterministic. Priorities in use (lower runs first at one
instant): arrivals and results 0-1, instance bookkeeping 2, the orchestrator's dispatch 3.

Work deferred to the end of an instant (:meth:`Simulator.defer`: an engine core starting its next
iteration, so every submission of the instant can join it) runs after every event of that instant,
in the order deferred, before the clock moves on; it is not an event (no heap entry, not counted
in ``events_handled``). Events it causes at the same instant run before the next deferred item.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from heapq import heappop, heappush
from itertools import count
from typing import Any, Protocol


P_ARRIVAL, P_DONE, P_FREE, P_DISPATCH = 0, 1, 2, 3


class Event:
    """Something that happens at ``time`` (simulated seconds)."""

    __slots__ = ("time",)
    priority = 0

    def __init__(self, time: float) -> None:
        self.time = time

    def handle(self, sim: Simulator) -> Iterable[Event] | None:  # pragma: no cover - interface
        raise NotImplementedError


class Arrivals(Event):
    """Every arrival of one instant in one event: calls ``source.arrive_one(i, now)`` for each
    index whose time equals this event's, then schedules the next instant. Simultaneous arrivals
    thus reach their instances together (and can share a first batch), and the heap holds one
    pending arrival at a time. ``source.arrival_s`` is sorted ascending."""

    __slots__ = ("i", "source")

    def __init__(self, time: float, i: int, source: Any) -> None:
        super().__init__(time)
        self.i, self.source = i, source

    def handle(self, sim: Simulator) -> list[Event]:
        a = self.source.arrival_s
        n, i, events = len(a), self.i, []
        while i < n and a[i] == self.time:
            new = self.source.arrive_one(i, self.time)
            if new:
                events.extend(new)
            i += 1
        if i < n:
            events.append(Arrivals(float(a[i]), i, self.source))
        return events


class AtInstantEnd(Protocol):
    """Work deferred to the end of the current instant (:meth:`Simulator.defer`)."""

    def at_instant_end(self, now: float) -> Iterable[Event] | None: ...


class Simulator:
    """Pops events in time order until none are left or ``until_s`` is passed; at the end of
    each instant, runs the work deferred to it (module docstring)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events_handled = 0
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = count(1)                    # insertion order: ties in time and priority
        self._deferred: deque[AtInstantEnd] = deque()
        #: ``defer(item)``: call ``item.at_instant_end(now)`` once every event of the current instant
        #: has run (the queue's own append: no Python call per iteration of an engine core)
        self.defer: Callable[[AtInstantEnd], None] = self._deferred.append

    def instant_over(self, now: float) -> bool:
        """Whether nothing else happens at ``now``: no event left at that time and nothing deferred
        (work started now runs next, as it would at the instant's end)."""
        return not self._deferred and (not self._heap or self._heap[0][0] > now)

    def push(self, event: Event) -> None:
        if event.time < self.now:
            raise ValueError(f"event at {event.time} s is before the clock ({self.now} s)")
        heappush(self._heap, (event.time, event.priority, next(self._seq), event))

    def push_all(self, events: Iterable[Event] | None) -> None:
        if events:
            for e in events:
                self.push(e)

    def run(self, until_s: float = float("inf")) -> float:
        """Handle events up to ``until_s``; returns the simulated time of the last event."""
        heap, deferred, seq = self._heap, self._deferred, self._seq
        n = 0
        now = self.now
        while True:
            if deferred and (not heap or heap[0][0] > now):   # the instant is over
                new = deferred.popleft().at_instant_end(now)
            elif heap and heap[0][0] <= until_s:
                now, _, _, ev = heappop(heap)
                self.now = now
                n += 1
                new = ev.handle(self)
            else:
                break
            if new:
                for e in new:
                    heappush(heap, (e.time, e.priority, next(seq), e))
        self.events_handled += n
        return self.now

    @property
    def pending(self) -> int:
        """Events in the heap plus deferred items not run yet."""
        return len(self._heap) + len(self._deferred)
