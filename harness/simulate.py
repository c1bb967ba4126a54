"""What-if simulation of one deployment (R replicas of one model/GPU/tp/pp) on one trace.

The cluster simulator (``harness.cluster.ClusterSim``) with one task of one stage: each trace
request is one call of the trace's own token counts, routed to a replica. Engine settings are
one ``profiler.engine.EngineConfig``; each replica owns its GPUs (none shared), so its KV capacity
is ``gpu_memory_utilization`` of their memory minus weights and peak activation.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.cluster import ClusterSim, SimStage, SimTask, Workload, instance_timing, make_router
from harness.load import ClosedLoopSim, overload
from harness.metrics import call_table, latency_summary
from harness.trace import Trace
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_timing import StepTime
from profiler.engine import DEFAULT, EngineConfig, kv_capacity_tokens, memory_budget_gb
from profiler.steps import gpu_spec, step_model
from selector.deployment import InstanceSpec, Route


class SimulateConfig(BaseModel):
    """One deployment, its engine settings and the replay's knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="catalog model name, e.g. llama-2-70b")
    gpu: str = Field(description="catalog GPU name, e.g. a100-80gb")
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    replicas: int = Field(default=1, ge=1, le=4096)
    router: Literal["round-robin", "least-outstanding"] = "least-outstanding"
    engine: EngineConfig = DEFAULT
    time_scale: float = Field(default=1.0, gt=0, le=1e6, description="inter-arrival stretch factor")
    max_requests: int | None = Field(default=None, ge=1, description="the first N requests of the trace "
                                     "(with concurrency: how many requests the clients send)")
    rate_rps: float | None = Field(default=None, gt=0, le=1e9, description="Poisson arrivals at this rate "
                                   "(requests/s) instead of the trace's times (harness.load)")
    concurrency: int | None = Field(default=None, ge=1, le=1_000_000, description="closed loop: this many "
                                    "clients, each sending the next request when its last returns")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="seed of the Poisson arrivals")

    @model_validator(mode="after")
    def _one_load(self) -> SimulateConfig:
        if self.rate_rps is not None and self.concurrency is not None:
            raise ValueError("concurrency: give --rate or --concurrency, not both")
        if self.time_scale != 1.0 and (self.rate_rps is not None or self.concurrency is not None):
            raise ValueError("time_scale: stretches the trace's own arrival times; not with --rate or --concurrency")
        return self


class OptionError(ValueError):
    """A deployment that cannot be simulated; ``option`` names the setting at fault."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass(frozen=True)
class SimResult:
    summary: dict[str, Any]
    table: dict[str, np.ndarray]
    instances: list[LLMCore]


def replicas(cfg: SimulateConfig, step: StepTime | None = None) -> tuple[list[InstanceSpec], StepTime]:
    """The replicas as instance specs (each on its own ``tp x pp`` GPUs, with the memory
    ``memory_budget_gb`` gives them) and their step time model (OptionError when nothing fits)."""
    eng = cfg.engine
    if step is None:
        try:
            step = step_model(cfg.model, cfg.gpu, cfg.tp, cfg.pp)
        except ValueError as exc:  # the model cannot be sharded that way
            raise OptionError("tp" if "tp" in str(exc) else "pp", str(exc)) from None
    kv = eng.kv_capacity_tokens
    if kv is not None and kv < eng.block_size:
        raise OptionError("kv_capacity_tokens", f"a KV cache of {kv} tokens holds less than one block of "
                          f"{eng.block_size} tokens")
    n = cfg.tp * cfg.pp
    # the memory matters only when the KV capacity is not given
    mem = memory_budget_gb(eng, gpu_capacity_gb=gpu_spec(cfg.gpu).capacity_gb, n_gpus=n) if kv is None else 0.0
    specs = [InstanceSpec(f"replica{r}", cfg.model, cfg.tp, cfg.pp, tuple(range(r * n, (r + 1) * n)), mem)
             for r in range(cfg.replicas)]
    if kv is None and instance_timing(specs[0], gpu=cfg.gpu, engine=eng, step=step)[1] < eng.block_size:
        whole = gpu_spec(cfg.gpu).capacity_gb * n       # every byte of the GPUs
        more = (" or raise --gpu-mem-util" if eng.gpu_memory_utilization < 1
                and kv_capacity_tokens(step, eng, mem_gb=whole) >= eng.block_size else "")
        raise OptionError("tp", f"{cfg.model} does not fit {n}x {cfg.gpu} at tp={cfg.tp} "
                          f"pp={cfg.pp}: weights ({step.weights_gb:.1f} GB) and activations leave no room "
                          f"for the KV cache in {mem:.1f} GB (gpu_memory_utilization "
                          f"{eng.gpu_memory_utilization}); use more GPUs (--tp/--pp){more}")
    return specs, step


def simulate(trace: Trace, cfg: SimulateConfig, *, step: StepTime | None = None) -> SimResult:
    """Replay ``trace`` on ``cfg``'s deployment; ``step`` overrides the profiler's step model."""
    t0 = time.perf_counter()
    if cfg.max_requests is not None:
        trace = trace.head(cfg.max_requests)
    if cfg.time_scale != 1.0:
        trace = trace.scaled(cfg.time_scale)
    if cfg.rate_rps is not None:
        trace = trace.poisson(cfg.rate_rps, cfg.seed)
    specs, step = replicas(cfg, step)
    # one call per request with the trace's own token counts (>= 1): sizes 1 x the counts
    stage = SimStage("call", 1, 1, 1, (Route(tuple(s.id for s in specs)),))
    n = len(trace)
    work = Workload(trace.arrived_at_s, np.zeros(n, dtype=np.int64), trace.prompt_tokens.astype(float),
                    trace.output_tokens.astype(float), np.zeros(n))
    kw: dict[str, Any] = dict(gpu=cfg.gpu, instances=specs, tasks=[SimTask(trace.name, float("inf"), (stage,))],
                              engine=cfg.engine, step_override=step, router=make_router(cfg.router),
                              share_gpus=False, keep_calls=True)
    sim = ClusterSim(**kw) if cfg.concurrency is None else ClosedLoopSim(concurrency=cfg.concurrency, **kw)
    sim.run(work)
    calls = sim.calls or []
    instances = list(sim.instances.values())
    table = call_table(calls)
    wall = time.perf_counter() - t0
    failed = int(table["failed"].sum())
    summary: dict[str, Any] = {
        "model": cfg.model, "gpu": cfg.gpu, "tp": cfg.tp, "pp": cfg.pp, "replicas": cfg.replicas,
        "scheduler": cfg.engine.scheduler, "async_scheduling": cfg.engine.async_scheduling, "trace": trace.name,
        "load": _load_name(cfg),
        "requests": len(calls), "completed": len(calls) - failed, "failed": failed,
        "simulated_s": sim.makespan_s, "wall_s": wall,
        "requests_per_wall_s": len(calls) / wall if wall > 0 else None,
        "kv_capacity_tokens": instances[0].kv_tokens,
        "preemptions": sum(i.preemptions for i in instances),
        "iterations": sum(i.iterations for i in instances),
        "events": sim.events,
        **latency_summary(table),
    }
    if cfg.concurrency is None:
        summary.update(overload(table))
    else:                                   # a closed loop: its throughput, no overload possible
        done = table["done_s"][~table["failed"]]
        summary.update(served_rps=(len(done) / sim.makespan_s if len(done) and sim.makespan_s > 0 else None),
                       overloaded=False)
    return SimResult(summary, table, instances)


def _load_name(cfg: SimulateConfig) -> str:
    if cfg.concurrency is not None:
        return f"closed loop, {cfg.concurrency} clients"
    if cfg.rate_rps is not None:
        return f"poisson {cfg.rate_rps:g} req/s (seed {cfg.seed})"
    return "arrivals as in the trace" + (f" x{cfg.time_scale:g}" if cfg.time_scale != 1.0 else "")
