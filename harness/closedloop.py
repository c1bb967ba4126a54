"""The simulator checked against real servers end to end, on one machine (CPU or one GPU).

A two-stage plan (every request: a call to stage ``a``'s instance, then one to stage ``b``'s)
is deployed on two real servers of a random-weight Llama built here (nothing downloaded). Then:

1. **profile**: the profiler's ``torch`` backend times the same architecture (prefill and decode
   at batch 1, the servers' batch; wall clock, the servers' clock);
2. **calibrate**: the analytic model's constants for the device are fitted to that table
   (``profiler.validate.fit_gpu``, as ``python -m profiler calibrate`` does);
3. **serving overhead** (``overhead: true``): probe requests of other sizes than the replay's,
   off the clock (after an untimed warm-up round), measure TTFT and TPOT through the HTTP stream
   with each server alone and with both busy at once; their medians minus the calibrated prefill
   and decode times are a per-call and a per-iteration overhead (the server's tokenisation,
   HTTP, ``generate()`` set-up and per-token Python work, which the profiler's bare decoder does
   not have; with both busy, also what the two servers take from each other on a shared
   device). At a load, the simulator adds the mix of the two weighted by the chance that the
   other server is busy (its utilisation under the model) to every iteration;
4. **simulate** the replay's requests with the cluster simulator (``harness.cluster``, one
   ``LLMCore`` per instance) under the server's batching, given as an ``EngineConfig``:
   ``transformers serve`` without continuous batching runs one ``generate()`` at a time, in
   arrival order (``transformers/cli/serving/utils.py`` ``InferenceThread``), i.e.
   ``max_num_seqs = 1``;
5. **replay** the same requests live (``harness.live.replay_tasks``: open loop, streamed calls,
   random-token prompts of the requests' exact lengths);

at each load (the busier stage's utilisation under the calibrated model), and reports
simulated vs measured TTFT and TPOT (per call), E2E (per request) and goodput (share of
requests within ``slo_factor`` x the predicted unloaded E2E), with the profiler-only
prediction (no serving overhead) beside them.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from profiler.engine import EngineConfig
from selector.deployment import InstanceSpec, Route

FIT_PARAMS = ("compute_eff", "mem_eff", "attn_prefill_eff", "attn_decode_mem_eff", "iteration_overhead_ms")
METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "goodput")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Shape(_Frozen):
    """The random Llama's shape (``orchestrator.engines.real.tinyllm.TinyLlamaSpec``)."""
    hidden_size: int = Field(512, ge=8)
    intermediate_size: int = Field(1408, ge=8)
    num_hidden_layers: int = Field(8, ge=1)
    num_attention_heads: int = Field(8, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    vocab_size: int = Field(2048, ge=64, description="tokenizer target (a small corpus gives fewer)")


class StageSize(_Frozen):
    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=2)


class LoopConfig(_Frozen):
    """One closed-loop run (module docstring)."""
    shape: Shape = Shape()
    device: str = Field("cpu", description="torch device of the profile and the servers (cpu, cuda)")
    gpu: str = Field("cpu", description="the device's catalog name for the analytic model (cpu, h200)")
    dtype: Literal["float32", "bfloat16"] = "float32"
    threads: int = Field(1, ge=1, description="CPU threads of each server and of the profile")
    server: Literal["transformers", "torch"] = Field("transformers", description="transformers serve, or the "
                                                     "project's PyTorch-only server (harness/servers/torchserve.py)")
    stages: tuple[StageSize, StageSize] = (StageSize(prompt_tokens=256, output_tokens=32),
                                           StageSize(prompt_tokens=128, output_tokens=16))
    size_spread: float = Field(0.5, ge=0, lt=1, description="per-request token scale ~ U[1-s, 1+s]")
    requests: int = Field(40, ge=1)
    loads: tuple[float, ...] = Field((0.3, 0.7), min_length=1)
    slo_factor: float = Field(2.0, gt=0, description="latency SLO = factor x predicted unloaded E2E")
    profile_prompts: tuple[int, ...] = (16, 32, 64, 128, 256, 384, 512)
    profile_output: int = Field(32, ge=2)
    profile_repeats: int = Field(5, ge=1)
    overhead: bool = True
    probes: tuple[tuple[int, int], ...] = ((48, 24), (160, 24), (320, 12), (96, 40))
    seed: int = 0
    base_port: int = Field(18800, ge=1024, le=65000)
    startup_timeout_s: float = Field(300.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)

    @property
    def torch_dtype(self) -> str:
        return {"float32": "fp32", "bfloat16": "bf16"}[self.dtype]


@dataclass(frozen=True)
class ServedStep:
    """A step model plus the serving overheads of a real server: ``per_step_s`` in every
    iteration, ``per_call_s`` once per call, in its prefill pass. Memory terms are the base's."""
    base: Any
    per_step_s: float = 0.0
    per_call_s: float = 0.0

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        t = self.base.step_s(prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens,
                             prefill_seqs=prefill_seqs)
        t += self.per_step_s + (self.per_call_s * prefill_seqs if prefill_tokens > 0 else 0.0)
        return max(t, 1e-6)

    def prefill_s(self, tokens: int) -> float:
        return self.step_s(tokens, float(tokens) ** 2, 0, 0.0)

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        return self.step_s(0, 0.0, batch, batch * context_tokens)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


def call_service_s(step: Any, prompt: int, output: int) -> float:
    """One call alone on an idle instance: a prefill, then ``output - 1`` decode iterations."""
    return step.prefill_s(prompt) + sum(step.decode_step_s(1, prompt + k) for k in range(1, output))


# ---- 1-2: model, profile, calibration ------------------------------------------------------
def build_model(cfg: LoopConfig, where: Path) -> tuple[Path, Any]:
    """The random checkpoint (``server: torch``: the decoder's architecture JSON) and its catalog
    ``ModelSpec`` (name ``loop-llama``)."""
    from profiler.catalog import ModelSpec
    s = cfg.shape
    if cfg.server == "torch":
        hd = s.hidden_size // s.num_attention_heads
        spec = ModelSpec(name="loop-llama", hf_id="none/loop-llama", family="llama-3", layers=s.num_hidden_layers,
                         hidden=s.hidden_size, heads=s.num_attention_heads, kv_heads=s.num_key_value_heads,
                         head_dim=hd, ffn=s.intermediate_size, vocab=s.vocab_size, total_params_b=1.0,
                         active_params_b=1.0, max_context=8192)
        params = spec.arch_params() / 1e9
        spec = spec.model_copy(update={"total_params_b": params, "active_params_b": params})
        where.mkdir(parents=True, exist_ok=True)
        (where / "arch.json").write_text(json.dumps(spec.model_dump()))
        return where / "arch.json", spec
    from orchestrator.engines.real.tinyllm import TinyLlamaSpec, build_tiny_llama
    path = build_tiny_llama(where, TinyLlamaSpec(**s.model_dump(), seed=cfg.seed))
    _clean_head(path)
    c = json.loads((path / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    spec = ModelSpec(name="loop-llama", hf_id=str(path), family="llama-3", layers=c["num_hidden_layers"],
                     hidden=c["hidden_size"], heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"],
                     head_dim=head_dim, ffn=c["intermediate_size"], vocab=c["vocab_size"], total_params_b=1.0,
                     active_params_b=1.0, max_context=c["max_position_embeddings"])
    params = spec.arch_params() / 1e9
    return path, spec.model_copy(update={"total_params_b": params, "active_params_b": params})


def _clean_head(path: Path) -> None:
    """Zero the LM-head rows of special tokens and of tokens that decode to a broken UTF-8 piece:
    greedy decoding of the random model then emits text every step, so a streaming server sends
    a chunk per token (its detokenizer holds back partial characters, which would delay the
    measured first token). Shapes, hence timings, are unchanged."""
    marker = path / "clean_head.done"
    if marker.exists():
        return
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    bad = [i for i in range(model.config.vocab_size) if i in set(tok.all_special_ids) or i >= len(tok)
           or not (t := tok.decode([i])) or "\ufffd" in t]
    with torch.no_grad():
        model.lm_head.weight[bad] = 0.0
    model.save_pretrained(path)
    marker.write_text(json.dumps({"zeroed_rows": len(bad)}))


def profile(cfg: LoopConfig, spec: Any) -> list[dict]:
    """Rows of the profiler's torch backend for ``spec`` at batch 1 (wall clock)."""
    from profiler.torch_bench import BenchSettings, Device, measure_grid
    from profiler.torch_model import Arch
    settings = BenchSettings(warmup=2, repeats=cfg.profile_repeats, decode_steps=8, dtype=cfg.torch_dtype,
                             threads=cfg.threads if cfg.device == "cpu" else None, cpu_timer="wall")
    dev = Device(cfg.device, settings)
    points = [(1, p, cfg.profile_output) for p in cfg.profile_prompts]
    return list(measure_grid(Arch.from_mapping(spec.model_dump()), model_name=spec.name, gpu_name=cfg.gpu,
                             device=dev, settings=settings, points=points))


@dataclass(frozen=True)
class TableStep:
    """The measured table itself as the step model, for batch-1 instances (prefill-only and
    decode-only iterations): TTFT interpolated over prompt length, TPOT over context. Used when
    the fit's libraries (pandas, scipy) are missing, as on a bare GPU machine."""
    prompts: tuple[float, ...]
    ttft_s: tuple[float, ...]
    contexts: tuple[float, ...]
    tpot_s: tuple[float, ...]

    @classmethod
    def from_rows(cls, rows: list[dict]) -> TableStep:
        r = sorted((x for x in rows if x["batch"] == 1), key=lambda x: x["prompt_tokens"])
        return cls(tuple(float(x["prompt_tokens"]) for x in r), tuple(x["ttft_s"] for x in r),
                   tuple(x["prompt_tokens"] + x["output_tokens"] / 2 for x in r), tuple(x["tpot_s"] for x in r))

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        t = float(np.interp(prefill_tokens, self.prompts, self.ttft_s)) if prefill_tokens > 0 else 0.0
        if decode_batch > 0:
            t += decode_batch * float(np.interp(decode_context_tokens / decode_batch, self.contexts, self.tpot_s))
        return t

    def prefill_s(self, tokens: int) -> float:
        return self.step_s(tokens, float(tokens) ** 2, 0, 0.0)

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        return self.step_s(0, 0.0, batch, batch * context_tokens)


def calibrate(cfg: LoopConfig, spec: Any, rows: list[dict]) -> tuple[Any, dict]:
    """The calibrated step model of ``spec`` on ``cfg.gpu`` and a report (MAPE before/after);
    without pandas or scipy, the measured table itself (:class:`TableStep`)."""
    try:
        import pandas  # noqa: F401
        import scipy  # noqa: F401
    except ImportError as exc:
        return TableStep.from_rows(rows), {"rows": len(rows), "fitted": None,
                                           "note": f"{exc.name} missing: the measured table is the step model",
                                           **{f"{m}_mape_pct_{w}": None for w in ("before", "after")
                                              for m in ("ttft_s", "tpot_s")}}
    from profiler.analytic import AnalyticModel
    from profiler.calibration import Calibration, load_default_calibration
    from profiler.measured import all_gpus, rows_to_table
    from profiler.validate import TIME_PARAMS, errors, fit_gpu, predict_like
    table = rows_to_table(rows)
    models, gpus = {spec.name: spec}, all_gpus()
    base = load_default_calibration() or Calibration()
    params = tuple(p for p in TIME_PARAMS if p[0] in FIT_PARAMS)
    gc = fit_gpu(table, cfg.gpu, models, gpus, base, params=params)
    cal = base.model_copy(update={"gpus": {**base.gpus, cfg.gpu: gc}})
    before = errors(table, predict_like(table, models, gpus, base))
    after = errors(table, predict_like(table, models, gpus, cal))
    report = {"rows": len(rows), "fitted": {p: getattr(gc, p) for p in FIT_PARAMS},
              **{f"{m}_mape_pct_{w}": float(e[m].mean()) for w, e in (("before", before), ("after", after))
                 for m in ("ttft_s", "tpot_s")}}
    db = 4 if cfg.dtype == "float32" else 2
    return AnalyticModel(calibration=cal, dtype_bytes=db).step_model(spec, gpus[cfg.gpu], 1, 1), report


# ---- 3: serving overhead --------------------------------------------------------------------
@dataclass(frozen=True)
class Overheads:
    """Serving overheads (s) per call and per iteration, measured with each server alone and
    with all of them busy at once (they share the device: on a CPU, its cores)."""
    alone_call_s: float
    alone_step_s: float
    busy_call_s: float
    busy_step_s: float

    def at(self, step: Any, busy_share: float) -> ServedStep:
        """The step model when the other servers are busy ``busy_share`` of the time."""
        w = min(max(busy_share, 0.0), 1.0)
        return ServedStep(step, per_step_s=(1 - w) * self.alone_step_s + w * self.busy_step_s,
                          per_call_s=(1 - w) * self.alone_call_s + w * self.busy_call_s)


def _fit(rows: list[dict]) -> tuple[float, float]:
    per_call = float(np.median([r["ttft_s"] - r["prefill_pred_s"] for r in rows if r["ttft_s"] is not None]))
    per_step = float(np.median([r["tpot_s"] - r["decode_pred_s"] for r in rows if r["tpot_s"] is not None]))
    # the prefill iteration pays both: the per-call part is what TTFT has beyond a step's overhead
    return per_call - per_step, per_step


def probe_overheads(step: Any, endpoints: dict, cfg: LoopConfig) -> tuple[Overheads, list[dict]]:
    """Probe the servers (sizes ``cfg.probes``, off the clock): once untimed (warm-up), then each
    server alone, then all servers at once; fit the overheads of both situations."""
    from harness.live import prompt_source
    from harness.servers import exact_output_body
    from harness.servers.client import run_sync
    srcs = {iid: prompt_source(ep, cfg.seed + 7) for iid, ep in endpoints.items()}

    async def one(iid: str, k: int, tag: int, mode: str) -> dict:
        p, o = cfg.probes[k]
        ep = endpoints[iid]
        g = await ep.client.agenerate(srcs[iid].text(p, (-2, tag, k)), max_tokens=o,
                                      extra=exact_output_body(ep.backend, o))
        n = g.prompt_tokens or p
        return {"instance": iid, "mode": mode, "prompt_tokens": n, "output_tokens": g.completion_tokens,
                "ttft_s": g.ttft_s, "tpot_s": g.tpot_s, "prefill_pred_s": step.prefill_s(n),
                "decode_pred_s": step.decode_step_s(1, n + o / 2)}

    async def probe() -> list[dict]:
        import asyncio
        for k in range(len(cfg.probes)):                              # warm-up, untimed
            await asyncio.gather(*(one(i, k, 0, "warm-up") for i in endpoints))
        rows = [await one(i, k, 1, "alone") for i in endpoints for k in range(len(cfg.probes))]
        for k in range(len(cfg.probes)):
            rows += await asyncio.gather(*(one(i, k, 2, "busy") for i in endpoints))
        return rows
    rows = run_sync(probe())
    (ac, ast), (bc, bst) = (_fit([r for r in rows if r["mode"] == m]) for m in ("alone", "busy"))
    return Overheads(ac, ast, bc, bst), rows


def busy_share(rate_rps: float, service_s: list[float]) -> float:
    """The mean utilisation of the other instances (two: each other's): the chance that a call
    finds the other server busy too, with the two stages' utilisations independent."""
    rho = [rate_rps * s for s in service_s]
    return float(np.mean([sum(rho) - r for r in rho])) if len(rho) > 1 else 0.0


# ---- 4-5: requests, simulation, replay ------------------------------------------------------
A, B = "loop/a/0", "loop/b/0"


def loop_tasks(cfg: LoopConfig, spec: Any, gpus: tuple[int, ...] = ()) -> tuple[list[InstanceSpec], list[SimTask]]:
    insts = [InstanceSpec(A, spec.name, 1, 1, gpus, 1.0), InstanceSpec(B, spec.name, 1, 1, gpus, 1.0)]
    stages = tuple(SimStage(name, 1, s.prompt_tokens, s.output_tokens, (Route((iid,)),))
                   for name, iid, s in (("a", A, cfg.stages[0]), ("b", B, cfg.stages[1])))
    return insts, [SimTask("loop", math.inf, stages)]


def workload(cfg: LoopConfig, rate_rps: float, seed: int) -> Workload:
    """Poisson arrivals at ``rate_rps``; token scales ~ U[1-s, 1+s] per request (both stages)."""
    rng = np.random.default_rng(seed)
    n = cfg.requests
    arr = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    arr -= arr[0]
    s = cfg.size_spread
    return Workload(arr, np.zeros(n, dtype=np.int64), rng.uniform(1 - s, 1 + s, n), rng.uniform(1 - s, 1 + s, n),
                    np.full(n, 0.5))


class _Recording(ClusterSim):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.finished: list = []

    def _done(self, call, now):
        self.finished.append(call)
        return super()._done(call, now)


#: transformers serve (and torchserve): one generate() at a time; the KV cache never binds there
ENGINE = EngineConfig(max_num_seqs=1, kv_capacity_tokens=1 << 20)


def simulate(cfg: LoopConfig, step: Any, insts, tasks, wl: Workload, slo_s: float) -> dict:
    sim = _Recording(gpu=cfg.gpu, instances=insts, tasks=tasks, engine=ENGINE, step_override=step)
    res = sim.run(wl)
    calls = [c for c in sim.finished if not c.failed]
    ttft = [c.first_s - c.arrival_s for c in calls]
    tpot = [(c.done_s - c.first_s) / (c.output - 1) for c in calls if c.output > 1]
    e2e = res["done_s"] - wl.arrival_s
    return _summary(ttft, tpot, e2e[~np.isnan(e2e)], len(wl), slo_s)


def _summary(ttft, tpot, e2e, n: int, slo_s: float) -> dict:
    e2e = np.asarray(e2e, dtype=float)
    return {"ttft_mean_s": float(np.mean(ttft)), "tpot_mean_s": float(np.mean(tpot)),
            "e2e_mean_s": float(e2e.mean()) if e2e.size else None,
            "e2e_p50_s": float(np.percentile(e2e, 50)) if e2e.size else None,
            "e2e_p99_s": float(np.percentile(e2e, 99)) if e2e.size else None,
            "goodput": float((e2e <= slo_s).sum() / n), "completed": int(e2e.size)}


def replay(cfg: LoopConfig, endpoints: dict, insts, tasks, wl: Workload, slo_s: float) -> dict:
    from harness.live import LiveSettings, replay_tasks
    res = replay_tasks(tasks, insts, wl, endpoints=endpoints, settings=LiveSettings(seed=cfg.seed, max_concurrency=1024))
    ok = [c for c in res.calls if c["error"] is None]
    e2e = [r["latency_s"] for r in res.requests if not r["failed"]]
    out = _summary([c["ttft_s"] for c in ok if c["ttft_s"] is not None],
                   [c["tpot_s"] for c in ok if c["tpot_s"] is not None], e2e, len(wl), slo_s)
    out.update(failed=res.summary["failed"], call_faults=res.summary["call_faults"],
               dispatch_lag_max_s=res.summary["dispatch_lag_max_s"])
    return out


# ---- the loop ---------------------------------------------------------------------------
def run_loop(cfg: LoopConfig, out: Path, *, log: Callable[[str], None] | None = None) -> dict:
    """The whole loop; writes ``closed_loop.json`` to ``out`` and returns it. ``log`` gets one line
    per stage (default: this module's logger at INFO)."""
    log = log or logging.getLogger(__name__).info
    from harness.servers import Fleet, ServerSpec
    from harness.servers.deploy import endpoints_from_fleet
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    path, spec = build_model(cfg, out / "model")
    gpus = (0,) if cfg.device.startswith("cuda") else ()
    env = {"OMP_NUM_THREADS": str(cfg.threads), "MKL_NUM_THREADS": str(cfg.threads), "TRANSFORMERS_VERBOSITY": "error"}
    specs = {iid: ServerSpec(name=iid.replace("/", "."), backend=cfg.server, model=str(path), port=cfg.base_port + k,
                             gpus=gpus, dtype=cfg.dtype, engine=ENGINE, env=env, startup_timeout_s=cfg.startup_timeout_s)
             for k, iid in enumerate((A, B))}
    with Fleet(list(specs.values()), log_dir=out / "servers") as fleet:
        eps = endpoints_from_fleet(fleet, specs, timeout_s=cfg.timeout_s, retries=0)
        log(f"servers up ({time.monotonic() - t0:.0f} s); profiling {spec.name} on {cfg.device}")
        rows = profile(cfg, spec)
        step, cal = calibrate(cfg, spec, rows)
        log(f"calibrated: {_cal_text(cal)}")
        none = Overheads(0.0, 0.0, 0.0, 0.0)
        over, probes = probe_overheads(step, eps, cfg) if cfg.overhead else (none, [])
        log(f"serving overhead: alone {1e3 * over.alone_call_s:.1f} ms per call + {1e3 * over.alone_step_s:.2f} ms "
            f"per iteration; all busy {1e3 * over.busy_call_s:.1f} + {1e3 * over.busy_step_s:.2f} ms")
        insts, tasks = loop_tasks(cfg, spec, gpus)
        alone = over.at(step, 0.0)
        service = [call_service_s(alone, s.prompt_tokens, s.output_tokens) for s in cfg.stages]
        slo = cfg.slo_factor * sum(service)          # rates and SLO from the servers alone
        loads = []
        for k, load in enumerate(cfg.loads):
            rate = load / max(service)
            share = busy_share(rate, service)
            served = over.at(step, share)
            wl = workload(cfg, rate, cfg.seed + k)
            sim = simulate(cfg, served, insts, tasks, wl, slo)
            bare = simulate(cfg, step, insts, tasks, wl, slo)
            load0 = os.getloadavg()[0]
            live = replay(cfg, eps, insts, tasks, wl, slo)
            err = {m: (100.0 * (sim[m] - live[m]) / live[m] if live[m] else None) for m in METRICS}
            loads.append({"load": load, "rate_rps": rate, "busy_share": share, "simulated": sim,
                          "profiler_only": bare, "measured": live, "error_pct": err,
                          "overhead_per_call_s": served.per_call_s, "overhead_per_step_s": served.per_step_s,
                          "machine_loadavg_1m": [load0, os.getloadavg()[0]]})
            log(f"load {load:g} ({rate:.3f} req/s, other server busy {share:.2f}): " + ", ".join(
                f"{m} sim {sim[m]:.4g} / live {live[m]:.4g}" for m in METRICS))
        for ep in eps.values():
            ep.client.close()
    result = {"config": cfg.model_dump(mode="json"), "model": spec.model_dump(), "calibration": cal,
              "serving_overhead": {**vars(over), "probes": probes},
              "service_s": service, "latency_slo_s": slo, "loads": loads, "elapsed_s": time.monotonic() - t0}
    (out / "closed_loop.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def summary_md(result: dict) -> str:
    """The side-by-side table of a run."""
    def f(v, scale=1.0, d=3):
        return "-" if v is None else f"{v * scale:.{d}f}"
    lines = ["| load | rate req/s | metric | simulated | measured | error % | profiler only |", "|---|---|---|---|---|---|---|"]
    for ld in result["loads"]:
        for m, name, sc in (("ttft_mean_s", "TTFT mean ms", 1e3), ("tpot_mean_s", "TPOT mean ms", 1e3),
                            ("e2e_mean_s", "E2E mean s", 1.0), ("goodput", "goodput", 1.0)):
            e = ld["error_pct"][m]
            lines.append(f"| {ld['load']:g} | {ld['rate_rps']:.3f} | {name} | {f(ld['simulated'][m], sc)} | "
                         f"{f(ld['measured'][m], sc)} | {'-' if e is None else f'{e:+.1f}'} | "
                         f"{f(ld['profiler_only'][m], sc)} |")
    o = result["serving_overhead"]
    lines += ["", f"Latency SLO {result['latency_slo_s']:.3f} s; serving overhead per call + per iteration: "
              f"{1e3 * o['alone_call_s']:.1f} + {1e3 * o['alone_step_s']:.2f} ms alone, "
              f"{1e3 * o['busy_call_s']:.1f} + {1e3 * o['busy_step_s']:.2f} ms all busy (weighted by the other "
              f"server's utilisation: " + ", ".join(f"{ld['busy_share']:.2f}" for ld in result["loads"]) + "); "
              f"{_cal_text(result['calibration'])}; machine load average "
              + ", ".join(f"{ld['machine_loadavg_1m'][0]:.1f}" for ld in result["loads"]) + " at the loads' start."]
    return "\n".join(lines) + "\n"


def _cal_text(cal: dict) -> str:
    if cal.get("fitted") is None:
        return f"not fitted ({cal.get('note')})"
    return (f"calibration TTFT MAPE {cal['ttft_s_mape_pct_before']:.1f}% -> {cal['ttft_s_mape_pct_after']:.1f}%, "
            f"TPOT {cal['tpot_s_mape_pct_before']:.1f}% -> {cal['tpot_s_mape_pct_after']:.1f}% ({cal['rows']} rows)")
