"""The controller on real servers: the same control loop as on the simulator, behind the same
:class:`~harness.adaptive.controller.Backend` interface, with instances that are real
OpenAI-compatible server processes (``harness.servers``) and requests replayed in wall-clock time
by ``harness.live``'s open-loop client.

- **start**: one server per new instance (``harness.servers.deploy.specs_for_instances``: a
  catalog checkpoint, ``model_paths``, or one ``stand_in`` checkpoint on CPU), launched into the
  running :class:`~harness.servers.Fleet` (``Fleet.launch``) on a free port without waiting; a
  watcher polls its health endpoint off the event loop, and the instance is ready when it answers
  (its measured start-up replaces the simulator's model). A server that exits first has
  ``failed``: the controller abandons that version.
- **switch**: the replay's task list entry is replaced; a request keeps the routes it started
  with; each call goes to the route's instance with the fewest calls outstanding (ties in turn). **idle**: the replay's router has no call outstanding on it. **stop**: ``Fleet.retire``
  (SIGTERM, SIGKILL after 10 s) in a worker thread.
- **observations**: arrival (due) times of the workload, and the replay's per-request completion
  and failure arrays, so the controller sees what has happened by now.

The initial deployment is launched and waited for before the clock starts (a warm start, as in
the simulator). Prompts are made when each call is sent (a new version may use a workflow whose
calls were not known at the start; exact-length random-token prompts of the server's tokenizer,
as ``harness.live`` makes them before the clock, cost milliseconds here). Times: wall seconds
since the first due time; ``time_scale`` stretches the workload's arrival times as in
``harness.live``.
"""
from __future__ import annotations

import asyncio
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.adaptive.config import ControllerConfig, TaskModel
from harness.adaptive.controller import Controller
from harness.adaptive.sim import DayResult, day_result
from harness.cluster import SimTask, Workload
from harness.live import LiveSettings, _Router, _Run
from harness.servers.deploy import Endpoint, specs_for_instances
from harness.servers.launcher import Fleet, ServerSpec
from selector.deployment import InstanceSpec
from selector.problem import TOL, Cluster


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _DynRouter(_Router):
    """Least outstanding calls over the live instances, for instances added while it runs (an id
    whose endpoint is not, or no longer, connected counts as dead); ties go round in turn, so a
    new replica takes its share even when calls rarely overlap."""

    def __init__(self, endpoints) -> None:
        super().__init__(endpoints)
        self.out = defaultdict(int, self.out)
        self.turn = 0

    def acquire(self, ids: Sequence[str]) -> str | None:
        live = [i for i in ids if i in self.eps and not self.eps[i].dead()]
        if not live:
            return None
        least = min(self.out[i] for i in live)
        ties = [i for i in live if self.out[i] == least]
        pick = ties[self.turn % len(ties)]
        self.turn += 1
        self.out[pick] += 1
        return pick


class _AdaptiveRun(_Run):
    """``harness.live``'s replay with switchable tasks, endpoints that come and go, prompts made
    per call, and the controller running on the same event loop."""

    def __init__(self, tasks, workload, endpoints, settings, backend: LiveBackend, ctl: Controller) -> None:
        self.backend, self.ctl = backend, ctl
        self._sources: dict[Any, Any] = {}
        self._control_done = False
        super().__init__(tasks, workload, endpoints, {}, settings, None)
        self.router = _DynRouter(endpoints)
        for iid in list(endpoints):              # the initial servers' tokenizers, before the clock
            self._source(iid)

    def _prompts(self, sources) -> dict:
        return {}

    def _source(self, iid: str):
        """Exact-length prompts of the server's tokenizer (one per tokenizer, cached), else corpus
        words at one token per word (probing a server here would block the event loop)."""
        from harness.servers.prompts import CorpusPrompts, TokenPrompts, load_tokenizer
        key = self.eps[iid].tokenizer or ""
        if key not in self._sources:
            tok = load_tokenizer(key or None)
            self._sources[key] = TokenPrompts(tok, seed=self.s.seed) if tok is not None else \
                CorpusPrompts(None, seed=self.s.seed)
        return self._sources[key]

    async def _stage_call(self, i: int, k: int, stage: str, c: int, ids, prompt: int, output: int) -> str | None:
        # the prompt is made per call, from the tokenizer of an instance live now (routes change)
        live = [x for x in ids if x in self.eps and not self.eps[x].dead()]
        if not live:
            return f"stage {stage}: no live instance (dead: {', '.join(ids)})"
        self.texts[(i, k, c)] = self._source(live[0]).text(prompt, (i, k, c))
        try:
            return await self._call(i, k, stage, c, ids, prompt, output)
        finally:
            self.texts.pop((i, k, c), None)

    async def go(self) -> None:
        control = asyncio.create_task(self._control())
        try:
            await super().go()
        finally:
            self._control_done = True
            await control

    async def _control(self) -> None:
        while not hasattr(self, "t0"):
            await asyncio.sleep(0.01)
        cfg = self.ctl.cfg
        next_tick = cfg.interval_s
        while not self._control_done:
            await self.backend.watch()
            now = self.now()
            if now >= next_tick:
                self.ctl.tick(now)
                next_tick += cfg.interval_s
            self.ctl.poll(now)
            await asyncio.sleep(self.backend.poll_s)


class LiveBackend:
    """The servers' side of the controller's ``Backend`` protocol (module docstring).
    ``make_spec(instance, port)`` gives a new instance's :class:`ServerSpec`; ``client`` goes to
    each endpoint's ``OpenAIClient`` (``timeout_s``, ``retries``, ...)."""

    def __init__(self, make_spec: Callable[[InstanceSpec, int], ServerSpec], *, log_dir: str | Path,
                 tasks: Sequence[SimTask], poll_s: float = 0.25, tokenizer: str | None = None, **client: Any) -> None:
        self.make_spec, self.poll_s, self.tokenizer, self.client = make_spec, poll_s, tokenizer, client
        self.fleet = Fleet([], log_dir=log_dir)
        self.tasks: list[SimTask] = list(tasks)
        self.endpoints: dict[str, Endpoint] = {}
        self.names: dict[str, str] = {}            # instance id -> server name
        self.pending: set[str] = set()
        self.is_ready: set[str] = set()
        self.run: _AdaptiveRun | None = None
        self.w: Workload | None = None            # the day's workload and its due times (wall s)
        self.due = np.zeros(0)
        self.stopping: list[asyncio.Future] = []

    # ---- Backend ----------------------------------------------------------------------
    def start(self, specs: Sequence[InstanceSpec], ready_at: Sequence[float]) -> None:
        for inst in specs:
            taken = {s.spec.port for s in self.fleet.servers.values()}
            port = free_port()
            while port in taken:                 # a server launched but not yet listening
                port = free_port()
            spec = self.make_spec(inst, port)
            self.fleet.launch(spec)
            self.names[inst.id] = spec.name
            self.pending.add(inst.id)

    def ready(self, iid: str, now: float) -> bool:
        return iid in self.is_ready

    def failed(self, iid: str) -> bool:
        name = self.names.get(iid)
        return iid in self.pending and name in self.fleet.servers and not self.fleet.servers[name].alive()

    def switch(self, k: int, task: SimTask) -> None:
        self.tasks[k] = task
        if self.run is not None:
            self.run.tasks[k] = task

    def idle(self, iid: str) -> bool:
        return self.run is None or self.run.router.out.get(iid, 0) == 0

    def stop(self, iid: str) -> None:
        ep = self.endpoints.pop(iid, None)
        name = self.names.pop(iid)
        self.is_ready.discard(iid)
        self.pending.discard(iid)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.fleet.retire(name)
            return
        self.stopping.append(loop.run_in_executor(None, self.fleet.retire, name))
        if ep is not None:
            self.stopping.append(asyncio.ensure_future(ep.client.aclose()))

    def arrivals(self, k: int, t0: float, t1: float) -> int:
        m = self.w.task == k
        return int(((self.due >= t0) & (self.due < t1) & m).sum())

    def outcomes(self, k: int, t0: float, t1: float, now: float, slo_s: float) -> tuple[int, int]:
        r = self.run
        ix = np.flatnonzero((self.due >= t0) & (self.due < t1) & (self.w.task == k))
        if r is None or not len(ix):
            return 0, 0
        done, failed, due = r.done_s[ix], r.failed[ix], self.due[ix]
        finished = ~np.isnan(done)
        late = np.where(finished, done - due > slo_s + TOL, now - due > slo_s + TOL)
        judged = failed | finished | (now - due > slo_s + TOL)
        return int(judged.sum()), int((failed | late).sum())

    def in_flight(self, k: int, t0: float, t1: float) -> int:
        r = self.run
        if r is None:
            return 0
        ix = np.flatnonzero((self.due >= t0) & (self.due < t1) & (self.w.task == k))
        return int(np.isnan(r.end_s[ix]).sum())

    # ---- servers ----------------------------------------------------------------------
    def _connect(self, iid: str) -> None:
        from harness.servers.client import OpenAIClient
        spec = self.fleet.servers[self.names[iid]].spec
        cl = OpenAIClient(base_url=spec.base_url, model=spec.request_model, name=spec.name, backend=spec.backend,
                          **self.client)
        tok = "char" if spec.backend == "torch" else (self.tokenizer or spec.model)
        self.endpoints[iid] = Endpoint(cl, spec.backend, self.fleet.servers[spec.name].alive, tok)
        self.pending.discard(iid)
        self.is_ready.add(iid)

    async def watch(self) -> None:
        """Check the health of the servers still starting (off the event loop)."""
        for iid in sorted(self.pending):
            proc = self.fleet.servers.get(self.names.get(iid, ""))
            if proc is not None and proc.alive() and await asyncio.to_thread(proc.healthy):
                self._connect(iid)

    def wait_all(self, timeout_s: float) -> None:
        """Block until every launched server answers (the warm start, before the clock)."""
        deadline = time.monotonic() + timeout_s
        for iid in sorted(self.pending):
            self.fleet.servers[self.names[iid]].wait_healthy(deadline)
            self._connect(iid)


def run_live_day(tasks: Sequence[TaskModel], cluster: Cluster, selector: Any, workload: Workload, *, gpu: str,
                 initial_rates: Sequence[float], end_s: float, config: ControllerConfig = ControllerConfig(),
                 log_dir: str | Path, settings: LiveSettings = LiveSettings(), stand_in: str | None = None,
                 model_paths: dict[str, str] | None = None, backend: str = "transformers",
                 spec_args: dict[str, Any] | None = None, client: dict[str, Any] | None = None,
                 startup_timeout_s: float = 300.0, price_per_gb_s: float = 1e-6) -> DayResult:
    """One day on real servers (module docstring); the result has the simulator's form
    (``harness.adaptive.sim.DayResult``) in wall seconds, plus the replay's call counts."""
    def make_spec(inst: InstanceSpec, port: int) -> ServerSpec:
        return specs_for_instances([inst], stand_in=stand_in, model_paths=model_paths, backend=backend,
                                   base_port=port, startup_timeout_s=startup_timeout_s,
                                   **(spec_args or {}))[inst.id]

    t0 = time.perf_counter()
    unplaced = [SimTask(t.name, t.problem.task.latency_slo_s, (), placed=False) for t in tasks]
    back = LiveBackend(make_spec, log_dir=log_dir, tasks=unplaced, tokenizer=stand_in,
                       **({"timeout_s": 60.0, "retries": 1} | (client or {})))
    back.w, back.due = workload, workload.arrival_s * settings.time_scale
    ctl = Controller(tasks, cluster, selector, back, gpu=gpu, config=config)
    try:
        ctl.deploy(initial_rates, now=0.0, warm=True)
        back.wait_all(startup_timeout_s)
        run = _AdaptiveRun(back.tasks, workload, back.endpoints, settings, back, ctl)
        back.run = run
        from harness.servers.calls import run_sync
        run_sync(_with_stops(run, back))
    finally:
        back.fleet.stop()
    due_wl = replace(workload, arrival_s=back.due)
    res = day_result(ctl, due_wl, run.done_s, run.failed, run.acc_ok, end_s=end_s * settings.time_scale,
                     price_per_gb_s=price_per_gb_s,
                     extra={"wall_s": time.perf_counter() - t0, "calls": len(run.calls),
                            "calls_failed": sum(c["error"] is not None for c in run.calls),
                            "dispatch_lag_max_s": run.lag_max_s})
    return replace(res, summary={**res.summary, "calls_by_instance": _count(run.calls)})


async def _with_stops(run: _AdaptiveRun, back: LiveBackend) -> None:
    await run.go()
    if back.stopping:
        await asyncio.gather(*back.stopping, return_exceptions=True)


def _count(calls: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in calls:
        out[c["instance"]] = out.get(c["instance"], 0) + 1
    return out
