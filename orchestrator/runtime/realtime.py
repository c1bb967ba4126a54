"""Wall-clock runtime: the orchestrator's graph scheduler and engine schedulers driving real
engines (or simulated ones, slept in real time) on threads.

Nothing of the scheduling logic is rewritten here. Per query, :class:`~orchestrator.runtime.sim.SimState`
(its ``start`` / ``ready`` / ``complete``: in-degrees, the per-query store, engine-free
primitives inline) is the graph scheduler; per engine, an
:class:`~orchestrator.runtime.engine_scheduler.EngineScheduler` forms batches with the same
policies, balancers and KV affinity; :func:`~orchestrator.runtime.api.prepare` sets up graphs
and content as for the simulation. What changes is time: ``now`` is the wall clock, each
launched batch's ``PendingBatch`` is awaited on its own thread (the simulation takes its result
at once), and completions, streamed JSON pieces and failures arrive as events on a queue that
one loop thread handles, so all scheduler state is touched by one thread at a time.

An engine batch that raises fails the queries in it (each gets a :class:`RequestResult` whose
``error`` is the reason; ``RealtimeReport.failed`` lists them); an instance whose server is gone
(an :class:`~orchestrator.engines.base.EngineDeadError`, or an instance or client whose ``dead``
attribute is set) gets
no more work, and when an engine has no live instance left its waiting queries fail too. Every
finished query's result is kept.
"""
from __future__ import annotations

import heapq
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from orchestrator.batching import BatchingPolicy, Pending
from orchestrator.engines.base import Engine, EngineDeadError
from orchestrator.passes import GraphCache
from orchestrator.rewrite import PassContext
from orchestrator.runtime.api import prepare
from orchestrator.runtime.engine_scheduler import CoreBudget, EngineScheduler, Launch
from orchestrator.runtime.sim import QueryRun, RequestResult, SimState, oldest_pending
from orchestrator.schemes import Scheme
from orchestrator.template import QueryConfig, Template

Sink = Callable[[tuple], None]


class AsyncEngineScheduler(EngineScheduler):
    """The engine scheduler for the wall-clock runtime: every instance gets whole batches through
    ``submit`` (no runtime drives iterations) and dead instances are taken out of rotation."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(drives_iterations=False, **kw)
        self.dead: set[int] = set()

    def _room(self, i: int) -> int:
        return 0 if i in self.dead else super()._room(i)


class EngineHost:
    """One engine: its scheduler and instances, thread-safe. ``enqueue`` buffers; ``dispatch``
    starts batches; each batch is awaited on its own thread, which reports to ``sink``:
    ``("done", qid, node_id, value)``, ``("piece", qid, node_id, i, value)``,
    ``("failed", qids, reason)``, ``("dead", instance_name)``, and on shared cores
    ``("freed", engine)`` when a batch's core is free. ``time_scale`` stretches the
    modelled durations of simulated instances (real ones take the time they take)."""

    def __init__(self, *, name: str, instances: Sequence[Engine], policy: BatchingPolicy,
                 max_batch: int | None, sink: Sink, clock: Callable[[], float], time_scale: float = 1.0) -> None:
        self.name, self.sink, self.clock, self.time_scale = name, sink, clock, time_scale
        self.sched = AsyncEngineScheduler(name=name, instances=instances, policy=policy, max_batch=max_batch,
                                          on_piece=self._piece)
        self._lock = threading.RLock()
        self._keys: dict[str, tuple[int, str]] = {}
        self.calls: list[dict] = []       # one per invocation run (``RealtimeReport.calls``)

    def max_batch(self) -> int:
        return self.sched.max_batch

    def idle(self) -> bool:
        """Nothing queued and nothing running on any instance."""
        with self._lock:
            return not self.sched.pending and not any(self.sched.inflight)

    def enqueue(self, p: Pending) -> None:
        with self._lock:
            self.sched.enqueue(p)

    def drop(self, qids: set[int]) -> None:
        with self._lock:
            self.sched.pending = [p for p in self.sched.pending if p.qid not in qids]

    def promote(self, key: str, now_s: float) -> list:
        """Partial prefill ``key`` is critical now (the graph scheduler's ``promote_partial``):
        still queued, it is dispatched as regular work; launched, it runs on as it is (a running
        batch is not re-prioritised in real time). Causes no simulator events."""
        with self._lock:
            if any(p.payload.key == key for p in self.sched.pending):
                self.sched.critical.add(key)
        return []

    def dispatch(self, background: bool = True) -> None:
        """Start what can start (``background`` False: regular work only, ``EngineScheduler.dispatch``)."""
        with self._lock:
            if self.sched.pending and len(self.sched.dead) == len(self.sched.instances):
                self._fail_pending()
                return
            now = self.clock()
            for st in self.sched.dispatch(now, background=background):
                for p in st.batch:
                    self._keys[p.payload.key] = (p.qid, p.node_id)
                threading.Thread(target=self._await, args=(st, now), daemon=True,
                                 name=f"await-{self.name}").start()

    def _piece(self, key: str, i: int, value: Any) -> None:
        qid, nid = self._keys[key]
        self.sink(("piece", qid, nid, i, value))

    def _await(self, st: Launch, dispatch_s: float) -> None:
        inst = self.sched.instances[st.instance]
        t0 = time.perf_counter()
        try:
            res = st.pending.result()
            if not hasattr(st.pending, "add_done_callback"):   # simulated: live its modelled time
                self._replay(st, res, t0)
            else:
                self._record(st, res, dispatch_s)
                for p, out in zip(st.batch, res.outputs):
                    self.sink(("done", p.qid, p.node_id, out.value))
        except Exception as exc:  # noqa: BLE001 - any engine failure fails its queries, not the run
            self.sink(("failed", sorted({p.qid for p in st.batch}), f"{inst.name}: {type(exc).__name__}: {exc}"))
            client = getattr(inst, "client", None)
            if isinstance(exc, EngineDeadError) or getattr(inst, "dead", False) or getattr(client, "dead", False):
                self._mark_dead(st.instance)
        finally:
            with self._lock:
                for p in st.batch:
                    self._keys.pop(p.payload.key, None)
                self.sched.free(st.instance, sum(p.size for p in st.batch))
            if self.sched.cores is None:
                self.dispatch()
            else:                   # a core is free: the loop places work on every host (_WallState)
                self.sink(("freed", self.name))

    def _record(self, st: Launch, res: Any, dispatch_s: float) -> None:
        """One row per invocation of a real batch: when it was ready and dispatched, when its batch
        started and ended on the instance (its clock), the batch's thread CPU time."""
        end = self.clock() if res.ended_at is None else res.ended_at - time.perf_counter() + self.clock()
        for p in st.batch:
            self.calls.append({"engine": self.name, "instance": st.instance, "qid": p.qid, "node_id": p.node_id,
                               "kind": p.payload.kind.name, "batch": len(st.batch), "ready_s": p.ready_s,
                               "dispatch_s": dispatch_s, "start_s": end - res.duration_s, "end_s": end,
                               "cpu_s": res.cpu_s})

    def _replay(self, st: Launch, res: Any, t0: float) -> None:
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
    """``outcomes``: one :class:`RequestResult` per query in query order, finished or failed
    (latencies in wall-clock seconds); ``dead_instances``: engine instances that died;
    ``wall_s``: the whole run; ``batches``: per engine, batches run per instance; ``calls``: per
    invocation a real engine ran (in-process hosts), its ``engine``, ``instance``, ``qid``,
    ``node_id``, ``kind``, ``batch`` (invocations in its batch), and on the run's clock ``ready_s``
    (enqueued), ``dispatch_s`` (its batch launched), ``start_s`` / ``end_s`` (the batch on the
    instance), ``done_s`` (the graph scheduler completed the node), and ``cpu_s`` (the batch's
    thread CPU time): dispatch and hand-back costs apart from compute; ``idle_cut_s``: the idle
    time ``run_realtime``'s ``idle_gap_s`` cut (the outcomes' arrivals are on the cut clock)."""
    outcomes: list[RequestResult]
    dead_instances: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    batches: dict[str, list[int]] = field(default_factory=dict)
    calls: list[dict] = field(default_factory=list)
    idle_cut_s: float = 0.0

    @property
    def results(self) -> list[RequestResult]:
        """The finished queries."""
        return [r for r in self.outcomes if r.ok]

    @property
    def failed(self) -> dict[int, str]:
        """Query id -> reason for the failed queries, in the order they failed."""
        gone = sorted((r for r in self.outcomes if not r.ok), key=lambda r: (r.finish_s, r.qid))
        return {r.qid: r.error for r in gone}


class _WallState(SimState):
    """The graph scheduler with the wall clock; engine schedulers are hosts fed by events."""

    cores_shared = False

    def dispatch(self) -> list:
        """Every host starts what it can; over shared CPU cores (``run_realtime``'s ``cpu_cores``)
        every host first starts its regular work, then background work where a core is free."""
        hosts = list(self.schedulers.values())
        if self.cores_shared:            # the oldest waiting work gets the next free core
            hosts.sort(key=lambda h: oldest_pending(h.sched))
            for host in hosts:
                host.dispatch(background=False)
        for host in hosts:
            host.dispatch()
        return []


HostFactory = Callable[..., Any]


def run_realtime(template: Template, query_configs: Sequence[QueryConfig], arrivals_s: Sequence[float],
                 engines: Mapping[str, Sequence[Engine]], *, scheme: Scheme | str = "teola",
                 batching: BatchingPolicy | None = None, seed: int = 0,
                 payloads: Sequence[Mapping[str, Any]] | None = None, cache: GraphCache | None = None,
                 time_scale: float = 1.0, timeout_s: float = 600.0,
                 host_factory: HostFactory | None = None, cpu_cores: int | None = None,
                 idle_gap_s: float | None = None) -> RealtimeReport:
    """Run queries like :func:`orchestrator.runtime.simulate`, in real time: query ``i`` arrives
    ``arrivals_s[i]`` seconds after the start. Same graphs (passes by ``scheme``), same engine
    scheduling. ``host_factory(name=, instances=, policy=, max_batch=, sink=, clock=,
    time_scale=)`` makes each engine's host (default :class:`EngineHost`, in process; the Ray
    runtime passes one that runs it in an actor). Queries still running after ``timeout_s``
    count as failed. ``cpu_cores``: the engines (in-process hosts only) share that many CPU cores,
    so an idle instance starts work only while one is free (``engine_scheduler.CoreBudget``);
    None: each instance has its own. ``idle_gap_s`` (in-process hosts only): where every started
    query has finished, every engine is idle and the next arrival is further than this away, the
    wait is cut to ``idle_gap_s`` and every later arrival moves as much earlier, so each query still
    finds what it would have (idle engines, or the same overlap with the queries after it) while an
    idle machine's waiting is not spent; None: arrivals as given."""
    prep = prepare(template, query_configs, arrivals_s, scheme=scheme, batching=batching, seed=seed,
                   payloads=payloads, cache=cache)
    factory = host_factory or EngineHost
    events: queue.Queue = queue.Queue()
    start = [time.perf_counter()]
    clock = lambda: time.perf_counter() - start[0]  # noqa: E731
    hosts = {name: factory(name=name, instances=inst, policy=prep.policy(), max_batch=None,
                           sink=events.put, clock=clock, time_scale=time_scale)
             for name, inst in engines.items()}
    in_process = all(isinstance(h, EngineHost) for h in hosts.values())
    if cpu_cores is not None and not in_process:
        raise ValueError("cpu_cores: only engines hosted in this process can share its cores")
    if idle_gap_s is not None and not in_process:
        raise ValueError("idle_gap_s: only engines hosted in this process report when they are idle")
    # a host's max batch is its instances' (asked of the actor where it runs in one)
    runs = prep.runs(PassContext({n: h.max_batch() for n, h in hosts.items()}))
    state = _WallState(schedulers=hosts, dispatch_overhead_s=0.0)
    if cpu_cores is not None:
        CoreBudget(cpu_cores, [h.sched for h in hosts.values()])
        state.cores_shared = True
    report = RealtimeReport(outcomes=state.results)
    start[0] = time.perf_counter()          # time zero: hosts built, graphs optimised
    _loop(state, runs, events, clock, report, hosts, timeout_s, idle_gap_s)
    report.wall_s = clock()
    report.outcomes.sort(key=lambda r: r.qid)
    report.batches = {n: list(h.sched.batches) if hasattr(h, "sched") else [] for n, h in hosts.items()}
    report.calls = [dict(c, done_s=state.queries[c["qid"]].done_s.get(c["node_id"], float("nan")))
                    for h in hosts.values() if isinstance(h, EngineHost) for c in h.calls]
    return report


def drain(q: queue.Queue, timeout_s: float) -> list:
    """Wait up to ``timeout_s`` for an item of ``q``, then take every item already there."""
    out = []
    try:
        out.append(q.get(timeout=timeout_s))
        while True:
            out.append(q.get_nowait())
    except queue.Empty:
        return out


def _loop(state: _WallState, runs: list[QueryRun], events: queue.Queue, clock: Callable[[], float],
          report: RealtimeReport, hosts: Mapping[str, Any], timeout_s: float,
          idle_gap_s: float | None = None) -> None:
    arrivals = [(q.arrival_s, q.qid) for q in runs]
    heapq.heapify(arrivals)
    by_id = {q.qid: q for q in runs}
    open_q = set(by_id)
    while open_q:
        now = clock()
        poll = timeout_s            # an idle cut waits for the last batch's host to free its instance
        if idle_gap_s is not None and arrivals and not open_q & state.queries.keys():
            if all(h.idle() for h in hosts.values()):
                report.idle_cut_s += _cut_idle(arrivals, by_id, arrivals[0][0] - now - idle_gap_s)
            else:
                poll = 0.002
        if now > timeout_s:
            state.now = now
            for qid in sorted(open_q):
                state.fail(by_id[qid], f"timed out after {timeout_s} s")
            break
        wait = min(arrivals[0][0] - now, timeout_s - now, poll) if arrivals else timeout_s - now
        batch = drain(events, max(0.0, wait))
        while arrivals and arrivals[0][0] <= clock():
            _, qid = heapq.heappop(arrivals)
            state.now = clock()
            state.start(by_id[qid])
        for ev in batch:
            state.now = clock()
            _handle(state, ev, report, hosts)
        for q in list(open_q):
            if by_id[q].finish_s is not None:       # finished or failed
                open_q.discard(q)
        state.dispatch()


def _cut_idle(arrivals: list[tuple[float, int]], by_id: Mapping[int, QueryRun], cut_s: float) -> float:
    """Move every pending arrival ``cut_s`` earlier (none if ``cut_s`` <= 0); the heap keeps its order."""
    if cut_s <= 0:
        return 0.0
    arrivals[:] = [(t - cut_s, qid) for t, qid in arrivals]
    for _, qid in arrivals:
        by_id[qid].arrival_s -= cut_s
    return cut_s


def _handle(state: _WallState, ev: tuple, report: RealtimeReport, hosts: Mapping[str, Any]) -> None:
    kind = ev[0]
    if kind == "freed":             # the loop's dispatch after its events places work on the freed core
        return
    if kind == "dead":
        report.dead_instances.append(ev[1])
        return
    if kind == "failed":
        new = {q for q in ev[1] if state.fail(state.queries[q], ev[2])}
        for h in hosts.values():
            h.drop(new)
        return
    q = state.queries[ev[1]]
    if q.error is not None:
        return
    if kind == "piece":
        pid = f"{ev[2]}/piece{ev[3]}"
        if pid in q.graph.nodes and pid not in q.store:
            state.complete(q, pid, ev[4])
    elif kind == "done":
        state.complete(q, ev[2], ev[3])
