"""The one engine configuration: how an LLM serving instance batches, pages and sizes its KV cache.

Every part that sizes or runs an instance takes an :class:`EngineConfig`: ``selector.resolve``
(capacity and the memory a deployment reserves), the what-if CLI (``python -m harness
simulate``), the cluster simulator, the orchestrator's simulated LLM engines and the server
launchers. Its defaults live here and nowhere else. Field names follow vLLM's
``SchedulerConfig`` / ``CacheConfig`` where vLLM has the concept.

The KV-cache capacity rule (:func:`kv_capacity_tokens`) is vLLM's: the memory the instance
may use, minus its weights, minus the peak activation of a forward pass at the token budget,
divided by the KV bytes of one token. The memory the instance may use is either what a plan
allocated to it (a planned instance: ``mem_gb`` of its deployment) or
``gpu_memory_utilization`` of the GPUs it owns (a what-if instance), see
:func:`memory_budget_gb`.
"""
from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: admission policies of the engine core (``orchestrator.engines.admission``)
Scheduler = Literal["vllm-v1", "vllm", "sarathi", "padded"]
SCHEDULERS: tuple[str, ...] = get_args(Scheduler)


class EngineConfig(BaseModel):
    """One LLM engine's settings (frozen; unknown keys rejected)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler: Scheduler = Field(
        "vllm-v1", description="admission policy: 'vllm-v1' = vLLM's V1 scheduler (one token budget per step "
        "shared by running decodes and prefill chunks, running requests first, chunked prefill always, "
        "recompute preemption of the newest running request, no watermark); 'vllm' = vLLM v0 default "
        "(prefill-prioritised, a token budget "
        "per prefill pass, recompute preemption of the newest sequence); 'sarathi' = Sarathi-Serve chunked "
        "prefill (decodes and prefill chunks share a per-iteration budget); 'padded' = the vLLM v0 fork "
        "Ayo/Teola runs (a prefill pass is padded to its longest prompt: len(batch) x max(prompt) tokens)")
    max_num_seqs: int = Field(256, ge=1, le=65_536, description="sequences in one iteration (vLLM "
                              "max_num_seqs, default 256)")
    max_num_batched_tokens: int = Field(4096, ge=1, le=1_048_576, description="vllm-v1: tokens in one "
                                        "step (decodes one each, prefill chunks); vllm/padded: prefill tokens "
                                        "in one pass, a longer prompt admitted alone (vLLM raises the budget "
                                        "to the model length)")
    long_prefill_token_threshold: int = Field(0, ge=0, le=1_048_576, description="vllm-v1: most prompt "
                                              "tokens one request prefills per step (0 = no cap; vLLM's "
                                              "long_prefill_token_threshold)")
    block_size: int = Field(16, ge=1, le=4096, description="KV-cache block (page) size in tokens (vLLM 16)")
    chunk_size: int = Field(512, ge=1, le=1_048_576, description="sarathi: per-iteration token budget "
                            "(decodes count one each), min(chunk_size, max_num_batched_tokens)")
    watermark: float = Field(0.01, ge=0, lt=1, description="share of KV blocks kept free at admission "
                             "(vLLM watermark 0.01)")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="share of each GPU's memory an "
                                          "instance that owns whole GPUs may use (vLLM default 0.9)")
    kv_capacity_tokens: int | None = Field(None, ge=1, le=1 << 40, description="override the derived KV "
                                           "capacity (tokens per instance)")
    prefix_caching: bool = Field(False, description="reuse the KV of a prompt prefix seen before "
                                 "(vLLM enable_prefix_caching); off for load runs")
    async_scheduling: bool = Field(False, description="vLLM async scheduling (scheduler vllm-v1 only): the engine "
                                   "core schedules step "
                                   "n+1 while the GPU runs step n, so the per-step CPU time overlaps the forward "
                                   "(step = max(forward, CPU) instead of forward + CPU), and a request reaching a busy "
                                   "engine during step n is first scheduled in step n+2. vLLM's default from 0.14 "
                                   "on (vllm-project/vllm#27614; not with pipeline parallelism), opt-in "
                                   "--async-scheduling in 0.10-0.13; off here: the default engine models vLLM "
                                   "V1 0.10-0.13 (async_scheduling_default)")

    @model_validator(mode="after")
    def _consistent(self) -> EngineConfig:
        if self.scheduler == "sarathi" and self.max_num_seqs >= self.token_budget:
            raise ValueError("max_num_seqs: sarathi needs it below the token budget "
                             "min(chunk_size, max_num_batched_tokens)")
        if self.async_scheduling and self.scheduler != "vllm-v1":
            raise ValueError(f"async_scheduling: vLLM's V1 scheduler only (scheduler: vllm-v1); the "
                             f"'{self.scheduler}' policy schedules between steps")
        if self.scheduler == "vllm-v1" and self.max_num_seqs > self.max_num_batched_tokens:
            raise ValueError("max_num_batched_tokens: vllm-v1 needs it >= max_num_seqs (vLLM's SchedulerConfig "
                             "rule: every running request must get its token in a step)")
        return self

    @property
    def token_budget(self) -> int:
        """Tokens one iteration may process: sarathi's chunk budget, else the prefill-pass budget."""
        if self.scheduler == "sarathi":
            return min(self.chunk_size, self.max_num_batched_tokens)
        return self.max_num_batched_tokens


DEFAULT = EngineConfig()

#: the first vLLM release that schedules asynchronously by default (v0.14.0 release notes, "Async
#: scheduling is now enabled by default", PR vllm-project/vllm#27614; `SchedulerConfig.async_scheduling`
#: was `bool = False` before, the opt-in `--async-scheduling` of PR #19970, 0.10 on)
VLLM_ASYNC_DEFAULT_FROM = (0, 14)


def async_scheduling_default(engine: str, *, pp: int = 1) -> bool:
    """Whether an engine described as ``engine`` (e.g. "vllm 0.21.0", "vllm ~0.8.5 (V1)",
    "tensorrt-llm ...") schedules asynchronously by default: vLLM >= 0.14 with one pipeline stage
    (vLLM's `VllmConfig` turns the `None` default on unless pipeline_parallel_size > 1, a
    non-EAGLE/MTP speculative method or an executor without support); everything else (vLLM
    <= 0.13, V0, TensorRT-LLM of 2024) schedules between steps."""
    import re
    m = re.search(r"vllm\s+~?v?(\d+)\.(\d+)", engine.lower())
    return bool(m) and (int(m[1]), int(m[2])) >= VLLM_ASYNC_DEFAULT_FROM and pp == 1


def engine_step(step: Any, cfg: EngineConfig) -> Any:
    """``step`` (the profiler's step model) as ``cfg``'s engine runs it: with async scheduling
    the per-step CPU time overlaps the forward (``StepModel.with_scheduling``). A step model
    without that notion (a measured table) is returned as it is."""
    with_scheduling = getattr(step, "with_scheduling", None)
    return with_scheduling(cfg.async_scheduling) if with_scheduling is not None else step


def memory_budget_gb(cfg: EngineConfig, *, gpu_capacity_gb: float, n_gpus: int,
                     planned_mem_gb: float | None = None) -> float:
    """GB the instance may use on all its GPUs together: the plan's allocation when given,
    else ``gpu_memory_utilization`` x each GPU's capacity x the GPUs it owns."""
    if planned_mem_gb is not None:
        return planned_mem_gb
    return cfg.gpu_memory_utilization * gpu_capacity_gb * n_gpus


#: vLLM's sampler warm-up peak per (row x vocabulary entry): bf16 logits, their fp32 copy,
#: softmax/log-softmax and the top-k/top-p sort (fp32 values + int64 indices) coexist. Derived
#: from Qwen3-0.6B's logged peak activation (5.56 GiB at max_num_seqs 1024, vocab 151,936;
#: llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md, H100, vLLM V1), where
#: the forward workspace is < 0.3 GB; checked on Llama-3.1-8B and Qwen3-32B in tests/profiler.
VLLM_SAMPLER_BYTES_PER_LOGIT = 38.0


def peak_activation_gb(step: Any, *, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """vLLM's profiled peak activation (GB, all GPUs): a forward pass at ``max_num_batched_tokens``
    (its workspace split over the GPUs), then a sampler warm-up over ``max_num_seqs`` rows on one
    GPU (the last stage's first TP rank); the two do not coexist, so each GPU reserves the larger
    and every GPU gets the binding GPU's KV blocks (``vllm/v1/worker/gpu_worker.py``
    determine_available_memory)."""
    g = step.gpus
    return g * max(step.workspace_gb(max_num_batched_tokens) / g,
                   step.logits_gb(max_num_seqs, VLLM_SAMPLER_BYTES_PER_LOGIT))


def kv_gb(step: Any, *, mem_gb: float, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """The one KV-cache rule, vLLM's (GB, all GPUs; negative when nothing is left): the memory the
    instance may use minus its weights, :func:`peak_activation_gb` and the runtime overhead of
    every GPU (CUDA context, NCCL buffers). ``step`` is the profiler's step model."""
    peak = peak_activation_gb(step, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    return mem_gb - step.weights_gb - peak - step.runtime_overhead_gb


def reserved_mem_gb(step: Any, cfg: EngineConfig, *, kv_tokens: int) -> float:
    """The memory an instance needs to hold ``kv_tokens`` under :func:`kv_gb` (its inverse; GB,
    all GPUs): what ``selector.resolve`` allocates, so the simulated instance holds the reserve."""
    peak = peak_activation_gb(step, max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs)
    return step.weights_gb + kv_tokens * step.kv_gb_per_token + peak + step.runtime_overhead_gb


def kv_capacity_tokens(step: Any, cfg: EngineConfig, *, mem_gb: float) -> int:
    """KV tokens an instance holds with ``mem_gb`` to use: :func:`kv_gb` / KV bytes of one token
    (``cfg.kv_capacity_tokens`` overrides); 0 when nothing is left. Llama-2-70B on 2x A100-80GB at
    the defaults: 40,568 tokens, inside the 36.3k-41.6k vLLM's own profiling gives and below its
    45.8k ceiling (no activation at all); vidur's planner, which leaves activations and the
    embedding out, says 53,248 (docs/harness.md, "What-if against vidur";
    tests/harness/test_vllm_rules.py). The same rule sizes ``python -m profiler memory --engine
    vllm`` (``profiler.memory.plan_memory``)."""
    if cfg.kv_capacity_tokens is not None:
        return cfg.kv_capacity_tokens
    free = kv_gb(step, mem_gb=mem_gb, max_num_batched_tokens=cfg.max_num_batched_tokens,
                 max_num_seqs=cfg.max_num_seqs)
    return max(0, int(free / step.kv_gb_per_token))
