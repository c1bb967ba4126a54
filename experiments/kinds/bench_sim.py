"""Simulator benchmarks: ``python -m experiments.run bench_sim`` (``params.only: what-if | cluster``).

what-if (issue 8): the whole Azure 2023 conversation trace (19,366 requests) on one
Llama-2-70B instance, A100-80GB, TP2, with vllm and sarathi scheduling.
cluster (issue 4): the same trace through a two-stage workflow on 8 GPUs.
Prints one JSON line per case (``results.parquet``: one row each), then one plain line per case
(wall seconds, events, events per wall second, the 1-minute load average when the case started:
wall times depend on what else the machine runs; the targets of issue 22 item 7, cluster <= 2.0 s
and what-if <= 0.45 s, are for a machine at load about 1).

What the wall time covers: the simulation (the deployment's step model and instances, the replay,
and for the what-if its call table and summary). Loading data files and code comes before the
clock starts and is reported beside it: the trace (``trace_load_s``) and the model/GPU catalog
with its calibration and the profiler's modules (``catalog_load_s``, :func:`_load_catalog`; in a
fresh process the first case loads it, later ones find it loaded).
"""
from __future__ import annotations

import json
import os
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

from experiments.context import RunContext
from experiments.kinds._bench import Report


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    only: Literal["what-if", "cluster"] | None = None     # one benchmark only (default both)


def _load_catalog() -> float:
    """Load the model/GPU catalog, the calibration and the profiler's modules (once per process);
    returns the seconds it took (0 when already loaded)."""
    from profiler.steps import analytic_model

    t0 = time.perf_counter()
    analytic_model()
    return time.perf_counter() - t0


def what_if() -> list[dict]:
    from harness.simulate import SimulateConfig, simulate
    from profiler.engine import EngineConfig
    from harness.trace import azure_trace_path, load_trace

    t0 = time.perf_counter()
    trace = load_trace(azure_trace_path("conv"))
    load_s = time.perf_counter() - t0
    catalog_s = _load_catalog()
    out = []
    for sched in ("vllm", "sarathi"):
        load = os.getloadavg()[0]
        s = simulate(trace, SimulateConfig(model="llama-2-70b", gpu="a100-80gb", tp=2,
                                           engine=EngineConfig(scheduler=sched))).summary
        out.append({"case": f"what-if/{sched}", "requests": s["requests"], "trace_load_s": round(load_s, 3),
                    "catalog_load_s": round(catalog_s, 3), "wall_s": round(s["wall_s"], 3),
                    "requests_per_wall_s": round(s["requests_per_wall_s"]),
                    "iterations": s["iterations"], "events": s["events"],
                    "events_per_wall_s": round(s["events"] / s["wall_s"]), "simulated_s": round(s["simulated_s"]),
                    "kv_capacity_tokens": s["kv_capacity_tokens"], "preemptions": s["preemptions"],
                    "load_avg_1m": round(load, 2)})
        catalog_s = 0.0
    return out


def cluster() -> list[dict]:
    """19,366 conversation requests through classify (qwen2.5-3b x2) -> respond (llama-3.1-8b x6)
    on 8x A6000, each instance on its own GPU, vllm scheduling, KV reserve of 16,384 tokens."""
    import numpy as np

    from harness.cluster import ClusterSim, SimStage, SimTask, Workload
    from profiler.engine import DEFAULT, reserved_mem_gb
    from profiler.steps import step_model
    from harness.trace import azure_trace_path, load_trace
    from selector.deployment import InstanceSpec, Route

    trace = load_trace(azure_trace_path("conv"))
    catalog_s = _load_catalog()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    insts = []
    for g in range(8):
        model = "qwen2.5-3b" if g < 2 else "llama-3.1-8b"
        mem = reserved_mem_gb(step_model(model, "a6000", 1, 1), DEFAULT, kv_tokens=16384)
        insts.append(InstanceSpec(f"{model}/{g}", model, 1, 1, (g,), mem))
    p, o = int(trace.prompt_tokens.mean()), int(trace.output_tokens.mean())
    stages = (SimStage("classify", 1, p, 16, (Route(tuple(i.id for i in insts[:2])),)),
              SimStage("respond", 1, p + 16, o, (Route(tuple(i.id for i in insts[2:])),)))
    n = len(trace)
    wl = Workload(trace.arrived_at_s, np.zeros(n, dtype=np.int64), trace.prompt_tokens / trace.prompt_tokens.mean(),
                  trace.output_tokens / trace.output_tokens.mean(), np.full(n, 0.5))
    sim = ClusterSim(gpu="a6000", instances=insts, tasks=[SimTask("chat", 1e9, stages)])
    res = sim.run(wl)
    wall = time.perf_counter() - t0
    return [{"case": "cluster/two-stage-8gpu", "requests": n, "completed": int((~res["failed"]).sum()),
             "catalog_load_s": round(catalog_s, 3),
             "calls": 2 * n, "wall_s": round(wall, 3), "sim_wall_s": round(sim.wall_s, 3),
             "events": sim.events, "events_per_wall_s": round(sim.events / sim.wall_s),
             "requests_per_wall_s": round(n / wall), "simulated_s": round(sim.makespan_s),
             "iterations": sum(i.iterations for i in sim.instances.values()),
             "latency_mean_s": round(float(np.nanmean(res["done_s"] - wl.arrival_s)), 3),
             "load_avg_1m": round(load, 2)}]


def run(params: Params, ctx: RunContext) -> None:
    report = Report(ctx, "Simulator benchmarks (bench_sim)")
    cases = []
    if params.only in (None, "what-if"):
        cases += what_if()
    if params.only in (None, "cluster"):
        cases += cluster()
    for c in cases:
        report.line(json.dumps(c))
        report.row(c)
    for c in cases:
        report.line(f"{c['case']}: {c['wall_s']:.3f} s wall, {c['events']:,} events, "
                    f"{c['events_per_wall_s']:,} events/s, load average {c['load_avg_1m']:.2f}")
    report.write()
