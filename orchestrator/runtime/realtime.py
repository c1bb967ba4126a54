"""Wall-clock runtime: the orchestrator's graph scheduler and engine schedulers driving real
engines (or simulated ones, slept in real time) on threads.

Nothing of the scheduling logic is rewritten here. Per query, :class:`~orchestrator.runtime.sim.SimState`
(its ``start`` / ``ready`` / ``complete``: in-degrees, the per-query store, engine-free
primitives inline) is the graph scheduler; per engine, an
:class:`~orchestrator.runtime.engine_scheduler.EngineScheduler` forms batches with the same
policies, balancers and KV affinity. What changes is time: ``now`` is the wall clock, a launch
does not wait for its batch (``_launch`` is overridden to keep the engine's ``PendingBatch``
instead of its result), and completions, streamed JSON pieces and failures arrive as events on
a queue that one loop thread handles, so all scheduler state is touched by one thread at a time.

An engine batch that raises fails the queries in it (kept in ``RealtimeReport.failed`` with the
reason); an instance whose server is gone (:class:`EngineDead`-like errors, ``dead`` attribute
or a class named ``EngineDeadError``) gets no more work, and when an engine has no live instance
left its waiting queries fail too. Every finished query's result is kept.
"""
from __future__ import annotations

import heapq
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from orchestrator.batching import BatchingPolicy, Pending
from orchestrator.engines.base import Engine, Invocation
from orchestrator.passes import GraphCache, passes_named
from orchestrator.primitives import Kind, PREFILL_KINDS
from orchestrator.runtime.api import make_payload, pass_context
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.sim import QueryRun, RequestResult, SimState
from orchestrator.schemes import Scheme, get_scheme
from orchestrator.template import QueryConfig, Template

Sink = Callable[[tuple], None]


@dataclass(frozen=True)
class Started:
    instance: int
    batch: tuple[Pending, ...]
    pending: Any            # the engine's PendingBatch


class AsyncEngineScheduler(EngineScheduler):
    """The engine scheduler with a non-blocking launch and dead instances taken out of rotation."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.dead: set[int] = set()
        self.on_piece: Callable[[str, int, Any], None] | None = None

    def _room(self, i: int) -> int:
        return 0 if i in self.dead else super()._room(i)

    def _launch(self, i: int, batch: list[Pending], now_s: float) -> Started:  # type: ignore[override]
        # same bookkeeping as EngineScheduler._launch, without waiting for the result
        chosen = {id(p) for p in batch}
        self.pending = [p for p in self.pending if id(p) not in chosen]
        for p in batch:
            inv: Invocation = p.payload
            if inv.kind in PREFILL_KINDS:
                self._affinity[inv.kv_key] = i
            elif inv.kind == Kind.DECODING:
                self._affinity.pop(inv.kv_key, None)
        inst = self.instances[i]
        kw: dict[str, Any] = {"now_s": now_s}
        if getattr(inst, "streams", False) and self.on_piece is not None:
            kw["on_piece"] = self.on_piece
        pending = inst.submit([p.payload for p in batch], **kw)
        self.inflight[i] += sum(p.size for p in batch)
        self.executed[i] += sum(p.size for p in batch)
        self.batches[i] += 1
        return Started(i, tuple(batch), pending)


def _is_dead_error(exc: BaseException) -> bool:
    return any(c.__name__ == "EngineDeadError" for c in type(exc).__mro__)


class EngineHost:
    """One engine: its scheduler and instances, thread-safe. ``enqueue`` buffers; ``dispatch``
    starts batches; each batch is awaited on its own thread, which reports to ``sink``:
    ``("done", qid, node_id, value)``, ``("piece", qid, node_id, i, value)``,
    ``("failed", qids, reason)``, ``("dead", instance_name)``. ``time_scale`` stretches the
    modelled durations of simulated instances (real ones take the time they take)."""

    def __init__(self, *, name: str, instances: Sequence[Engine], policy: BatchingPolicy,
                 max_batch: int | None, sink: Sink, clock: Callable[[], float], time_scale: float = 1.0) -> None:
        self.name, self.sink, self.clock, self.time_scale = name, sink, clock, time_scale
        self.sched = AsyncEngineScheduler(name=name, instances=instances, policy=policy, max_batch=max_batch)
        self.sched.on_piece = self._piece
        self._lock = threading.RLock()
        self._keys: dict[str, tuple[int, str]] = {}

    def max_batch(self) -> int:
        return self.sched.max_batch

    def enqueue(self, p: Pending) -> None:
        with self._lock:
            self.sched.enqueue(p)

    def drop(self, qids: set[int]) -> None:
        with self._lock:
            self.sched.pending = [p for p in self.sched.pending if p.qid not in qids]

    def dispatch(self) -> None:
        with self._lock:
            if self.sched.pending and len(self.sched.dead) == len(self.sched.instances):
                self._fail_pending()
                return
            for st in self.sched.dispatch(self.clock()):
                for p in st.batch:
                    self._keys[p.payload.key] = (p.qid, p.node_id)
                threading.Thread(target=self._await, args=(st,), daemon=True,
                                 name=f"await-{self.name}").start()

    def _piece(self, key: str, i: int, value: Any) -> None:
        qid, nid = self._keys[key]
        self.sink(("piece", qid, nid, i, value))

    def _await(self, st: Started) -> None:
        inst = self.sched.instances[st.instance]
        t0 = time.perf_counter()
        try:
            res = st.pending.result()
            if not hasattr(st.pending, "add_done_callback"):   # simulated: live its modelled time
                self._replay(st, res, t0)
            else:
                for p, out in zip(st.batch, res.outputs):
                    self.sink(("done", p.qid, p.node_id, out.value))
        except Exception as exc:  # noqa: BLE001 - any engine failure fails its queries, not the run
            self.sink(("failed", sorted({p.qid for p in st.batch}), f"{inst.name}: {type(exc).__name__}: {exc}"))
            if _is_dead_error(exc) or getattr(inst, "dead", False) or getattr(getattr(inst, "client", None), "dead", False):
                self._mark_dead(st.instance)
        finally:
            with self._lock:
                for p in st.batch:
                    self._keys.pop(p.payload.key, None)
                self.sched.free(st.instance, sum(p.size for p in st.batch))
            self.dispatch()

    def _replay(self, st: Started, res: Any, t0: float) -> None:
        events = []
        for p, out in zip(st.batch, res.outputs):
            for i, (off, val) in enumerate(out.pieces):
                events.append((off, 0, ("piece", p.qid, p.node_id, i, val)))
            events.append((out.done_s, 1, ("done", p.qid, p.node_id, out.value)))
        for off, _, ev in sorted(events, key=lambda e: (e[0], e[1])):
            time.sleep(max(0.0, t0 + off * self.time_scale - time.perf_counter()))
            self.sink(ev)
        time.sleep(max(0.0, t0 + res.duration_s * self.time_scale - time.perf_counter()))

    def _mark_dead(self, i: int) -> None:
        with self._lock:
            self.sched.dead.add(i)
            self.sink(("dead", self.sched.instances[i].name))
            if len(self.sched.dead) == len(self.sched.instances) and self.sched.pending:
                self._fail_pending()

    def _fail_pending(self) -> None:
        qids = sorted({p.qid for p in self.sched.pending})
        self.sched.pending = []
        self.sink(("failed", qids, f"engine {self.name!r}: no live instance left"))


@dataclass
class RealtimeReport:
    """``results``: finished queries (latencies in wall-clock seconds); ``failed``: query id ->
    reason; ``dead_instances``: engine instances that died; ``wall_s``: the whole run."""
    results: list[RequestResult]
    failed: dict[int, str] = field(default_factory=dict)
    dead_instances: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    batches: dict[str, list[int]] = field(default_factory=dict)


class _WallState(SimState):
    """The graph scheduler with the wall clock; engine schedulers are hosts fed by events."""

    def dispatch(self) -> list:
        for host in self.schedulers.values():
            host.dispatch()
        return []


HostFactory = Callable[..., Any]


def run_realtime(template: Template, query_configs: Sequence[QueryConfig], arrivals_s: Sequence[float],
                 engines: Mapping[str, Sequence[Engine]], *, scheme: Scheme | str = "teola",
                 batching: BatchingPolicy | None = None, seed: int = 0,
                 payloads: Sequence[Mapping[str, Any]] | None = None, cache: GraphCache | None = None,
                 time_scale: float = 1.0, timeout_s: float = 600.0,
                 host_factory: HostFactory | None = None) -> RealtimeReport:
    """Run queries like :func:`orchestrator.runtime.simulate`, in real time: query ``i`` arrives
    ``arrivals_s[i]`` seconds after the start. Same graphs (passes by ``scheme``), same engine
    scheduling. ``host_factory(name=, instances=, policy=, max_batch=, sink=, clock=,
    time_scale=)`` makes each engine's host (default :class:`EngineHost`, in process; the Ray
    runtime passes one that runs it in an actor). Queries still running after ``timeout_s``
    count as failed."""
    if len(query_configs) != len(arrivals_s):
        raise ValueError(f"{len(query_configs)} configs but {len(arrivals_s)} arrivals")
    sch = get_scheme(scheme) if isinstance(scheme, str) else scheme
    cache = cache or GraphCache()
    factory = host_factory or EngineHost
    events: queue.Queue = queue.Queue()
    start = [time.perf_counter()]
    clock = lambda: time.perf_counter() - start[0]  # noqa: E731
    hosts = {name: factory(name=name, instances=inst, policy=batching or sch.policy(), max_batch=None,
                           sink=events.put, clock=clock, time_scale=time_scale)
             for name, inst in engines.items()}
    ctx = pass_context(engines) if host_factory is None else \
        type(pass_context({}))({n: h.max_batch() for n, h in hosts.items()})
    passes = passes_named(sch.passes)
    if payloads is None:
        rng = np.random.default_rng(seed)
        payloads = [make_payload(c, rng) for c in query_configs]
    graphs = [cache.get(template, c, passes, ctx) for c in query_configs]
    needed = {n.engine for g in graphs for n in g.nodes.values() if n.engine is not None}
    if needed - set(engines):
        raise KeyError(f"template {template.name!r} needs engines {sorted(needed - set(engines))}; given: {sorted(engines)}")
    state = _WallState(schedulers=hosts, dispatch_overhead_s=0.0)
    runs = [QueryRun(i, g, float(t), p) for i, (g, t, p) in enumerate(zip(graphs, arrivals_s, payloads))]
    report = RealtimeReport(results=state.results)
    start[0] = time.perf_counter()          # time zero: hosts built, graphs optimised
    _loop(state, runs, events, clock, report, hosts, timeout_s)
    report.wall_s = clock()
    report.results.sort(key=lambda r: r.qid)
    report.batches = {n: list(getattr(h, "sched", None).batches) if hasattr(h, "sched") else [] for n, h in hosts.items()}
    return report


def _loop(state: _WallState, runs: list[QueryRun], events: queue.Queue, clock: Callable[[], float],
          report: RealtimeReport, hosts: Mapping[str, Any], timeout_s: float) -> None:
    arrivals = [(q.arrival_s, q.qid) for q in runs]
    heapq.heapify(arrivals)
    by_id = {q.qid: q for q in runs}
    open_q = set(by_id)
    while open_q:
        now = clock()
        if now > timeout_s:
            for qid in open_q:
                report.failed[qid] = f"timed out after {timeout_s} s"
            break
        wait = min(arrivals[0][0] - now, timeout_s - now) if arrivals else timeout_s - now
        batch = []
        try:
            batch.append(events.get(timeout=max(0.0, wait)))
            while True:
                batch.append(events.get_nowait())
        except queue.Empty:
            pass
        while arrivals and arrivals[0][0] <= clock():
            _, qid = heapq.heappop(arrivals)
            state.now = clock()
            state.start(by_id[qid])
        for ev in batch:
            state.now = clock()
            _handle(state, ev, report, hosts)
        for q in list(open_q):
            if q in report.failed or by_id[q].finish_s is not None:
                open_q.discard(q)
        state.dispatch()


def _handle(state: _WallState, ev: tuple, report: RealtimeReport, hosts: Mapping[str, Any]) -> None:
    kind = ev[0]
    if kind == "dead":
        report.dead_instances.append(ev[1])
        return
    if kind == "failed":
        new = {q for q in ev[1] if q not in report.failed and state.queries[q].finish_s is None}
        for q in new:
            report.failed[q] = ev[2]
        for h in hosts.values():
            h.drop(new)
        return
    qid = ev[1]
    if qid in report.failed:
        return
    q = state.queries[qid]
    if kind == "piece":
        pid = f"{ev[2]}/piece{ev[3]}"
        if pid in q.graph.nodes and pid not in q.store:
            state.complete(q, pid, ev[4])
    elif kind == "done":
        state.complete(q, ev[2], ev[3])
