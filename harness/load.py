"""How the what-if (``python -m harness simulate``) offers its load, and whether the deployment keeps up.

Three ways, one per run: the trace's own arrival times (open loop, stretched by ``--time-scale``);
``--rate R``: the trace's requests in order at Poisson arrivals of ``R`` requests per second (open
loop, as ``vllm bench serve --request-rate``); ``--concurrency N``: closed loop, ``N`` clients
that each send the next request of the trace the moment their last one returns (finished or
failed), all starting at time 0 (``vllm bench serve --max-concurrency N`` at an infinite rate,
GuideLLM's concurrent strategy; N = 1 is its synchronous one).

An open loop offered more than the deployment serves has a queue that grows as long as requests
keep arriving: its mean latency then measures the trace's length, not the deployment.
:func:`overload` detects that from the run itself: the queueing delay (arrival to first
admission) of the requests grows with their arrival time at a slope of ``1 - served / offered``;
it reports an overload when that slope, fitted over the second half of the arrivals, exceeds
:data:`OVERLOAD_SLOPE` and the deployment served less than :data:`OVERLOAD_SERVED` of the offered
rate over the run. A closed loop cannot overload (at most N requests are ever outstanding).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from harness.cluster import ClusterSim, Workload
from orchestrator.engines.llm_seq import Seq
from orchestrator.runtime.events import P_ARRIVAL, Event, Simulator

#: queueing delay growing faster than this (s per s of arrivals) over the second half is an overload
OVERLOAD_SLOPE = 0.05
#: ... when the deployment also served less than this share of the offered rate
OVERLOAD_SERVED = 0.95


class _Send(Event):
    """A closed-loop client sends request ``i``."""

    __slots__ = ("i", "source")
    priority = P_ARRIVAL

    def __init__(self, time: float, i: int, source: ClosedLoopSim) -> None:
        super().__init__(time)
        self.i, self.source = i, source

    def handle(self, sim: Simulator) -> Iterable[Event] | None:
        return self.source.send(self.i, self.time)


class ClosedLoopSim(ClusterSim):
    """A cluster simulator driven by ``concurrency`` clients instead of arrival times: the
    workload's requests are sent in order, the first ``concurrency`` at time 0, each next one
    when a request returns. ``arrival_s`` holds each request's send time once sent."""

    def __init__(self, *, concurrency: int, **kw: Any) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        super().__init__(**kw)
        self.concurrency = concurrency

    def run(self, workload: Workload) -> dict[str, np.ndarray]:
        self._sent = np.full(len(workload), np.nan)
        return super().run(workload)

    def _start(self) -> None:
        self._next = min(self.concurrency, len(self._sent))
        for i in range(self._next):
            self.sim.push(_Send(0.0, i, self))

    @property
    def arrival_s(self) -> np.ndarray:
        return self._sent

    def send(self, i: int, now: float) -> Iterable[Event] | None:
        self._sent[i] = now
        return self.arrive_one(i, now)

    def _done(self, call: Seq, now: float) -> Iterable[Event] | None:
        i = self.request_of(call)
        events = super()._done(call, now)
        if self.failed[i] or self.done_s[i] == self.done_s[i]:   # the request returned
            if self._next < len(self._sent):
                events = [*(events or ()), _Send(now, self._next, self)]
                self._next += 1
        return events


def overload(table: dict[str, np.ndarray]) -> dict[str, Any]:
    """From a run's call table (one call per request, open loop): the offered and served rates
    (requests/s over the arrivals' span and from the first arrival to the last completion), the
    queueing delay's growth (s per s of arrival, fitted over the second half of the arrivals) and
    whether that is an overload (module docstring)."""
    arr = table["arrival_s"]
    n = len(arr)
    out: dict[str, Any] = {"offered_rps": None, "served_rps": None, "queue_growth": None, "overloaded": False}
    if n < 8:
        return out
    span = float(arr[-1] - arr[0])
    ends = np.where(np.isnan(table["done_s"]), arr, table["done_s"])
    served_span = float(np.max(ends) - arr[0])
    if span <= 0 or served_span <= 0:
        return out
    offered, served = (n - 1) / span, (n - 1) / served_span
    queue = np.where(np.isnan(table["sched_s"]), ends, table["sched_s"]) - arr
    half = slice(n // 2, n)
    x = arr[half]
    growth = float(np.polyfit(x, queue[half], 1)[0]) if np.ptp(x) > 0 else 0.0
    out.update(offered_rps=offered, served_rps=served, queue_growth=growth,
               overloaded=bool(growth > OVERLOAD_SLOPE and served < OVERLOAD_SERVED * offered))
    return out


def overload_warning(s: dict[str, Any]) -> str | None:
    """The one-line warning for a run summary with an overload, else None."""
    if not s.get("overloaded"):
        return None
    return (f"warning: offered load {s['offered_rps']:.3g} req/s exceeds what the deployment serves "
            f"(about {s['served_rps']:.3g} req/s): the queue grows without bound (queueing delay +"
            f"{s['queue_growth']:.2g} s per s of trace), so the latencies below grow with the trace's length; "
            "lower --rate, add --replicas, or use --concurrency for a closed loop")
