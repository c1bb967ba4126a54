"""Analytic (roofline) step-time and memory model of one serving instance.

`AnalyticModel.step_model(model, gpu, tp, pp)` precomputes a `StepModel` whose methods are
plain float arithmetic, so a cluster simulator can call them millions of times.
Conventions (details and equations in docs/profiler.md):
- times in seconds, memory in GB (1e9 bytes), summed over all tp*pp GPUs of the instance;
- an iteration with pp > 1 is reported as the latency of one token batch through all stages
  (what TTFT/TPOT measure); `step_interval_s` is the bottleneck-stage time that bounds
  throughput when pp micro-batches are in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from profiler import ops
from profiler.calibration import Calibration, GpuCalibration, load_default_calibration
from profiler.catalog import GpuSpec, ModelSpec
from profiler.collectives import TokenCurve

LOGIT_BYTES = 4  # logits are materialised in fp32


def attn_tokens2(chunk_tokens: int, prefix_tokens: int = 0) -> int:
    """Attention work of one prefill chunk: (prefix+chunk)^2 - prefix^2 (= chunk^2 without prefix)."""
    return (prefix_tokens + chunk_tokens) ** 2 - prefix_tokens ** 2


def unsupported_reason(model: ModelSpec, tp: int, pp: int) -> str | None:
    """Why (model, tp, pp) cannot be served (vLLM's sharding rules), or None when it can."""
    if tp < 1 or pp < 1:
        return "tp and pp must be >= 1"
    if model.heads % tp:
        return f"{model.name}: heads={model.heads} not divisible by tp={tp}"
    if model.kv_heads % tp and tp % model.kv_heads:
        return f"{model.name}: kv_heads={model.kv_heads} and tp={tp} do not divide each other"
    if model.ffn % tp:
        return f"{model.name}: ffn={model.ffn} not divisible by tp={tp}"
    if pp > model.layers:
        return f"{model.name}: pp={pp} exceeds layers={model.layers}"
    return None


def _roof(compute_s: float, memory_s: float, overlap: float) -> float:
    """max(c, m) + (1 - overlap) * min(c, m): overlap 1 is the roofline, 0 the serial sum."""
    if compute_s >= memory_s:
        return compute_s + (1.0 - overlap) * memory_s
    return memory_s + (1.0 - overlap) * compute_s


@dataclass(frozen=True)
class _Gemm:
    flop_s_per_token: float
    weight_s: float
    act_s_per_token: float
    overhead_s: float
    overlap: float = 1.0
    spill: float = 1.0  # weight-time multiplier when more than one row (weights beyond cache)
    # derived, for StepModel._layer_s: the weight time of a multi-row GEMM and the share of the
    # shorter of compute and memory time not overlapped (the doubles it computed at every call)
    weight_rows_s: float = field(init=False, repr=False, compare=False)
    serial: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight_rows_s", self.weight_s * self.spill)
        object.__setattr__(self, "serial", 1.0 - self.overlap)

    def time(self, tokens: float) -> float:
        w = self.weight_s * (self.spill if tokens > 1 else 1.0)
        return _roof(tokens * self.flop_s_per_token, w + tokens * self.act_s_per_token,
                     self.overlap) + self.overhead_s


def _spill(gpu: GpuSpec, cal: GpuCalibration, weight_bytes: int) -> float:
    """CPU BLAS: a skinny multi-row GEMM whose weights do not fit the per-core cache streams them
    about twice (measured: docs/profiler_measured.md); 1 where the device sets no cache_mb."""
    return cal.spill_factor if gpu.cache_mb and weight_bytes > gpu.cache_mb * 1e6 else 1.0


def _gemm(gpu: GpuSpec, cal: GpuCalibration, k: int, n: int, dtype_bytes: int) -> _Gemm:
    bw = cal.mem_eff * ops.mem_bw(gpu)
    return _Gemm(2.0 * k * n / (cal.compute_eff * ops.peak_flops(gpu)), k * n * dtype_bytes / bw,
                 (k + n) * dtype_bytes / bw, cal.kernel_overhead_us * ops.US, cal.overlap,
                 _spill(gpu, cal, k * n * dtype_bytes))


@dataclass(frozen=True)
class StepModel:
    """Precomputed per-(model, gpu, tp, pp, calibration) coefficients; all times in seconds."""

    model_name: str
    gpu_name: str
    tp: int
    pp: int
    layers: int
    dense_gemms: tuple[_Gemm, ...]
    expert_gemms: tuple[_Gemm, ...]  # one expert's gate_up and down (MoE only)
    experts: int
    experts_per_token: int
    elem_s_per_token: float  # per layer
    elem_fixed_s: float  # per layer
    attn_prefill_s_per_t2: float
    attn_prefill_s_per_token: float
    attn_decode_s_per_ctx: float
    attn_overhead_s: float
    allreduce_fixed_s: float  # per all-reduce, 0 when tp == 1
    allreduce_s_per_token: float
    sendrecv_fixed_s: float
    sendrecv_s_per_token: float
    head_gemm: _Gemm  # LM head, on the last stage
    outer_s_per_token: float  # embedding gather + final norm
    outer_fixed_s: float
    iteration_overhead_s: float
    weights_gb: float
    kv_gb_per_token: float
    act_gb_per_token: float  # activation workspace per batched token, all GPUs
    logit_gb_per_seq: float
    runtime_overhead_gb: float  # all GPUs (runtime_overhead_gb_per_gpu x tp x pp)
    overlap: float = 1.0  # compute/memory overlap of every kernel (`_roof`)
    calibration_source: str = field(default="", compare=False)
    # measured collective curves (tokens -> s), replacing the alpha-beta pairs above when set
    allreduce_curve: TokenCurve | None = None  # None when tp == 1 or no curve for tp GPUs
    sendrecv_curve: TokenCurve | None = None
    embedding_gb: float = 0.0  # one copy of the input embedding table (engines that replicate it)
    # async scheduling (vLLM >= 0.14 default): the CPU step time overlaps the GPU's forward
    async_scheduling: bool = False

    def _layer_s(self, tokens: float, tokens2: float, prefill_tokens: float, decode_batch: int,
                 decode_ctx: float) -> float:
        t = self.elem_fixed_s + tokens * self.elem_s_per_token
        rows = tokens > 1
        for g in self.dense_gemms:      # t += g.time(tokens), inlined (the step model's hot loop)
            c = tokens * g.flop_s_per_token
            m = (g.weight_rows_s if rows else g.weight_s) + tokens * g.act_s_per_token
            t += (c + g.serial * m if c >= m else m + g.serial * c) + g.overhead_s
        if self.expert_gemms:
            t = self._add_experts(t, tokens)
        if prefill_tokens > 0:
            t += _roof(tokens2 * self.attn_prefill_s_per_t2, prefill_tokens * self.attn_prefill_s_per_token,
                       self.overlap)
            t += self.attn_overhead_s
        if decode_batch > 0:
            t += decode_ctx * self.attn_decode_s_per_ctx + self.attn_overhead_s
        return t + self._allreduces_s(tokens)

    def _add_experts(self, t: float, tokens: float) -> float:
        """`t` plus one layer's MoE experts: FLOPs of the routed tokens, weights of the experts
        touched (added term by term, so step times stay bit for bit what they were)."""
        routed = tokens * self.experts_per_token
        touched = self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens)
        for g in self.expert_gemms:
            t += _roof(routed * g.flop_s_per_token, touched * g.weight_s + routed * g.act_s_per_token,
                       self.overlap)
            t += g.overhead_s
        return t

    def _allreduces_s(self, tokens: float) -> float:
        """The layer's two all-reduces of `tokens` hidden states (0 when tp == 1)."""
        if self.allreduce_curve is not None:
            return 2.0 * self.allreduce_curve(tokens)
        if self.allreduce_fixed_s:
            return 2.0 * (self.allreduce_fixed_s + tokens * self.allreduce_s_per_token)
        return 0.0

    def _hop_s(self, tokens: float) -> float:
        if self.sendrecv_curve is not None:
            return self.sendrecv_curve(tokens)
        return self.sendrecv_fixed_s + tokens * self.sendrecv_s_per_token

    def _step(self, prefill_tokens: int, tokens2: float, decode_batch: int, decode_ctx: float,
              seqs: int, stage_layers: int, hops: int) -> float:
        tokens = prefill_tokens + decode_batch
        if tokens <= 0:
            return 0.0
        layer = self._layer_s(tokens, tokens2, prefill_tokens, decode_batch, decode_ctx)
        if self.async_scheduling:  # step n+1 is scheduled while the GPU runs step n
            gpu = (stage_layers * layer + self.head_gemm.time(max(seqs, 1)) + self.outer_fixed_s
                   + tokens * self.outer_s_per_token + (hops * self._hop_s(tokens) if hops else 0.0))
            return max(gpu, self.iteration_overhead_s)
        return (stage_layers * layer + self.head_gemm.time(max(seqs, 1))
                + self.outer_fixed_s + tokens * self.outer_s_per_token + self.iteration_overhead_s
                + (hops * self._hop_s(tokens) if hops else 0.0))

    @property
    def async_floor_s(self) -> float:
        """The least a step takes whatever its forward (async scheduling: the CPU step time, since a
        step is max(forward, CPU step time)); 0 under synchronous scheduling. Where it binds, a
        step's time is not affine in its context (``LLMCore.decode_s`` then does not memoise)."""
        return self.iteration_overhead_s if self.async_scheduling else 0.0

    def with_scheduling(self, async_scheduling: bool) -> StepModel:
        """This step model under synchronous (False: a step = forward + CPU step time, vLLM <= 0.13,
        TensorRT-LLM of 2024) or asynchronous scheduling (True: the engine core schedules step n+1
        and processes step n-1's output while the GPU runs step n, so a step = max(forward, CPU
        step time); vLLM's default from 0.14, ``profiler.engine.EngineConfig.async_scheduling``)."""
        if async_scheduling == self.async_scheduling:
            return self
        return replace(self, async_scheduling=async_scheduling)

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        """One mixed (chunked-prefill) iteration, latency through all pp stages, in seconds.

        prefill_tokens: new prompt tokens in the iteration (all chunks together);
        prefill_attn_tokens2: sum over chunks of (prefix+chunk)^2 - prefix^2 (`attn_tokens2`);
        decode_batch: sequences decoding one token; decode_context_tokens: their total context;
        prefill_seqs: sequences whose chunk ends this iteration (LM-head rows), default 1.
        """
        seqs = decode_batch + (prefill_seqs if prefill_tokens > 0 else 0)
        return self._step(prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens,
                          seqs, self.layers, self.pp - 1)

    def step_interval_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
                        decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        """Bottleneck-stage time of the same iteration: with pp micro-batches in flight one
        finishes every `step_interval_s` (equals `step_s` when pp == 1)."""
        if self.pp == 1:
            return self.step_s(prefill_tokens, prefill_attn_tokens2, decode_batch,
                               decode_context_tokens, prefill_seqs=prefill_seqs)
        seqs = decode_batch + (prefill_seqs if prefill_tokens > 0 else 0)
        return self._step(prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens,
                          seqs, math.ceil(self.layers / self.pp), 1)

    def prefill_s(self, tokens: int, batch: int = 1) -> float:
        """Prefill `batch` sequences of `tokens` prompt tokens each in one iteration (s)."""
        return self.step_s(tokens * batch, batch * float(tokens) ** 2, 0, 0.0, prefill_seqs=batch)

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        """One decode iteration of `batch` sequences of mean context `context_tokens` (s/token)."""
        return self.step_s(0, 0.0, batch, batch * context_tokens)

    def decode_terms(self, batch: int, context_tokens: float) -> dict[str, float]:
        """`decode_step_s(batch, context_tokens)` split into its terms (s): the layers' GEMMs,
        memory-bound kernels, attention and all-reduces, the pipeline hops, the LM head with the
        embedding/final norm, and the CPU step time (under async scheduling the part the forward
        does not hide); they sum to it (a diagnostic, not the hot path:
        experiments/scripts/a6000_terms.py)."""
        layer = {"gemm": sum(g.time(batch) for g in self.dense_gemms)
                 + (self._add_experts(0.0, batch) if self.expert_gemms else 0.0),
                 "elementwise": self.elem_fixed_s + batch * self.elem_s_per_token,
                 "attention": batch * context_tokens * self.attn_decode_s_per_ctx + self.attn_overhead_s,
                 "allreduce": self._allreduces_s(batch)}
        out = {k: self.layers * v for k, v in layer.items()}
        out["hops"] = (self.pp - 1) * self._hop_s(batch) if self.pp > 1 else 0.0
        out["head"] = self.head_gemm.time(batch) + self.outer_fixed_s + batch * self.outer_s_per_token
        gpu = sum(out.values())
        out["step_cpu"] = (max(0.0, self.iteration_overhead_s - gpu) if self.async_scheduling
                           else self.iteration_overhead_s)  # async: only what the forward does not hide
        return out

    # --- memory (GB, all tp*pp GPUs); per-engine reservation rules: profiler/memory.py --------
    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def engine_weights_gb(self, engine: str = "vllm", *, parallel_embedding: bool = False) -> float:
        """Weights as `engine` holds them (GB, all GPUs): vLLM shards the embedding over the TP
        ranks (vocab-parallel); TensorRT-LLM replicates the input embedding table on every TP rank
        unless the checkpoint was converted with `--use_parallel_embedding` (default off), so it
        holds `tp - 1` extra copies (docs/profiler.md, "Memory as the engines reserve it")."""
        if engine == "trtllm" and not parallel_embedding:
            return self.weights_gb + (self.tp - 1) * self.embedding_gb
        return self.weights_gb

    @property
    def runtime_overhead_gb_per_gpu(self) -> float:
        """CUDA context, NCCL buffers, cuBLAS workspace, allocator slack: per GPU (GB)."""
        return self.runtime_overhead_gb / self.gpus

    def workspace_gb(self, max_batch_tokens: int) -> float:
        """Forward-pass activation workspace for `max_batch_tokens` batched tokens (GB, all GPUs)."""
        return max_batch_tokens * self.act_gb_per_token

    def logits_gb(self, max_seqs: int, bytes_per_logit: float = LOGIT_BYTES) -> float:
        """Logits of `max_seqs` sampled rows at `bytes_per_logit` per vocabulary entry (GB; they
        live on one GPU: the last stage's first TP rank)."""
        return max_seqs * self.logit_gb_per_seq * bytes_per_logit / LOGIT_BYTES

    def activation_peak_gb(self, max_batch_tokens: int, max_seqs: int = 1) -> float:
        """Peak activation of one forward pass: workspace + fp32 logits, no runtime overhead."""
        return self.workspace_gb(max_batch_tokens) + self.logits_gb(max_seqs)

    def activation_gb(self, max_batch_tokens: int, max_seqs: int = 1) -> float:
        """Activation workspace for `max_batch_tokens` batched tokens and logits of `max_seqs`
        rows, plus the fixed runtime overhead of every GPU (GB, all GPUs)."""
        return self.activation_peak_gb(max_batch_tokens, max_seqs) + self.runtime_overhead_gb


@dataclass(frozen=True)
class Prediction:
    """One request in a batch of `batch` identical requests; seconds and GB (all GPUs)."""

    ttft_s: float
    tpot_s: float
    latency_s: float
    mem_gb: float
    weights_gb: float
    kv_gb: float
    activation_gb: float


class AnalyticModel:
    """Roofline model; `calibration=None` loads configs/calibration/vidur.yaml when present."""

    def __init__(self, *, calibration: Calibration | None = None, dtype_bytes: int = 2) -> None:
        self.calibration = calibration if calibration is not None else (
            load_default_calibration() or Calibration())
        self.dtype_bytes = dtype_bytes
        self._cache: dict[tuple[Any, ...], StepModel] = {}

    def step_model(self, model: ModelSpec, gpu: GpuSpec, tp: int, pp: int) -> StepModel:
        """Cached `StepModel`; ValueError when the model cannot be sharded that way."""
        key = (model, gpu, tp, pp)
        sm = self._cache.get(key)
        if sm is None:
            reason = unsupported_reason(model, tp, pp)
            if reason:
                raise ValueError(reason)
            sm = self._cache[key] = _build(model, gpu, tp, pp, self.calibration.for_gpu(gpu.name),
                                           self.dtype_bytes)
        return sm

    def predict(self, model: ModelSpec, gpu: GpuSpec, *, tp: int, pp: int, batch: int,
                prompt_tokens: int, output_tokens: int, engine: str = "vllm") -> Prediction:
        """Static batch: prefill all `batch` prompts at once, then decode `output_tokens` each.

        TPOT uses the mean context over the decode (prompt + output/2); memory holds the KV
        of batch*(prompt+output) tokens and activations of the batch prefill, and the weights as
        `engine` ("vllm" or "trtllm") holds them (`StepModel.engine_weights_gb`).
        """
        if min(batch, prompt_tokens, output_tokens) < 1:
            raise ValueError("batch, prompt_tokens and output_tokens must be >= 1")
        if engine not in ("vllm", "trtllm"):
            raise ValueError(f"unknown engine '{engine}'; known: vllm, trtllm")
        sm = self.step_model(model, gpu, tp, pp)
        ttft = sm.prefill_s(prompt_tokens, batch)
        tpot = sm.decode_step_s(batch, prompt_tokens + output_tokens / 2.0)
        kv = batch * (prompt_tokens + output_tokens) * sm.kv_gb_per_token
        act = sm.activation_gb(batch * prompt_tokens, batch)
        weights = sm.engine_weights_gb(engine)
        return Prediction(ttft_s=ttft, tpot_s=tpot, latency_s=ttft + (output_tokens - 1) * tpot,
                          mem_gb=weights + kv + act, weights_gb=weights, kv_gb=kv,
                          activation_gb=act)


def _build(m: ModelSpec, gpu: GpuSpec, tp: int, pp: int, cal: GpuCalibration, db: int) -> StepModel:
    qh, d, h = m.heads // tp, m.head_dim, m.hidden
    kvh = max(1, m.kv_heads // tp)  # kv heads are replicated when tp > kv_heads
    f = m.ffn // tp
    bw_e = cal.elementwise_mem_eff * ops.mem_bw(gpu)
    bw_a = cal.attn_decode_mem_eff * ops.mem_bw(gpu)
    dense = [_gemm(gpu, cal, h, (qh + 2 * kvh) * d, db), _gemm(gpu, cal, qh * d, h, db)]
    experts: tuple[_Gemm, ...] = ()
    if m.is_moe:
        dense.append(_gemm(gpu, cal, h, m.experts, db))  # router
        experts = (_gemm(gpu, cal, h, 2 * f, db), _gemm(gpu, cal, f, h, db))
    else:
        dense += [_gemm(gpu, cal, h, 2 * f, db), _gemm(gpu, cal, f, h, db)]
    # two norms (r/w), rope on q and k, gated activation (read 2f write f), residual add (r2 w1)
    elem_bytes = (4 * h + 2 * (qh + kvh) * d + 3 * f * m.experts_per_token + 3 * h) * db
    link_bw = gpu.link_bw_gbps * 1e9
    return StepModel(
        model_name=m.name, gpu_name=gpu.name, tp=tp, pp=pp, layers=m.layers,
        dense_gemms=tuple(dense), expert_gemms=experts, experts=m.experts,
        experts_per_token=m.experts_per_token,
        elem_s_per_token=elem_bytes / bw_e, elem_fixed_s=5 * cal.elementwise_overhead_us * ops.US,
        attn_prefill_s_per_t2=2.0 * d * qh / (cal.attn_prefill_eff * ops.peak_flops(gpu)),
        attn_prefill_s_per_token=(2 * qh + 2 * kvh) * d * db / (cal.mem_eff * ops.mem_bw(gpu)),
        attn_decode_s_per_ctx=_roof(4.0 * d * qh / (cal.compute_eff * ops.peak_flops(gpu)),
                                    2 * kvh * d * db / bw_a, cal.overlap),
        attn_overhead_s=cal.attn_overhead_us * ops.US,
        allreduce_fixed_s=ops.allreduce_latency_s(gpu, cal) if tp > 1 else 0.0,
        allreduce_s_per_token=(2.0 * (tp - 1) / tp * h * db / (cal.allreduce_bw_eff * link_bw)),
        sendrecv_fixed_s=ops.sendrecv_latency_s(gpu, cal),
        sendrecv_s_per_token=h * db / (cal.sendrecv_bw_eff * link_bw),
        head_gemm=_gemm(gpu, cal, h, -(-m.vocab // tp), db),
        outer_s_per_token=4 * h * db / bw_e, outer_fixed_s=2 * cal.elementwise_overhead_us * ops.US,
        iteration_overhead_s=cal.iteration_overhead_ms * 1e-3,
        weights_gb=m.weight_bytes(db) / 1e9,
        kv_gb_per_token=2 * m.layers * kvh * tp * d * db / 1e9,
        act_gb_per_token=cal.activation_factor * tp * pp * (
            4 * h + (qh + 2 * kvh) * d + 3 * f * m.experts_per_token) * db / 1e9,
        logit_gb_per_seq=m.vocab * LOGIT_BYTES / 1e9,
        runtime_overhead_gb=cal.runtime_overhead_gb * tp * pp,
        overlap=cal.overlap,
        calibration_source=cal.source,
        allreduce_curve=(cal.allreduce_curves[tp].in_tokens(h * db)
                         if tp > 1 and tp in cal.allreduce_curves else None),
        sendrecv_curve=cal.sendrecv_curve.in_tokens(h * db) if cal.sendrecv_curve else None,
        embedding_gb=m.vocab * h * db / 1e9,
    )
