"""What-if simulation of one deployment (R replicas of one model/GPU/tp/pp) on one trace.

Uses the same core (``harness.core``), instances, schedulers and routers as the cluster
simulation; only the wiring is specific: trace arrivals go straight to a router.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.calls import Call
from harness.core import Arrivals, Event, Simulator
from harness.instance import Instance, StepTime
from harness.metrics import call_table, latency_summary
from harness.routers import make_router
from harness.schedulers import make_scheduler
from harness.steps import kv_capacity_tokens, step_model
from harness.trace import Trace


class SimulateConfig(BaseModel):
    """One deployment and its engine settings (vLLM's defaults where vLLM has one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="catalog model name, e.g. llama-2-70b")
    gpu: str = Field(description="catalog GPU name, e.g. a100-80gb")
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    scheduler: Literal["vllm", "sarathi"] = "vllm"
    max_batch: int = Field(default=128, ge=1, description="max sequences per iteration (max_num_seqs)")
    max_batch_tokens: int = Field(default=4096, ge=1, description="max tokens per iteration")
    chunk_size: int = Field(default=512, ge=1, description="sarathi: per-iteration token budget")
    replicas: int = Field(default=1, ge=1)
    router: Literal["round-robin", "least-outstanding"] = "least-outstanding"
    gpu_mem_util: float = Field(default=0.9, gt=0, le=1, description="share of GPU memory usable")
    kv_tokens: int | None = Field(default=None, ge=1, description="override the derived KV capacity")
    block_size: int = Field(default=16, ge=1, description="KV block size in tokens")
    time_scale: float = Field(default=1.0, gt=0, description="inter-arrival stretch factor")
    max_requests: int | None = Field(default=None, ge=1)


class OptionError(ValueError):
    """A deployment that cannot be simulated; ``option`` names the setting at fault."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass
class _Feed:
    trace: Trace
    instances: list[Instance]
    router: Any
    calls: list[Call] = field(default_factory=list)

    @property
    def arrival_s(self):
        return self.trace.arrived_at_s

    def arrive_one(self, i: int, now: float) -> list[Event] | None:
        """Call ``i`` of the trace arrives (``core.Arrivals`` calls this per call of an instant)."""
        c = Call(i, int(self.trace.prompt_tokens[i]), int(self.trace.output_tokens[i]), now)
        self.calls.append(c)
        return self.router.pick(self.instances, c).submit(c, now)


@dataclass(frozen=True)
class SimResult:
    summary: dict[str, Any]
    table: dict[str, np.ndarray]
    instances: list[Instance]


def _no_op_sink(call: Call, now: float) -> None:
    return None


def build_instances(cfg: SimulateConfig, step: StepTime | None = None) -> tuple[list[Instance], int]:
    """The replicas and their KV capacity in tokens (ValueError when nothing fits)."""
    if step is None:
        try:
            step = step_model(cfg.model, cfg.gpu, cfg.tp, cfg.pp)
        except ValueError as exc:  # the model cannot be sharded that way
            raise OptionError("tp" if "tp" in str(exc) else "pp", str(exc)) from None
    kv = cfg.kv_tokens
    if kv is None:
        from harness.steps import gpu_spec
        mem = gpu_spec(cfg.gpu).capacity_gb * cfg.tp * cfg.pp * cfg.gpu_mem_util
        kv = kv_capacity_tokens(step, mem_gb=mem, max_batch_tokens=cfg.max_batch_tokens,
                                max_batch=cfg.max_batch)
        if kv < cfg.block_size:
            raise OptionError("gpu_mem_util", f"{cfg.model} on {cfg.tp * cfg.pp}x {cfg.gpu}: weights "
                             f"({step.weights_gb:.1f} GB) and activations leave no room for the KV cache "
                             f"in {mem:.1f} GB")
    if cfg.scheduler == "sarathi" and cfg.max_batch >= min(cfg.chunk_size, cfg.max_batch_tokens):
        raise OptionError("max_batch", "sarathi: must be below the token budget "
                          "min(chunk_size, max_batch_tokens)")
    insts = [Instance(name=f"replica{r}", step=step, kv_tokens=kv, sink=_no_op_sink,
                      scheduler=make_scheduler(cfg.scheduler, chunk_size=cfg.chunk_size),
                      max_batch=cfg.max_batch, max_batch_tokens=cfg.max_batch_tokens,
                      block_size=cfg.block_size) for r in range(cfg.replicas)]
    return insts, insts[0].kv_tokens


def simulate(trace: Trace, cfg: SimulateConfig, *, step: StepTime | None = None) -> SimResult:
    """Replay ``trace`` on ``cfg``'s deployment; ``step`` overrides the profiler's step model."""
    t0 = time.perf_counter()
    if cfg.max_requests is not None:
        trace = trace.head(cfg.max_requests)
    if cfg.time_scale != 1.0:
        trace = trace.scaled(cfg.time_scale)
    instances, kv = build_instances(cfg, step)
    feed = _Feed(trace, instances, make_router(cfg.router))
    sim = Simulator()
    if len(trace):
        sim.push(Arrivals(float(trace.arrived_at_s[0]), 0, feed))
    sim.run()
    table = call_table(feed.calls)
    wall = time.perf_counter() - t0
    failed = int(table["failed"].sum())
    summary: dict[str, Any] = {
        "model": cfg.model, "gpu": cfg.gpu, "tp": cfg.tp, "pp": cfg.pp, "replicas": cfg.replicas,
        "scheduler": cfg.scheduler, "trace": trace.name,
        "requests": len(feed.calls), "completed": len(feed.calls) - failed, "failed": failed,
        "simulated_s": sim.now, "wall_s": wall,
        "requests_per_wall_s": len(feed.calls) / wall if wall > 0 else None,
        "kv_capacity_tokens": kv,
        "preemptions": sum(i.preemptions for i in instances),
        "iterations": sum(i.iterations for i in instances),
        "events": sim.events_handled,
        **latency_summary(table),
    }
    return SimResult(summary, table, instances)
