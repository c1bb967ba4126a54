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

A pending event can be moved earlier (:meth:`Simulator.reschedule`): an engine core that runs a
stretch of quiet iterations as one heap entry (``orchestrator.engines.llm_core``) moves it to the
end of its iteration in flight when something reaches it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from heapq import heapify, heappop, heappush
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
    pending arrival at a time (this event, moved on to the next instant). ``source.arrival_s`` is
    sorted ascending and read once, when the event is made."""

    __slots__ = ("i", "source", "times", "_me")

    def __init__(self, time: float, i: int, source: Any) -> None:
        self.time, self.i, self.source = time, i, source
        self.times = source.arrival_s
        self._me = (self,)

    def handle(self, sim: Simulator) -> Sequence[Event]:
        source, now, a = self.source, self.time, self.times
        n, i = len(a), self.i
        new = source.arrive_one(i, now)         # (the arrival at this event's time)
        i += 1
        if not new and i < n and a[i] != now:   # most instants: one arrival, no event caused
            self.time, self.i = float(a[i]), i
            return self._me
        events = list(new) if new else []
        while i < n and a[i] == now:
            new = source.arrive_one(i, now)
            if new:
                events.extend(new)
            i += 1
        if i < n:
            self.time, self.i = float(a[i]), i
            events.append(self)
        return events


#: a heap entry: (time, priority, insertion order, event)
Entry = tuple[float, int, int, Event]


class AtInstantEnd(Protocol):
    """Work deferred to the end of the current instant (:meth:`Simulator.defer`)."""

    def at_instant_end(self, now: float) -> Iterable[Event] | None: ...


class Simulator:
    """Pops events in time order until none are left or ``until_s`` is passed; at the end of
    each instant, runs the work deferred to it (module docstring)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events_handled = 0
        self.until_s = float("inf")             # where the current run() stops
        self._heap: list[Entry] = []
        self._seq = count(1)                    # insertion order: ties in time and priority
        self._deferred: deque[AtInstantEnd] = deque()
        #: ``defer(item)``: call ``item.at_instant_end(now)`` once every event of the current instant
        #: has run (the queue's own append: no Python call per iteration of an engine core)
        self.defer: Callable[[AtInstantEnd], None] = self._deferred.append

    def instant_over(self, now: float) -> bool:
        """Whether nothing else happens at ``now``: no event left at that time and nothing deferred
        (work started now runs next, as it would at the instant's end)."""
        return not self._deferred and (not self._heap or self._heap[0][0] > now)

    def push(self, event: Event) -> Entry:
        """Schedule ``event`` at its ``time``; returns its heap entry (for :meth:`reschedule`)."""
        if event.time < self.now:
            raise ValueError(f"event at {event.time} s is before the clock ({self.now} s)")
        entry = (event.time, event.priority, next(self._seq), event)
        heappush(self._heap, entry)
        return entry

    def reschedule(self, entry: Entry) -> Entry:
        """Move pending ``entry`` to its event's ``time`` now (not later than the entry's, not before
        the clock), ordered among equal times as if pushed now; returns the new entry."""
        heap, event = self._heap, entry[3]
        if not self.now <= event.time <= entry[0]:
            raise ValueError(f"cannot move an event from {entry[0]} s to {event.time} s at {self.now} s")
        new = (event.time, event.priority, next(self._seq), event)
        heap[heap.index(entry)] = new
        heapify(heap)
        return new

    def push_all(self, events: Iterable[Event] | None) -> None:
        if events:
            for e in events:
                self.push(e)

    def run(self, until_s: float = float("inf")) -> float:
        """Handle events up to ``until_s``; returns the simulated time of the last event."""
        self.until_s = until_s
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
