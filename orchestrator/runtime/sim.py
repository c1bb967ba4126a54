"""Discrete-event runtime: a heap of ``(time_s, priority, seq, event)``; each event's
``handle(state)`` returns new ``(time_s, priority, event)`` triples. No threads, no clocks.

The graph scheduler (per query) tracks in-degrees, keeps the query's store of intermediate
results, runs engine-free primitives inline and hands the others to the engine schedulers when
their in-degree reaches 0.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from orchestrator import ops
from orchestrator.batching import Pending
from orchestrator.engines.base import Invocation
from orchestrator.graph import Graph
from orchestrator.primitives import Kind, LLM_KINDS
from orchestrator.runtime.engine_scheduler import EngineScheduler

# priorities at equal times: results before streamed pieces before instances freeing up
P_ARRIVAL, P_DONE, P_PIECE, P_FREE = 0, 1, 1, 2


@dataclass(frozen=True)
class RequestResult:
    """One ended query: end-to-end ``latency_s = finish_s - arrival_s``; ``outputs`` maps the
    graph's output node ids to their values; ``n_primitives`` the nodes executed. A failed query
    (a runtime with real engines) has ``error``, the reason; its ``finish_s`` is when it failed,
    ``outputs`` is empty and ``n_primitives`` counts the nodes completed until then."""
    qid: int
    arrival_s: float
    finish_s: float
    outputs: Mapping[str, Any]
    n_primitives: int
    error: str | None = None

    @property
    def latency_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class QueryRun:
    qid: int
    graph: Graph
    arrival_s: float
    payload: Mapping[str, Any]
    indeg: dict[str, int] = field(default_factory=dict)
    store: dict[str, Any] = field(default_factory=dict)
    finish_s: float | None = None
    error: str | None = None


class SimState:
    def __init__(self, *, schedulers: Mapping[str, EngineScheduler], dispatch_overhead_s: float) -> None:
        self.now = 0.0
        self.schedulers = dict(schedulers)
        self.overhead_s = dispatch_overhead_s
        self.queries: dict[int, QueryRun] = {}
        self.results: list[RequestResult] = []
        self.owner: dict[str, tuple[int, str]] = {}   # invocation key -> (qid, node id)
        self._seq = 0

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ---- graph scheduler ----
    def start(self, q: QueryRun) -> list:
        self.queries[q.qid] = q
        g = q.graph
        q.indeg = {n: sum(1 for p in g.parents[n] if g.nodes[n].stream_of != p) for n in g.nodes}
        roots = [n for n in g.order if q.indeg[n] == 0 and g.nodes[n].stream_of is None]
        out: list = []
        for nid in roots:
            out += self.ready(q, nid)
        return out

    def ready(self, q: QueryRun, nid: str) -> list:
        n = q.graph.nodes[nid]
        if n.guard is not None and not q.store[n.guard.node]:
            return self.complete(q, nid, n.params.get("skip_value"))
        if n.kind == Kind.INPUT:
            return self.complete(q, nid, q.payload[n.params["field"]])
        inputs = {k: ops.resolve(v, q.store) for k, v in n.inputs.items()}
        if n.kind == Kind.AGGREGATE:
            return self.complete(q, nid, ops.aggregate(inputs["parts"], n.params["mode"]))
        if n.kind == Kind.CONDITION:
            return self.complete(q, nid, ops.condition(inputs["x"]))
        if n.engine not in self.schedulers:
            raise KeyError(f"node {nid} needs engine {n.engine!r}; known: {', '.join(sorted(self.schedulers))}")
        kv = f"{q.qid}/{n.params['kv_chain']}" if n.kind in LLM_KINDS else None
        inv = Invocation(f"{q.qid}/{nid}", n.kind, inputs, n.params, kv, n.n_items)
        size = 1 if n.kind in LLM_KINDS else n.n_items
        self.schedulers[n.engine].enqueue(Pending(q.qid, q.arrival_s, self.now, self.next_seq(),
                                                  q.graph.depth[nid], size, nid, inv))
        return []

    def complete(self, q: QueryRun, nid: str, value: Any) -> list:
        if nid in q.store:
            raise RuntimeError(f"query {q.qid}: node {nid} completed twice")
        q.store[nid] = value
        out: list = []
        for c in q.graph.children[nid]:
            if q.graph.nodes[c].stream_of == nid:
                continue
            q.indeg[c] -= 1
            if q.indeg[c] == 0:
                out += self.ready(q, c)
        if q.finish_s is None and all(o in q.store for o in q.graph.outputs):
            q.finish_s = self.now
            self.results.append(RequestResult(q.qid, q.arrival_s, self.now,
                                              {o: q.store[o] for o in q.graph.outputs}, len(q.graph.nodes)))
        return out

    def fail(self, q: QueryRun, reason: str) -> bool:
        """End query ``q`` unfinished at ``now`` for ``reason``; False when it had already ended."""
        if q.finish_s is not None:
            return False
        q.finish_s, q.error = self.now, reason
        self.results.append(RequestResult(q.qid, q.arrival_s, self.now, {}, len(q.store), reason))
        return True

    def dispatch(self) -> list:
        """Place pending work (engine schedulers), then start a forward pass on every idle
        iterative LLM instance that has work."""
        out: list = []
        for name, sch in self.schedulers.items():
            for la in sch.dispatch(self.now):
                start = self.now + self._overhead(la.batch)
                if la.pending is None:
                    invs = [p.payload for p in la.batch]
                    for p in la.batch:
                        self.owner[p.payload.key] = (p.qid, p.node_id)
                    if start == self.now:
                        sch.instances[la.instance].enqueue(invs)
                    else:
                        out.append((start, P_DONE, Enqueue(name, la.instance, tuple(invs))))
                    continue
                result = la.pending.result()      # simulated: resolved at submit
                for p, res in zip(la.batch, result.outputs):
                    q = self.queries[p.qid]
                    out.append((start + res.done_s, P_DONE, NodeDone(p.qid, p.node_id, res.value)))
                    for i, (off, val) in enumerate(res.pieces):
                        pid = f"{p.node_id}/piece{i}"
                        if pid in q.graph.nodes:
                            out.append((start + off, P_PIECE, NodeDone(p.qid, pid, val)))
                items = sum(p.size for p in la.batch)
                out.append((start + result.duration_s, P_FREE, InstanceFree(name, la.instance, items)))
        for name, sch in self.schedulers.items():
            for i, inst in enumerate(sch.instances):
                if getattr(inst, "iterative", False) and not inst.busy and inst.has_work():
                    it = inst.start_iteration(self.now)
                    if it is not None:
                        inst.busy = True
                        out.append((self.now + it.duration_s, P_DONE, IterationEnd(name, i, it)))
        return out

    def _overhead(self, batch: Sequence[Pending]) -> float:
        # A decode is issued with its prefill: Ayo's graph scheduler submits a Decoding once its
        # prefilling parent is RUNNING (schedulers/graph_scheduler.py, check_node_ready), and a
        # LlamaIndex LLM call is one vLLM request; so it pays no separate dispatch.
        if all(isinstance(p.payload, Invocation) and p.payload.kind == Kind.DECODING for p in batch):
            return 0.0
        return self.overhead_s

    def iteration_done(self, engine: str, i: int, it: Any) -> list:
        sch = self.schedulers[engine]
        sch.instances[i].busy = False
        out: list = []
        for key, idx, value in it.pieces:
            qid, nid = self.owner[key]
            q = self.queries[qid]
            pid = f"{nid}/piece{idx}"
            if pid in q.graph.nodes:
                out += self.complete(q, pid, value)
        for key, value in it.done:
            qid, nid = self.owner.pop(key)
            sch.free(i, 1)
            out += self.complete(self.queries[qid], nid, value)
        return out


@dataclass(frozen=True)
class Arrival:
    query: QueryRun

    def handle(self, s: SimState) -> list:
        return s.start(self.query)


@dataclass(frozen=True)
class NodeDone:
    qid: int
    node_id: str
    value: Any

    def handle(self, s: SimState) -> list:
        return s.complete(s.queries[self.qid], self.node_id, self.value)


@dataclass(frozen=True)
class Enqueue:
    """Primitives reach an iterative instance after the dispatch overhead."""
    engine: str
    instance: int
    invocations: tuple

    def handle(self, s: SimState) -> list:
        s.schedulers[self.engine].instances[self.instance].enqueue(list(self.invocations))
        return []


@dataclass(frozen=True)
class IterationEnd:
    """A forward pass of an iterative LLM instance ends: deliver what it finished."""
    engine: str
    instance: int
    iteration: Any

    def handle(self, s: SimState) -> list:
        return s.iteration_done(self.engine, self.instance, self.iteration)


@dataclass(frozen=True)
class InstanceFree:
    engine: str
    instance: int
    items: int

    def handle(self, s: SimState) -> list:
        s.schedulers[self.engine].free(self.instance, self.items)
        return []


def run_events(state: SimState, queries: Sequence[QueryRun]) -> list[RequestResult]:
    heap: list = []
    for q in queries:
        heapq.heappush(heap, (q.arrival_s, P_ARRIVAL, state.next_seq(), Arrival(q)))
    while heap:
        t, _, _, ev = heapq.heappop(heap)
        state.now = t
        for when, prio, e in ev.handle(state):
            heapq.heappush(heap, (when, prio, state.next_seq(), e))
        if not heap or heap[0][0] > t:   # every event of this instant handled: place work
            for when, prio, e in state.dispatch():
                heapq.heappush(heap, (when, prio, state.next_seq(), e))
    unfinished = [q.qid for q in queries if q.finish_s is None]
    if unfinished:
        raise RuntimeError(f"simulation ended with unfinished queries {unfinished[:5]} (deadlock?)")
    return sorted(state.results, key=lambda r: r.qid)
