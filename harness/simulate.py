"""What-if simulation of one deployment (R replicas of one model/GPU/tp/pp) on one trace.

Uses the same event loop (``orchestrator.runtime.events``), engine core
(``orchestrator.engines.llm_core``), admission policies and routers as the cluster simulation
and the orchestrator; only the wiring is specific: trace arrivals go straight to a router.
Engine settings are one ``profiler.engine.EngineConfig``; each replica owns its GPUs, so its KV
capacity is ``gpu_memory_utilization`` of their memory minus weights and peak activation.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.metrics import call_table, latency_summary
from harness.routers import make_router
from harness.trace import Trace
from orchestrator.engines.llm_core import LLMCore, Seq, StepTime
from orchestrator.runtime.events import Arrivals, Event, Simulator
from profiler.engine import DEFAULT, EngineConfig, kv_capacity_tokens, memory_budget_gb
from profiler.steps import gpu_spec, step_model


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
    max_requests: int | None = Field(default=None, ge=1)


class OptionError(ValueError):
    """A deployment that cannot be simulated; ``option`` names the setting at fault."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass
class _Feed:
    trace: Trace
    instances: list[LLMCore]
    router: Any
    calls: list[Seq] = field(default_factory=list)

    @property
    def arrival_s(self):
        return self.trace.arrived_at_s

    def arrive_one(self, i: int, now: float) -> list[Event] | None:
        """Call ``i`` of the trace arrives (``Arrivals`` calls this per call of an instant)."""
        c = Seq(i, int(self.trace.prompt_tokens[i]), int(self.trace.output_tokens[i]), now)
        self.calls.append(c)
        return self.router.pick(self.instances, c).submit(c, now)


@dataclass(frozen=True)
class SimResult:
    summary: dict[str, Any]
    table: dict[str, np.ndarray]
    instances: list[LLMCore]


def _no_op_sink(call: Seq, now: float) -> None:
    return None


def build_instances(cfg: SimulateConfig, step: StepTime | None = None) -> tuple[list[LLMCore], int]:
    """The replicas and their KV capacity in tokens (OptionError when nothing fits)."""
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
    if kv is None:
        mem = memory_budget_gb(eng, gpu_capacity_gb=gpu_spec(cfg.gpu).capacity_gb, n_gpus=cfg.tp * cfg.pp)
        kv = kv_capacity_tokens(step, eng, mem_gb=mem)
        if kv < eng.block_size:
            whole = gpu_spec(cfg.gpu).capacity_gb * cfg.tp * cfg.pp       # every byte of the GPUs
            more = (" or raise --gpu-mem-util" if eng.gpu_memory_utilization < 1
                    and kv_capacity_tokens(step, eng, mem_gb=whole) >= eng.block_size else "")
            raise OptionError("tp", f"{cfg.model} does not fit {cfg.tp * cfg.pp}x {cfg.gpu} at tp={cfg.tp} "
                              f"pp={cfg.pp}: weights ({step.weights_gb:.1f} GB) and activations leave no room "
                              f"for the KV cache in {mem:.1f} GB (gpu_memory_utilization "
                              f"{eng.gpu_memory_utilization}); use more GPUs (--tp/--pp){more}")
    insts = [LLMCore(name=f"replica{r}", step=step, kv_tokens=kv, sink=_no_op_sink, config=eng)
             for r in range(cfg.replicas)]
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
    for inst in instances:
        inst.bind(sim)
    if len(trace):
        sim.push(Arrivals(float(trace.arrived_at_s[0]), 0, feed))
    sim.run()
    table = call_table(feed.calls)
    wall = time.perf_counter() - t0
    failed = int(table["failed"].sum())
    summary: dict[str, Any] = {
        "model": cfg.model, "gpu": cfg.gpu, "tp": cfg.tp, "pp": cfg.pp, "replicas": cfg.replicas,
        "scheduler": cfg.engine.scheduler, "trace": trace.name,
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
