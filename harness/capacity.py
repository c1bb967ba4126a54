"""Capacity as the simulator sees it: one instance's sustainable rate, and a plan's breaking load.

* :func:`call_latencies`: one instance (the engine core and step model every replay runs, KV cache
  of the resolver's reserve) fed one stage's calls (its mean sizes, or scaled by a trace's sizes)
  at Poisson rate ``rate_rps`` (seeded); every call's latency, None when a call fails or the queue
  grows without bound (:func:`harness.load.overload`); :func:`call_latency_s`: a percentile of it
  (default p99); :func:`over_budget_share`: the share above a budget, pooled over seeds.
* :func:`simulated_capacity_rps`: the highest Poisson rate whose percentile stays within ``limit_s``
  (bisection on the rate, fixed seed, so deterministic).
* :func:`plan_capacity_rps`: what the selector promises for a plan, ``replicas x capacity_rps /
  calls`` of the tightest stage (per route: ``/ share``).
* :func:`load_point`: the plan's goodput in the cluster replay, alone, at an offered load (a
  multiple of the plan's capacity); :func:`breaking_load`: the lowest load of a grid at which it
  drops below a threshold (one seed).

docs/resolve.md ("capacity") relates these to ``perf.capacity_rps``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.trace import Trace
from profiler.engine import DEFAULT, EngineConfig
from selector.deployment import Deployment
from selector.problem import Problem

#: calls per one-instance run and the seed of its arrivals; the seeds :func:`over_budget_share` pools
CALLS, SEED, SEEDS = 600, 0, (0, 1, 2, 3)


def call_latencies(model: str, gpu: str, tp: int, pp: int, prompt: int, output: int, rate_rps: float, *,
                   kv_tokens: int, engine: EngineConfig = DEFAULT, calls: int = CALLS, seed: int = SEED,
                   mix: Trace | None = None) -> np.ndarray | None:
    """Every call's latency (s) of one instance at Poisson ``rate_rps`` (None: a call failed or the
    queue grows without bound). Calls are ``prompt`` x ``output`` tokens, or with ``mix`` (a trace)
    scaled per call by its requests' sizes over its means (:func:`call_sizes`), as the cluster
    replay scales a stage's calls (``SimStage.sizes``)."""
    from harness.simulate import SimulateConfig, simulate
    tr = Trace("capacity", np.zeros(calls), *call_sizes(prompt, output, calls, mix, seed))
    eng = engine.model_copy(update={"kv_capacity_tokens": kv_tokens})
    res = simulate(tr, SimulateConfig(model=model, gpu=gpu, tp=tp, pp=pp, engine=eng, rate_rps=rate_rps, seed=seed))
    s = res.summary
    if s["failed"] or s.get("overloaded"):
        return None
    return res.table["done_s"] - res.table["arrival_s"]


def call_latency_s(model: str, gpu: str, tp: int, pp: int, prompt: int, output: int, rate_rps: float, *,
                   kv_tokens: int, q: float = 99.0, engine: EngineConfig = DEFAULT, calls: int = CALLS,
                   seed: int = SEED, mix: Trace | None = None) -> float:
    """The ``q``-th percentile of :func:`call_latencies` (inf: a call failed or the queue grows
    without bound)."""
    lat = call_latencies(model, gpu, tp, pp, prompt, output, rate_rps, kv_tokens=kv_tokens, engine=engine,
                         calls=calls, seed=seed, mix=mix)
    return float("inf") if lat is None else float(np.percentile(lat, q))


def over_budget_share(model: str, gpu: str, tp: int, pp: int, prompt: int, output: int, rate_rps: float,
                      budget_s: float, *, kv_tokens: int, mix: Trace, seeds: Sequence[int] = SEEDS,
                      engine: EngineConfig = DEFAULT) -> tuple[float, int]:
    """The share of calls whose latency exceeds ``budget_s``, pooled over one run per seed (each
    the whole trace ``mix`` in that seed's order on that seed's arrivals, so the runs see the
    trace's size distribution exactly), and the calls counted; 1.0 when a run fails or overloads."""
    over = total = 0
    for seed in seeds:
        lat = call_latencies(model, gpu, tp, pp, prompt, output, rate_rps, kv_tokens=kv_tokens, engine=engine,
                             calls=len(mix), seed=seed, mix=mix)
        if lat is None:
            return 1.0, total + len(mix)
        over, total = over + int((lat > budget_s).sum()), total + len(lat)
    return over / total, total


def call_sizes(prompt: int, output: int, calls: int, mix: Trace | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output tokens of ``calls`` calls (module docstring of :func:`call_latency_s`):
    the trace's requests in a seeded random order, without replacement (repeated past its
    length), so ``calls = len(mix)`` replays its size distribution exactly."""
    if mix is None:
        return np.full(calls, prompt), np.full(calls, output)
    pick = np.resize(np.random.default_rng(seed + 1).permutation(len(mix)), calls)
    ps = mix.prompt_tokens[pick] / mix.prompt_tokens.mean()
    os_ = mix.output_tokens[pick] / mix.output_tokens.mean()
    return (np.maximum(1, np.rint(prompt * ps)).astype(np.int64),
            np.maximum(1, np.rint(output * os_)).astype(np.int64))


def simulated_capacity_rps(model: str, gpu: str, tp: int, pp: int, prompt: int, output: int, limit_s: float, *,
                           kv_tokens: int, guess_rps: float, q: float = 99.0, engine: EngineConfig = DEFAULT,
                           rel_tol: float = 0.03, calls: int = CALLS, seed: int = SEED,
                           mix: Trace | None = None) -> float:
    """The highest Poisson rate (within ``rel_tol``) at which :func:`call_latency_s` <= ``limit_s``;
    ``guess_rps`` seeds the bracket. 0.0 when even a tenth of the guess breaks it."""
    def ok(r: float) -> bool:
        return call_latency_s(model, gpu, tp, pp, prompt, output, r, kv_tokens=kv_tokens, q=q, engine=engine,
                              calls=calls, seed=seed, mix=mix) <= limit_s
    lo, hi = guess_rps, guess_rps
    if ok(lo):
        hi = lo * 2
        while ok(hi):
            lo, hi = hi, hi * 2
    else:
        while not ok(lo):
            hi, lo = lo, lo / 2
            if lo < guess_rps / 10:
                return 0.0
    while hi / lo > 1 + rel_tol:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def plan_capacity_rps(problem: Problem, dep: Deployment) -> float:
    """Requests/s the selector promises ``dep``: per stage and route, ``instances x capacity_rps /
    (calls x share)``; the least over stages (the tightest stage)."""
    cap = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r.capacity_rps for r in problem.perf}
    inst = {i.id: i for i in dep.instances}
    best = float("inf")
    for st in dep.stages:
        for route in st.routes:
            total = sum(cap[(dep.workflow, st.stage, inst[i].model, inst[i].tp, inst[i].pp, inst[i].gpu_type)]
                        for i in route.instances)
            best = min(best, total / (st.calls * route.share))
    return best


@dataclass(frozen=True)
class LoadPoint:
    load: float             # offered rate / plan capacity
    rate_rps: float
    goodput: float
    requests: int = 0       # requests replayed
    preemptions: int = 0    # KV preemptions (recompute) over the plan's instances


def load_point(problem: Problem, dep: Deployment, stage_tokens: dict[str, list[tuple[int, int]]], trace: Trace,
               *, gpu: str, load: float, window_s: float, requests: int | None = None, seed: int = SEED,
               sizes: str = "resample", engine: EngineConfig = DEFAULT) -> LoadPoint:
    """Replay ``dep`` alone on Poisson arrivals (``harness.workload.poisson_workload``: the trace's
    request sizes, ``sizes`` as it draws them; ``seed`` draws arrivals and sizes) at ``load`` x
    :func:`plan_capacity_rps` for ``window_s``, or with ``requests`` as long as that many requests
    take on average (the same precision of the goodput at every load)."""
    from harness.replay import replay
    from harness.workload import poisson_workload
    rate = load * plan_capacity_rps(problem, dep)
    wl = poisson_workload(trace, [rate], load=1.0, window_s=requests / rate if requests else window_s, seed=seed,
                          sizes=sizes)
    res = replay([problem], [dep], [stage_tokens], wl, gpu=gpu, price_per_gb_s=0.0, engine=engine)
    s = res.summary
    return LoadPoint(load, rate, float(s["goodput"]), int(s["requests"]), int(s["preemptions"]))


def breaking_load(problem: Problem, dep: Deployment, stage_tokens: dict[str, list[tuple[int, int]]], trace: Trace,
                  *, gpu: str, loads: Sequence[float], window_s: float, requests: int | None = None,
                  threshold: float = 0.99, seed: int = SEED,
                  engine: EngineConfig = DEFAULT) -> tuple[float | None, list[LoadPoint]]:
    """:func:`load_point` at each of ``loads``, in order, until the goodput drops below
    ``threshold``; that load (None: it never did) and every point run."""
    points = []
    for x in loads:
        points.append(load_point(problem, dep, stage_tokens, trace, gpu=gpu, load=x, window_s=window_s,
                                 requests=requests, seed=seed, engine=engine))
        if points[-1].goodput < threshold:
            return x, points
    return None, points


@dataclass(frozen=True)
class StageRow:
    """One stage of a plan as resolve priced it: its row's capacity and the call budget
    (``selector.resolve.call_budget_s``) that capacity keeps."""
    task: str
    stage: str
    model: str
    tp: int
    pp: int
    prompt: int
    output: int
    latency_s: float
    capacity_rps: float
    budget_s: float


def plan_stage_rows(problem: Problem, dep: Deployment, stage_tokens: list[tuple[int, int]], *,
                    latency_slack: float) -> list[StageRow]:
    """Per stage of ``dep`` (first route, first instance): the row resolve wrote and its budget."""
    from selector.resolve import call_budget_s
    rows = {(r.workflow, r.stage, r.model, r.tp, r.pp): r for r in problem.perf}
    inst = {i.id: i for i in dep.instances}
    out = []
    for st, (prompt, output) in zip(dep.stages, stage_tokens, strict=True):
        i = inst[st.routes[0].instances[0]]
        same = [rows[(dep.workflow, s.stage, i.model, i.tp, i.pp)] for s in dep.stages]
        whole = sum(s.calls * r.latency_s for s, r in zip(dep.stages, same))
        r = rows[(dep.workflow, st.stage, i.model, i.tp, i.pp)]
        out.append(StageRow(problem.task.name, st.stage, i.model, i.tp, i.pp, prompt, output, r.latency_s,
                            r.capacity_rps, call_budget_s(r.latency_s, whole, problem.task.latency_slo_s,
                                                          latency_slack)))
    return out
