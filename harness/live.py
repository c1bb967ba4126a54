"""The ``servers`` backend: replay a workload on real OpenAI-compatible servers, one per deployed
instance, and report the same cell metrics as the simulator (``harness.replay.cell_metrics``).

The request flow is the simulator's (``harness.cluster``): a workflow request visits its task's
stages in order, a stage with ``calls = c`` makes ``c`` calls one after another, each call goes to
one of the stage's instances picked by least outstanding calls (ties: the first listed), and a
stage with several routes (RouteLLM's weak and strong models) first picks one by the request's
difficulty and the routes' shares.
Call sizes are the simulator's: ``max(1, round(stage tokens x the request's scale))`` (then
capped by ``max_prompt_tokens`` / ``max_output_tokens`` when set). A prompt of ``n`` tokens is a
repeated word whose tokens per repetition were measured on each server before the clock starts
(two probes, off the clock, which also warm the server up); the server's reported ``usage`` is
recorded per call. Outputs are asked to be exactly ``n`` tokens (EOS ignored) where the backend
supports it, otherwise what the server returned is recorded.

Time: request ``r`` is due at ``arrival_s[r] x time_scale`` wall seconds after the start; its
latency runs from that due time (so a dispatcher falling behind counts against the system, as an
open-loop load generator should) to the end of its last call. One thread per request in flight
(at most ``max_concurrency``); a per-call timeout (``OpenAIClient.timeout_s``, with its retries).

Failures: a call that errors (HTTP error, timeout after retries, server unreachable) fails its
request, which stops there. A server that died (its process exited, or its client declared it
dead after the retries) gets no more calls; a stage whose instances are all dead fails the
requests reaching it. Every finished request is kept; ``summary["dead_instances"]`` names them.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from harness.cluster import SimTask, Workload
from harness.replay import ReplayResult, cell_metrics, sim_tasks
from harness.servers.client import EngineDeadError, ServerError, exact_output_body
from harness.servers.deploy import Endpoint
from selector.deployment import Deployment
from selector.problem import Problem

UNIT = " the"           # the repeated word of a synthetic prompt
PROBE_UNITS = (16, 64)  # calibration prompts (repetitions)


@dataclass(frozen=True)
class LiveSettings:
    """``time_scale`` multiplies arrival times (> 1: lighter load); ``max_concurrency``: requests
    in flight at once (one thread each); caps apply after the simulator's scaling (None: none)."""
    time_scale: float = 1.0
    max_concurrency: int = 64
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None


@dataclass(frozen=True)
class LiveReplayResult(ReplayResult):
    """``summary`` and ``per_task`` as the simulator's; plus one row per request and per call."""
    requests: list[dict] = ()
    calls: list[dict] = ()


class _Prompts:
    """Prompt text of ``n`` tokens on one server: ``tokens(k units) = a*k + b``, fitted on two probes."""

    def __init__(self, ep: Endpoint) -> None:
        got = [ep.client.completion(UNIT * k, max_tokens=1).prompt_tokens for k in PROBE_UNITS]
        if None in got or got[1] <= got[0]:
            self.a, self.b = 1.0, 0.0          # no usage reported: assume one token per unit
        else:
            self.a = (got[1] - got[0]) / (PROBE_UNITS[1] - PROBE_UNITS[0])
            self.b = got[0] - self.a * PROBE_UNITS[0]

    def text(self, n: int) -> str:
        return UNIT * max(1, round((n - self.b) / self.a))


class _Router:
    """Least outstanding calls over the live instances of a group; ties: the first listed."""

    def __init__(self, endpoints: Mapping[str, Endpoint]) -> None:
        self.eps = endpoints
        self.out = {k: 0 for k in endpoints}
        self.lock = threading.Lock()

    def acquire(self, ids: Sequence[str]) -> str | None:
        with self.lock:
            live = [i for i in ids if not self.eps[i].dead()]
            if not live:
                return None
            pick = min(live, key=self.out.__getitem__)
            self.out[pick] += 1
            return pick

    def release(self, iid: str) -> None:
        with self.lock:
            self.out[iid] -= 1


def replay_live(problems: Sequence[Problem], deps: Sequence[Deployment | None],
                tokens: Sequence[dict[str, list[tuple[int, int]]]], workload: Workload, *,
                endpoints: Mapping[str, Endpoint], price_per_gb_s: float, settings: LiveSettings = LiveSettings(),
                on_request: Callable[[dict], None] | None = None) -> LiveReplayResult:
    """Replay ``workload`` on the servers behind ``endpoints`` (``{instance id: Endpoint}``, see
    ``harness.servers.deploy``); metrics as ``harness.replay.replay`` (docs/metrics.md), times in
    wall seconds. ``on_request`` sees each request's row when it ends (progress)."""
    instances, tasks = sim_tasks(problems, deps, tokens)
    routed = {i for t in tasks for s in t.stages for ids in s.groups for i in ids}
    missing = sorted(routed - set(endpoints))
    if missing:
        raise KeyError(f"no endpoint for instance(s) {', '.join(missing)}; given: {', '.join(sorted(endpoints))}")
    prompts = {i: _Prompts(endpoints[i]) for i in sorted(routed)}      # off the clock
    run = _Run(tasks, workload, endpoints, prompts, settings, on_request)
    run.go()
    due = workload.arrival_s * settings.time_scale
    ended = np.where(np.isnan(run.done_s), run.end_s, run.done_s)
    residency = float(np.nanmax(np.concatenate([ended, due[-1:]]))) if len(workload) else 0.0
    summary, per_task = cell_metrics(tasks, instances, replace(workload, arrival_s=due), done_s=run.done_s,
                                     failed=run.failed, acc_ok=run.acc_ok, residency_s=residency,
                                     price_per_gb_s=price_per_gb_s)
    calls = run.calls
    summary.update({
        "calls": len(calls), "calls_failed": sum(c["error"] is not None for c in calls),
        "dead_instances": ",".join(sorted(i for i in routed if endpoints[i].dead())),
        "prompt_tokens_asked": sum(c["prompt_tokens_asked"] for c in calls),
        "prompt_tokens_sent": sum(c["prompt_tokens"] or 0 for c in calls),
        "output_tokens_asked": sum(c["output_tokens_asked"] for c in calls),
        "output_tokens_received": sum(c["output_tokens"] or 0 for c in calls),
        "dispatch_lag_max_s": run.lag_max_s, "time_scale": settings.time_scale, "wall_s": run.wall_s})
    return LiveReplayResult(summary, per_task, run.requests, calls)


class _Run:
    def __init__(self, tasks, workload, endpoints, prompts, settings, on_request) -> None:
        self.tasks, self.w, self.eps, self.prompts, self.s = tasks, workload, endpoints, prompts, settings
        self.on_request = on_request
        n = len(workload)
        self.done_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)         # completion or failure
        self.failed = np.zeros(n, dtype=bool)
        self.acc_ok = np.ones(n, dtype=bool)
        self.router = _Router(endpoints)
        self.requests: list[dict] = []
        self.calls: list[dict] = []
        self.lock = threading.Lock()
        self.lag_max_s = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def go(self) -> None:
        w, n = self.w, len(self.w)
        due = w.arrival_s * self.s.time_scale
        self.t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, min(self.s.max_concurrency, n)),
                                thread_name_prefix="live-req") as pool:
            for i in range(n):
                wait = due[i] - self.now()
                if wait > 0:
                    time.sleep(wait)
                self.lag_max_s = max(self.lag_max_s, self.now() - due[i])
                pool.submit(self._request, i, float(due[i]))
        self.wall_s = self.now()

    def _request(self, i: int, due: float) -> None:
        task = self.tasks[int(self.w.task[i])]
        error = None
        if not task.placed:
            error, self.acc_ok[i] = "task not placed", False
        else:
            try:
                error = self._stages(i, task)
            except Exception as exc:   # a bug must not lose the other requests' results
                error = f"{type(exc).__name__}: {exc}"
        t = self.now()
        self.end_s[i] = t
        if error is None:
            self.done_s[i] = t
        else:
            self.failed[i] = True
        row = {"request": i, "task": task.name, "arrival_s": due, "end_s": t, "latency_s": t - due if error is None
               else None, "failed": error is not None, "error": error, "acc_ok": bool(self.acc_ok[i])}
        with self.lock:
            self.requests.append(row)
        if self.on_request is not None:
            self.on_request(row)

    def _stages(self, i: int, task: SimTask) -> str | None:
        w, s = self.w, self.s
        ps, os_, diff = float(w.prompt_scale[i]), float(w.output_scale[i]), float(w.difficulty[i])
        for k, st in enumerate(task.stages):
            ids, ok = st.route(diff)
            if not ok:
                self.acc_ok[i] = False
            prompt, output = st.sizes(ps, os_)
            if s.max_prompt_tokens is not None:
                prompt = min(prompt, s.max_prompt_tokens)
            if s.max_output_tokens is not None:
                output = min(output, s.max_output_tokens)
            for c in range(st.calls):
                err = self._call(i, k, st.name, c, ids, prompt, output)
                if err is not None:
                    return err
        return None

    def _call(self, i: int, k: int, stage: str, c: int, ids, prompt: int, output: int) -> str | None:
        iid = self.router.acquire(ids)
        if iid is None:
            return f"stage {stage}: no live instance (dead: {', '.join(ids)})"
        ep = self.eps[iid]
        row = {"request": i, "stage_index": k, "stage": stage, "call": c, "instance": iid, "start_s": self.now(),
               "prompt_tokens_asked": prompt, "output_tokens_asked": output, "prompt_tokens": None,
               "output_tokens": None, "error": None}
        try:
            comp = ep.client.completion(self.prompts[iid].text(prompt), max_tokens=output,
                                        extra=exact_output_body(ep.backend, output))
            row.update(prompt_tokens=comp.prompt_tokens, output_tokens=comp.completion_tokens)
        except EngineDeadError as exc:
            row["error"] = f"instance {iid} died: {exc}"
        except ServerError as exc:
            row["error"] = str(exc)
        finally:
            self.router.release(iid)
        row["end_s"] = self.now()
        with self.lock:
            self.calls.append(row)
        return row["error"]
