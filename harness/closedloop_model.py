"""The closed loop's configuration and its steps 1-3 (``harness.closedloop``, whose docstring
tells the whole loop): what the simulator learns about the servers before any replay: the random
checkpoint, its profile, the calibrated step model and the measured serving overheads.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

FIT_PARAMS = ("compute_eff", "mem_eff", "attn_prefill_eff", "attn_decode_mem_eff", "iteration_overhead_ms")


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
    """One closed-loop run (``harness.closedloop``'s docstring)."""
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
    requests: int = Field(40, ge=1, description="requests per load and repeat")
    loads: tuple[float, ...] = Field((0.3, 0.7), min_length=1)
    repeats: int = Field(1, ge=1, description="passes over the loads; every other pass takes them in reverse "
                         "order, so each load meets the machine at other times")
    block_requests: int | None = Field(None, ge=1, description="replay each load in blocks of this many requests "
                                       "and re-take the overhead probes right before each block, so the simulated "
                                       "block and the live one see the same machine (None: one block per load, "
                                       "probes once before all loads)")
    rate_from: Literal["start", "current"] = Field(
        "start", description="the service time a load's rate is set from (rate = load / the busier stage's "
        "service): the servers alone at the start (start), or the judged calibration right before the load's "
        "first block (current: on a machine that slows down, load 0.3 stays 0.3)")
    pin_cores: bool = Field(False, description="pin each server to its own CPU core (os.sched_setaffinity, "
                            "where the OS has it; cores taken round-robin from this process's own set)")
    slo_factor: float = Field(2.0, gt=0, description="latency SLO = factor x predicted unloaded E2E")
    profile_prompts: tuple[int, ...] = (16, 32, 64, 128, 256, 384, 512)
    profile_output: int = Field(32, ge=2)
    profile_repeats: int = Field(5, ge=1)
    overhead: bool = True
    calibrate_from: Literal["probe", "previous", "both"] = Field(
        "probe", description="serving overheads of a block (with block_requests): from the probes re-taken right "
        "before it (probe), from the measured calls of the block replayed just before it, under sustained traffic "
        "(previous), or the mean of the two (both); the first block of a run has only its probe")
    probes: tuple[tuple[int, int], ...] = ((48, 24), (160, 24), (320, 12), (96, 40))
    seed: int = 0
    base_port: int = Field(18800, ge=1024, le=65000)
    startup_timeout_s: float = Field(300.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)

    @property
    def torch_dtype(self) -> str:
        return {"float32": "fp32", "bfloat16": "bf16"}[self.dtype]


@dataclass(frozen=True)
class WrappedStep:
    """A step model around ``base`` (a subclass gives ``step_s``; prefill and decode follow from
    it, everything else is the base's). ``with_scheduling`` keeps the wrapper: ``engine_step``
    must not unwrap it (``__getattr__`` would hand it the bare base's method)."""
    base: Any

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        raise NotImplementedError

    def prefill_s(self, tokens: int) -> float:
        return self.step_s(tokens, float(tokens) ** 2, 0, 0.0)

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        return self.step_s(0, 0.0, batch, batch * context_tokens)

    def with_scheduling(self, async_scheduling: bool) -> WrappedStep:
        base = getattr(self.base, "with_scheduling", None)
        return self if base is None else replace(self, base=base(async_scheduling))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


@dataclass(frozen=True)
class ServedStep(WrappedStep):
    """A step model plus the serving overheads of a real server: ``per_step_s`` in every
    iteration, ``per_call_s`` once per call, in its prefill pass. Memory terms are the base's."""
    per_step_s: float = 0.0
    per_call_s: float = 0.0

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        t = self.base.step_s(prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens,
                             prefill_seqs=prefill_seqs)
        t += self.per_step_s + (self.per_call_s * prefill_seqs if prefill_tokens > 0 else 0.0)
        return max(t, 1e-6)

    @property
    def async_floor_s(self) -> float:
        floor = getattr(self.base, "async_floor_s", 0.0)
        return floor + self.per_step_s if floor else 0.0


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
    try:
        return list(measure_grid(Arch.from_mapping(spec.model_dump()), model_name=spec.name, gpu_name=cfg.gpu,
                                 device=dev, settings=settings, points=points))
    finally:
        dev.close()


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


def traffic_overheads(step: Any, calls: list[dict]) -> tuple[float, float]:
    """Per-call and per-iteration overhead (s) fitted, as the probes' are, on a replayed block's
    measured calls: each call's TTFT less its derived queue wait and the calibrated prefill, and
    its TPOT less the calibrated decode step (``calls``: the replay's records, ``queue_s`` set)."""
    rows = [{"ttft_s": None if c["ttft_s"] is None else c["ttft_s"] - c["queue_s"], "tpot_s": c["tpot_s"],
             "prefill_pred_s": step.prefill_s(c["prompt_tokens"]),
             "decode_pred_s": step.decode_step_s(1, c["prompt_tokens"] + c["output_tokens"] / 2)}
            for c in calls if c["prompt_tokens"] and c["output_tokens"]]
    return _fit(rows)


def probe_overheads(step: Any, endpoints: dict, cfg: LoopConfig, *,
                    warm_up: bool = True) -> tuple[Overheads, list[dict]]:
    """Probe the servers (sizes ``cfg.probes``, off the clock): once untimed (``warm_up``), then
    each server alone, then all servers at once; fit the overheads of both situations."""
    from harness.live import prompt_source
    from harness.servers.calls import exact_output_body, run_sync
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
        for k in range(len(cfg.probes) if warm_up else 0):            # warm-up, untimed
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
