"""The ``servers`` backend: replay a workload on real OpenAI-compatible servers, one per deployed
instance, and report the same cell metrics as the simulator (``harness.replay.cell_metrics``)
plus, per call, what the simulator reports per call: TTFT and TPOT.

The request flow is the simulator's (``harness.cluster``): a workflow request visits its task's
stages in order, a stage with ``calls = c`` makes ``c`` calls one after another, each call goes to
one of the stage's instances picked by least outstanding calls (ties: the first listed), and a
stage with several routes (RouteLLM's weak and strong models) first picks one by the request's
difficulty and the routes' shares.
Call sizes are the simulator's: ``max(1, round(stage tokens x the request's scale))`` (then
capped by ``max_prompt_tokens`` / ``max_output_tokens`` when set). Prompts are synthetic, as
``vllm bench serve`` makes them (``harness.servers.prompts``): random token ids of the server's
tokenizer re-encoded to the exact length, a fresh draw per call (no shared prefixes for a prefix
cache to hit), or, without a local tokenizer, random words of a shipped text sized by two
probes. All prompts are made before the clock starts. Outputs are asked to be exactly ``n``
tokens (EOS ignored) where the backend supports it; the server's reported ``usage`` is kept.

Load generation is open-loop and asynchronous (one event loop; ``vllm bench serve`` and
GuideLLM do the same): request ``r`` is due at ``arrival_s[r] x time_scale`` wall seconds after
the start whatever happened before; at most ``max_concurrency`` requests are in flight (an
``asyncio.Semaphore``; each client's connection pool has that many connections); a request
waiting for a slot is late, and its latency still runs from its due time. Calls are streamed:
each call row has its TTFT (send to first token) and TPOT ((last token - first token) /
(tokens - 1)), as vLLM's benchmark measures them.

Failures: every call either completes or is recorded with its error and ``error_kind``
(``harness.servers.calls.FAULT_KINDS``: deadline, timeout, overloaded, stream_error,
truncated, malformed, ...); a failed call fails its request, which stops there. A server that
died (its process exited, or its client declared it dead after the retries) gets no more calls;
a stage whose instances are all dead fails the requests reaching it. Every finished request is
kept; ``summary["dead_instances"]`` names the dead servers and ``summary["call_faults"]`` counts
the failed calls by kind.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.cluster import SimTask, Workload
from harness.metrics import stats
from harness.replay import ReplayResult, cell_metrics, sim_tasks
from harness.servers.calls import ServerError, exact_output_body, run_sync
from harness.servers.deploy import Endpoint
from harness.servers.prompts import CorpusPrompts, PromptSource, TokenPrompts, load_tokenizer
from selector.deployment import Deployment
from selector.problem import Problem


@dataclass(frozen=True)
class LiveSettings:
    """``time_scale`` multiplies arrival times (> 1: lighter load); ``max_concurrency``: requests
    in flight at once; caps apply after the simulator's scaling (None: none); ``seed`` seeds the
    prompts; ``stream``: stream calls (TTFT/TPOT; off: one answer per call)."""
    time_scale: float = 1.0
    max_concurrency: int = 64
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None
    seed: int = 0
    stream: bool = True


@dataclass(frozen=True)
class LiveReplayResult(ReplayResult):
    """``summary`` and ``per_task`` as the simulator's; plus one row per request and per call."""
    requests: list[dict] = ()
    calls: list[dict] = ()


def prompt_source(ep: Endpoint, seed: int) -> PromptSource:
    """Exact-length random-token prompts with the endpoint's tokenizer, else corpus words sized
    by two probes of the server (off the clock; they also warm it up)."""
    tok = load_tokenizer(ep.tokenizer)
    if tok is not None:
        src = TokenPrompts(tok, seed=seed)
        ep.client.completion(src.text(8, (-1,)), max_tokens=1, extra=exact_output_body(ep.backend, 1))   # warm-up
        return src
    return CorpusPrompts(lambda text: ep.client.completion(text, max_tokens=1).prompt_tokens, seed=seed)


class _Router:
    """Least outstanding calls over the live instances of a group; ties: the first listed."""

    def __init__(self, endpoints: Mapping[str, Endpoint]) -> None:
        self.eps = endpoints
        self.out = {k: 0 for k in endpoints}

    def acquire(self, ids: Sequence[str]) -> str | None:
        live = [i for i in ids if not self.eps[i].dead()]
        if not live:
            return None
        pick = min(live, key=self.out.__getitem__)
        self.out[pick] += 1
        return pick

    def release(self, iid: str) -> None:
        self.out[iid] -= 1


def replay_live(problems: Sequence[Problem], deps: Sequence[Deployment | None],
                tokens: Sequence[dict[str, list[tuple[int, int]]]], workload: Workload, *,
                endpoints: Mapping[str, Endpoint], price_per_gb_s: float, settings: LiveSettings = LiveSettings(),
                on_request: Callable[[dict], None] | None = None) -> LiveReplayResult:
    """Replay ``workload`` on the servers behind ``endpoints`` (``{instance id: Endpoint}``, see
    ``harness.servers.deploy``); metrics as ``harness.replay.replay`` (docs/metrics.md), times in
    wall seconds, plus TTFT/TPOT per call. ``on_request`` sees each request's row when it ends."""
    instances, tasks = sim_tasks(problems, deps, tokens)
    return replay_tasks(tasks, instances, workload, endpoints=endpoints, price_per_gb_s=price_per_gb_s,
                        settings=settings, on_request=on_request,
                        prices=problems[0].cluster.prices if problems else None)


def replay_tasks(tasks: Sequence[SimTask], instances: Sequence, workload: Workload, *,
                 endpoints: Mapping[str, Endpoint], price_per_gb_s: float = 0.0,
                 settings: LiveSettings = LiveSettings(),
                 on_request: Callable[[dict], None] | None = None,
                 prices: Mapping[str, float] | None = None) -> LiveReplayResult:
    """:func:`replay_live` on routed tasks as ``harness.replay.sim_tasks`` builds them (or by
    hand: a trace replay, the closed loop); ``instances``: the ``InstanceSpec`` s (memory, cost);
    ``prices``: US dollars per GPU-hour by GPU type, for ``usd`` (docs/metrics.md)."""
    routed = {i for t in tasks for s in t.stages for ids in s.groups for i in ids}
    missing = sorted(routed - set(endpoints))
    if missing:
        raise KeyError(f"no endpoint for instance(s) {', '.join(missing)}; given: {', '.join(sorted(endpoints))}")
    sources = {i: prompt_source(endpoints[i], settings.seed) for i in sorted(routed)}      # off the clock
    run = _Run(tasks, workload, endpoints, sources, settings, on_request)
    run_sync(run.go())
    due = workload.arrival_s * settings.time_scale
    ended = np.where(np.isnan(run.done_s), run.end_s, run.done_s)
    residency = float(np.nanmax(np.concatenate([ended, due[-1:]]))) if len(workload) else 0.0
    summary, per_task = cell_metrics(tasks, instances, replace(workload, arrival_s=due), done_s=run.done_s,
                                     failed=run.failed, acc_ok=run.acc_ok, residency_s=residency,
                                     price_per_gb_s=price_per_gb_s, prices=prices)
    calls = sorted(run.calls, key=lambda c: (c["request"], c["stage_index"], c["call"]))
    summary.update({
        "calls": len(calls), "calls_failed": sum(c["error"] is not None for c in calls),
        "call_faults": ",".join(f"{k}:{n}" for k, n in sorted(Counter(c["error_kind"] for c in calls
                                                                       if c["error"] is not None).items())),
        "dead_instances": ",".join(sorted(i for i in routed if endpoints[i].dead())),
        "prompt_tokens_asked": sum(c["prompt_tokens_asked"] for c in calls),
        "prompt_tokens_sent": sum(c["prompt_tokens"] or 0 for c in calls),
        "output_tokens_asked": sum(c["output_tokens_asked"] for c in calls),
        "output_tokens_received": sum(c["output_tokens"] or 0 for c in calls),
        **call_stats(calls), "dispatch_lag_max_s": run.lag_max_s, "time_scale": settings.time_scale,
        "wall_s": run.wall_s})
    return LiveReplayResult(summary, per_task, sorted(run.requests, key=lambda r: r["request"]), calls)


def replay_trace(trace, endpoints: Mapping[str, Endpoint], *, settings: LiveSettings = LiveSettings(),
                 latency_slo_s: float = float("inf")) -> LiveReplayResult:
    """The what-if replay (``python -m harness simulate``) on live servers: each trace row is one
    call of its own prompt and output tokens, sent to one of ``endpoints`` (replicas of one
    deployment) by least outstanding calls. ``summary`` gains ``harness.metrics.latency_summary``'s
    ``e2e_s``, ``ttft_s``, ``tpot_s`` (mean/p50/p90/p99; ``queue_s`` is not observable: None)."""
    from harness.cluster import SimStage
    from harness.metrics import QUANTILES
    from selector.deployment import Route
    ids = tuple(endpoints)
    stage = SimStage("call", 1, 1, 1, (Route(ids),))          # sizes = the trace's tokens (scales below)
    task = SimTask(trace.name, latency_slo_s, (stage,))
    n = len(trace)
    wl = Workload(np.asarray(trace.arrived_at_s, dtype=float), np.zeros(n, dtype=np.int64),
                  np.asarray(trace.prompt_tokens, dtype=float), np.asarray(trace.output_tokens, dtype=float),
                  np.full(n, 0.5))
    res = replay_tasks([task], [], wl, endpoints=endpoints, settings=settings)
    due = {r["request"]: r["arrival_s"] for r in res.requests}
    ok = [c for c in res.calls if c["error"] is None]          # one call per request: times from its due time
    none = {"mean": None, **{k: None for k, _ in QUANTILES}}
    summary = {**res.summary, "e2e_s": stats(np.array([c["end_s"] - due[c["request"]] for c in ok], dtype=float)),
               "ttft_s": stats(np.array([c["start_s"] - due[c["request"]] + c["ttft_s"] for c in ok
                                         if c["ttft_s"] is not None], dtype=float)),
               "tpot_s": stats(np.array([c["tpot_s"] for c in ok if c["tpot_s"] is not None], dtype=float)),
               "queue_s": none}
    return LiveReplayResult(summary, res.per_task, res.requests, res.calls)


def call_stats(calls: Sequence[dict]) -> dict[str, float | None]:
    """Mean/p50/p99 of TTFT, TPOT and call latency over the completed calls (flat keys)."""
    ok = [c for c in calls if c["error"] is None]
    out: dict[str, float | None] = {}
    for name, key in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("call_e2e", "e2e_s")):
        s = stats(np.array([c[key] for c in ok if c.get(key) is not None], dtype=float))
        out.update({f"{name}_mean_s": s["mean"], f"{name}_p50_s": s["p50"], f"{name}_p99_s": s["p99"]})
    return out


class _Run:
    def __init__(self, tasks, workload, endpoints, sources, settings, on_request) -> None:
        self.tasks, self.w, self.eps, self.s = tasks, workload, endpoints, settings
        self.on_request = on_request
        n = len(workload)
        self.done_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)         # completion or failure
        self.failed = np.zeros(n, dtype=bool)
        self.acc_ok = np.ones(n, dtype=bool)
        self.router = _Router(endpoints)
        self.requests: list[dict] = []
        self.calls: list[dict] = []
        self.lag_max_s = 0.0
        self.wall_s = 0.0
        self.texts = self._prompts(sources)

    def _sizes(self, i: int, st) -> tuple[int, int]:
        prompt, output = st.sizes(float(self.w.prompt_scale[i]), float(self.w.output_scale[i]))
        if self.s.max_prompt_tokens is not None:
            prompt = min(prompt, self.s.max_prompt_tokens)
        if self.s.max_output_tokens is not None:
            output = min(output, self.s.max_output_tokens)
        return prompt, output

    def _prompts(self, sources) -> dict[tuple[int, int, int], str]:
        """Every call's prompt, before the clock (per stage: its route's first instance's source)."""
        texts = {}
        for i in range(len(self.w)):
            task = self.tasks[int(self.w.task[i])]
            for k, st in enumerate(task.stages if task.placed else ()):
                ids, _ = st.route(float(self.w.difficulty[i]))
                prompt, _ = self._sizes(i, st)
                for c in range(st.calls):
                    texts[(i, k, c)] = sources[ids[0]].text(prompt, (i, k, c))
        return texts

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def go(self) -> None:
        w, n = self.w, len(self.w)
        due = w.arrival_s * self.s.time_scale
        slots = asyncio.Semaphore(max(1, self.s.max_concurrency))
        self.t0 = time.perf_counter()
        running = []
        for i in range(n):
            wait = due[i] - self.now()
            if wait > 0:
                await asyncio.sleep(wait)
            self.lag_max_s = max(self.lag_max_s, self.now() - due[i])
            running.append(asyncio.create_task(self._request(i, float(due[i]), slots)))
        await asyncio.gather(*running)
        self.wall_s = self.now()

    async def _request(self, i: int, due: float, slots: asyncio.Semaphore) -> None:
        task = self.tasks[int(self.w.task[i])]
        error = None
        async with slots:
            if not task.placed:
                error, self.acc_ok[i] = "task not placed", False
            else:
                try:
                    error = await self._stages(i, task)
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
        self.requests.append(row)
        if self.on_request is not None:
            self.on_request(row)

    async def _stages(self, i: int, task: SimTask) -> str | None:
        for k, st in enumerate(task.stages):
            ids, ok = st.route(float(self.w.difficulty[i]))
            if not ok:
                self.acc_ok[i] = False
            prompt, output = self._sizes(i, st)
            for c in range(st.calls):
                err = await self._stage_call(i, k, st.name, c, ids, prompt, output)
                if err is not None:
                    return err
        return None

    async def _stage_call(self, i: int, k: int, stage: str, c: int, ids, prompt: int, output: int) -> str | None:
        """One call of a stage (a subclass may prepare its prompt here); an error or None."""
        return await self._call(i, k, stage, c, ids, prompt, output)

    async def _call(self, i: int, k: int, stage: str, c: int, ids, prompt: int, output: int) -> str | None:
        iid = self.router.acquire(ids)
        if iid is None:
            return f"stage {stage}: no live instance (dead: {', '.join(ids)})"
        ep = self.eps[iid]
        start = self.now()
        row = {"request": i, "stage_index": k, "stage": stage, "call": c, "instance": iid, "start_s": start,
               "prompt_tokens_asked": prompt, "output_tokens_asked": output, "prompt_tokens": None,
               "output_tokens": None, "ttft_s": None, "tpot_s": None, "e2e_s": None, "attempts": None,
               "error": None, "error_kind": None}
        try:
            g = await ep.client.agenerate(self.texts[(i, k, c)], max_tokens=output, stream=self.s.stream,
                                          extra=exact_output_body(ep.backend, output))
            row.update(prompt_tokens=g.prompt_tokens, output_tokens=g.completion_tokens, ttft_s=g.ttft_s,
                       tpot_s=g.tpot_s, attempts=g.attempts)
        except ServerError as exc:
            row.update(error=f"instance {iid} died: {exc}" if exc.kind == "dead" else str(exc), error_kind=exc.kind)
        except Exception as exc:    # noqa: BLE001 - counted like any failed call, never dropped
            row.update(error=f"{type(exc).__name__}: {exc}", error_kind="client")
        finally:
            self.router.release(iid)
        row["end_s"] = self.now()
        if row["error"] is None:
            row["e2e_s"] = row["end_s"] - start
        self.calls.append(row)
        return row["error"]
