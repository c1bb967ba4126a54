"""Discrete-event runtime on the one event loop (``orchestrator.runtime.events``): no threads,
no clocks.

The graph scheduler (per query) tracks in-degrees, keeps the query's store of intermediate
results, runs engine-free primitives inline and hands the others to the engine schedulers when
their in-degree reaches 0. Once every event of an instant that makes work ready has run, one
:class:`Dispatch` event lets the engine schedulers form batches; a batch for a simulated LLM
instance is handed to its engine core (``SimLLMEngine.enqueue``), whose iterations run on the
same loop and report finished primitives back here (:class:`_LLMTarget`); other engines'
batches are timed at once (``submit``), or, on shared CPU cores, run there as work from their
start (:class:`CoresBatch`, ``orchestrator.engines.cpu_sharing``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from orchestrator import ops
from orchestrator.batching import Pending
from orchestrator.engines.base import Invocation
from orchestrator.graph import Graph
from orchestrator.primitives import Kind, LLM_KINDS
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.events import P_ARRIVAL, P_DISPATCH, P_DONE, P_FREE, Event, Simulator


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
    done_s: dict[str, float] = field(default_factory=dict)   # node id -> when it completed (critical paths)
    sent: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (score_once, query) -> candidates sent


class SimState:
    """The graph scheduler's state. ``now`` is the loop's clock once a loop runs it (``clock``),
    else whatever the runtime sets (the wall-clock runtime)."""

    def __init__(self, *, schedulers: Mapping[str, EngineScheduler], dispatch_overhead_s: float) -> None:
        self._now = 0.0
        self.clock: Simulator | None = None
        self.schedulers = dict(schedulers)
        self.overhead_s = dispatch_overhead_s
        self.queries: dict[int, QueryRun] = {}
        self.results: list[RequestResult] = []
        self.owner: dict[str, tuple[int, str]] = {}   # invocation key -> (qid, node id)
        self._seq = 0
        self._dispatch_at: float | None = None
        for name, sch in self.schedulers.items():       # wall-clock hosts have no local instances
            for i, inst in enumerate(getattr(sch, "instances", ())):
                if getattr(inst, "iterative", False):
                    inst.attach(_LLMTarget(self, name, i))

    @property
    def now(self) -> float:
        return self.clock.now if self.clock is not None else self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

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
            return self.complete(q, nid, ops.aggregate(inputs["parts"], n.params["mode"], top_n=n.params.get("top_n")))
        if n.kind == Kind.CONDITION:
            return self.complete(q, nid, ops.condition(inputs["x"]))
        if n.engine not in self.schedulers:
            raise KeyError(f"node {nid} needs engine {n.engine!r}; known: {', '.join(sorted(self.schedulers))}")
        if n.kind == Kind.RERANKING and n.params.get("score_once"):
            inputs = self.score_once(q, n.params["score_once"], inputs)
            if not inputs["candidates"]:            # an earlier part has every candidate
                return self.complete(q, nid, [])
        kv = f"{q.qid}/{n.params['kv_chain']}" if n.kind in LLM_KINDS else None
        inv = Invocation(f"{q.qid}/{nid}", n.kind, inputs, n.params, kv, n.n_items)
        size = 1 if n.kind in LLM_KINDS else n.n_items
        self.schedulers[n.engine].enqueue(Pending(q.qid, q.arrival_s, self.now, self.next_seq(),
                                                  q.graph.depth[nid], size, nid, inv))
        return self.request_dispatch()

    @staticmethod
    def score_once(q: QueryRun, group: str, inputs: dict[str, Any]) -> dict[str, Any]:
        """A part of a pipelined reranking (``RerankPipelining``) gets only the candidates no
        earlier part of its group and query was sent; they count as sent from now on, so parts
        dispatched in one batch do not score a candidate twice either."""
        sent = q.sent.setdefault((group, ops.as_text(inputs["query"])), set())
        new = ops.unscored(inputs["candidates"], sent)
        sent.update(new)
        return {**inputs, "candidates": new}

    def request_dispatch(self) -> list:
        """One :class:`Dispatch` at this instant once work became ready or capacity freed up."""
        if self._dispatch_at == self.now:
            return []
        self._dispatch_at = self.now
        return [Dispatch(self.now)]

    def freed(self, engine: str, instance: int, items: int) -> list:
        sch = self.schedulers[engine]
        sch.free(instance, items)
        # on shared cores the freed core may take any engine's waiting work
        waiting = [sch] if sch.cores is None else self.schedulers.values()
        return self.request_dispatch() if any(s.pending for s in waiting) else []

    def complete(self, q: QueryRun, nid: str, value: Any) -> list:
        if nid in q.store:
            raise RuntimeError(f"query {q.qid}: node {nid} completed twice")
        q.store[nid] = value
        q.done_s[nid] = self.now
        out: list = []
        for c in q.graph.children[nid]:
            if q.graph.nodes[c].stream_of == nid:
                continue
            q.indeg[c] -= 1
            if q.indeg[c] == 0:
                out += self.ready(q, c)
            elif q.indeg[c] == 1:
                out += self.promote_partial(q, c)
        if q.finish_s is None and all(o in q.store for o in q.graph.outputs):
            q.finish_s = self.now
            self.results.append(RequestResult(q.qid, q.arrival_s, self.now,
                                              {o: q.store[o] for o in q.graph.outputs}, len(q.graph.nodes)))
        return out

    def promote_partial(self, q: QueryRun, nid: str) -> list:
        """A FullPrefilling that now waits only for its PartialPrefilling makes that partial
        critical: if it has not started (``EngineScheduler.withdraw``) it completes at once as
        :class:`~orchestrator.ops.Unprefilled` and the full prefill computes its prompt too;
        otherwise the engine scheduler and the instance stop treating it as background."""
        n = q.graph.nodes[nid]
        if n.kind != Kind.FULL_PREFILLING:
            return []
        part = n.inputs["kv"].node
        if part in q.store:
            return []
        key, sched = f"{q.qid}/{part}", self.schedulers[n.engine]
        take = getattr(sched, "withdraw", None)     # the wall-clock hosts keep the partial where it is
        inv = None if take is None else take(key, self.now)
        if inv is not None:         # not started: merged into the full prefill, placed afresh
            self.owner.pop(key, None)
            return self.complete(q, part, ops.Unprefilled(ops.prompt_segments(inv.inputs["segments"])))
        return sched.promote(key, self.now) + self.request_dispatch()

    def fail(self, q: QueryRun, reason: str) -> bool:
        """End query ``q`` unfinished at ``now`` for ``reason``; False when it had already ended."""
        if q.finish_s is not None:
            return False
        q.finish_s, q.error = self.now, reason
        self.results.append(RequestResult(q.qid, q.arrival_s, self.now, {}, len(q.store), reason))
        return True

    def dispatch(self) -> list:
        """Place pending work (engine schedulers): batches for LLM engine cores are handed over
        after the dispatch overhead; other batches are timed at once. Where the engines share CPU
        cores (``EngineScheduler.cores``) every engine places its regular work before any places
        background work (``engine_scheduler`` module docstring)."""
        out: list = []
        self._dispatch_at = None
        order = list(self.schedulers.items())
        shared = any(sch.cores is not None for _, sch in order)
        if shared:                    # the oldest waiting work first, regular work before background
            order.sort(key=lambda kv: oldest_pending(kv[1]))
        passes = ((name, sch, bg) for bg in ((False, True) if shared else (True,)) for name, sch in order)
        for name, sch, bg in passes:
            for la in sch.dispatch(self.now, background=bg):
                start = self.now + self._overhead(la.batch)
                if la.pending is None:
                    invs = tuple(p.payload for p in la.batch)
                    for p in la.batch:
                        self.owner[p.payload.key] = (p.qid, p.node_id)
                    if start == self.now:
                        out += sch.instances[la.instance].enqueue(invs, self.now)
                    else:
                        out.append(Enqueue(start, name, la.instance, invs))
                    continue
                result = la.pending.result()      # simulated: resolved at submit
                items = sum(p.size for p in la.batch)
                shared = getattr(sch.instances[la.instance], "shared", None)
                if shared is not None:            # on shared CPU cores: it ends when its work is done there
                    out.append(CoresBatch(start, name, la.instance, la.batch, result, items))
                    continue
                for p, res in zip(la.batch, result.outputs):
                    q = self.queries[p.qid]
                    out.append(NodeDone(start + res.done_s, p.qid, p.node_id, res.value))
                    for i, (off, val) in enumerate(res.pieces):
                        pid = f"{p.node_id}/piece{i}"
                        if pid in q.graph.nodes:
                            out.append(NodeDone(start + off, p.qid, pid, val))
                out.append(InstanceFree(start + result.duration_s, name, la.instance, items))
        return out

    def _overhead(self, batch: Sequence[Pending]) -> float:
        # A decode is issued with its prefill: Ayo's graph scheduler submits a Decoding once its
        # prefilling parent is RUNNING (schedulers/graph_scheduler.py, check_node_ready), and a
        # LlamaIndex LLM call is one vLLM request; so it pays no separate dispatch.
        if all(isinstance(p.payload, Invocation) and p.payload.kind == Kind.DECODING for p in batch):
            return 0.0
        return self.overhead_s


def oldest_pending(sched: EngineScheduler) -> tuple[float, int]:
    """When the oldest work waiting at ``sched`` became ready (and its order), for placing the
    oldest first on shared cores; (inf, 0) when nothing waits."""
    return min(((p.ready_s, p.seq) for p in sched.pending), default=(float("inf"), 0))


class _LLMTarget:
    """Where one simulated LLM instance reports its finished primitives (``SimLLMEngine.attach``)."""

    def __init__(self, state: SimState, engine: str, instance: int) -> None:
        self.s, self.engine, self.instance = state, engine, instance

    def done(self, key: str, value: Any, now: float) -> list:
        qid, nid = self.s.owner.pop(key)
        return self.s.freed(self.engine, self.instance, 1) + self.s.complete(self.s.queries[qid], nid, value)

    def piece(self, key: str, index: int, value: Any, now: float) -> list:
        qid, nid = self.s.owner[key]
        q = self.s.queries[qid]
        pid = f"{nid}/piece{index}"
        return self.s.complete(q, pid, value) if pid in q.graph.nodes else []

    def failed(self, key: str, reason: str, now: float) -> list:
        qid, _ = self.s.owner.pop(key)
        self.s.fail(self.s.queries[qid], reason)
        return self.s.freed(self.engine, self.instance, 1)


class Arrival(Event):
    __slots__ = ("query",)
    priority = P_ARRIVAL

    def __init__(self, query: QueryRun) -> None:
        super().__init__(query.arrival_s)
        self.query = query

    def handle(self, sim: Simulator) -> list:
        return sim.state.start(self.query)


class NodeDone(Event):
    __slots__ = ("qid", "node_id", "value")
    priority = P_DONE

    def __init__(self, time: float, qid: int, node_id: str, value: Any) -> None:
        super().__init__(time)
        self.qid, self.node_id, self.value = qid, node_id, value

    def handle(self, sim: Simulator) -> list:
        s = sim.state
        q = s.queries[self.qid]
        if q.error is not None:           # its query failed meanwhile
            return []
        return s.complete(q, self.node_id, self.value)


class Enqueue(Event):
    """Primitives reach an LLM engine core after the dispatch overhead."""
    __slots__ = ("engine", "instance", "invocations")
    priority = P_DONE

    def __init__(self, time: float, engine: str, instance: int, invocations: tuple) -> None:
        super().__init__(time)
        self.engine, self.instance, self.invocations = engine, instance, invocations

    def handle(self, sim: Simulator) -> list:
        return sim.state.schedulers[self.engine].instances[self.instance].enqueue(self.invocations, self.time)


class InstanceFree(Event):
    __slots__ = ("engine", "instance", "items")
    priority = P_FREE

    def __init__(self, time: float, engine: str, instance: int, items: int) -> None:
        super().__init__(time)
        self.engine, self.instance, self.items = engine, instance, items

    def handle(self, sim: Simulator) -> list:
        return sim.state.freed(self.engine, self.instance, self.items)


class CoresBatch(Event):
    """A non-LLM batch on shared CPU cores (``SimEngine.share_cpu``) starts after the dispatch
    overhead: its time alone is work on the cores (``SharedCores``); when that work is done its
    outputs (every one ends with the batch) and its instance's slot are handed back."""
    __slots__ = ("engine", "instance", "batch", "result", "items")
    priority = P_DONE

    def __init__(self, time: float, engine: str, instance: int, batch: tuple, result: Any, items: int) -> None:
        super().__init__(time)
        self.engine, self.instance, self.batch, self.result, self.items = engine, instance, batch, result, items

    def handle(self, sim: Simulator) -> list:
        inst = sim.state.schedulers[self.engine].instances[self.instance]
        return inst.shared.start(self.time, self.result.duration_s, self._done)

    def _done(self, now: float, sim: Simulator) -> list:
        out: list = []
        for p, res in zip(self.batch, self.result.outputs):
            q = sim.state.queries[p.qid]
            out.append(NodeDone(now, p.qid, p.node_id, res.value))
            for i, (_, val) in enumerate(res.pieces):
                pid = f"{p.node_id}/piece{i}"
                if pid in q.graph.nodes:
                    out.append(NodeDone(now, p.qid, pid, val))
        out.append(InstanceFree(now, self.engine, self.instance, self.items))
        return out


class Dispatch(Event):
    """The engine schedulers place the work that became ready at this instant."""
    __slots__ = ()
    priority = P_DISPATCH

    def handle(self, sim: Simulator) -> list:
        return sim.state.dispatch()


class _Loop(Simulator):
    """The event loop, carrying the runtime's state for the events."""

    def __init__(self, state: SimState) -> None:
        super().__init__()
        self.state = state
        state.clock = self
        for sch in state.schedulers.values():          # engine cores run their iterations here
            for inst in getattr(sch, "instances", ()):
                if getattr(inst, "iterative", False):
                    inst.bind(self)


def run_events(state: SimState, queries: Sequence[QueryRun]) -> list[RequestResult]:
    loop = _Loop(state)
    for q in queries:
        loop.push(Arrival(q))
    loop.run()
    unfinished = [q.qid for q in queries if q.finish_s is None]
    if unfinished:
        raise RuntimeError(f"simulation ended with unfinished queries {unfinished[:5]} (deadlock?)")
    return sorted(state.results, key=lambda r: r.qid)
