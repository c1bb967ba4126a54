"""How vLLM and TensorRT-LLM split an instance's GPU memory into weights, activations, runtime
and KV cache, from the step model's memory terms (rules and sources: docs/profiler.md).

Both engines size the KV cache per GPU and give every GPU of the instance the same number of
KV blocks, so the GPU holding the most (the sampler's: last pipeline stage, first TP rank)
binds; instance totals below are that GPU's figures times tp*pp. Weights are taken as evenly
split over the GPUs (pipeline stages holding the embedding or LM head carry ~1-3% more).

vLLM (`vllm/v1/worker/gpu_worker.py` determine_available_memory, `vllm/utils` memory_profiling):
    kv = gpu_memory_utilization x capacity - weights - peak activation - non-torch memory,
    the peak measured by a profiling forward pass at `max_num_batched_tokens` followed by a
    sampler warm-up over `max_num_seqs` rows: max(forward workspace, sampler).
TensorRT-LLM (docs reference/memory.md; KvCacheConfig.free_gpu_memory_fraction, default 0.9):
    kv = free_gpu_memory_fraction x (capacity - weights - engine activation buffers - runtime),
    the activation buffers sized at build time for `max_num_tokens` (TensorRT's
    device_memory_size) plus the runtime's fp32 logits of `max_batch_size` rows; the input
    embedding table is replicated on every TP rank unless the checkpoint was converted with
    `--use_parallel_embedding` (convert_checkpoint.py default False).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from profiler.engine import DEFAULT, kv_gb, peak_activation_gb

TRTLLM_LOGIT_BYTES = 4.0  # fp32 logits buffer of the runtime (logits_dtype float32)
ENGINES = ("vllm", "trtllm")
#: TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction default
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class MemoryPlan:
    """One engine's split of an instance's memory (GB, all tp*pp GPUs; binding GPU x tp*pp)."""

    engine: str
    capacity_gb: float
    weights_gb: float
    activation_gb: float
    runtime_gb: float
    kv_gb: float
    unused_gb: float  # left free by the engine's fraction
    kv_tokens: int

    @property
    def used_gb(self) -> float:
        return self.weights_gb + self.activation_gb + self.runtime_gb + self.kv_gb


def plan_memory(step: Any, engine: Literal["vllm", "trtllm"], *, gpu_capacity_gb: float,
                max_num_batched_tokens: int, max_num_seqs: int, gpu_memory_utilization: float = DEFAULT.gpu_memory_utilization,
                free_gpu_memory_fraction: float = TRTLLM_FREE_GPU_MEMORY_FRACTION, parallel_embedding: bool = False) -> MemoryPlan:
    """The KV cache (GB and tokens) `engine` reserves for `step` (a profiler StepModel) on GPUs of
    `gpu_capacity_gb` each. vLLM: `max_num_batched_tokens`/`max_num_seqs`, `gpu_memory_utilization`;
    TensorRT-LLM: the same two as `max_num_tokens`/`max_batch_size`, `free_gpu_memory_fraction`,
    `parallel_embedding`. ValueError for an unknown engine."""
    g = step.gpus
    runtime = step.runtime_overhead_gb_per_gpu
    workspace = step.workspace_gb(max_num_batched_tokens) / g
    if engine == "vllm":
        weights = step.weights_gb / g
        act = peak_activation_gb(step, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs) / g
        kv = kv_gb(step, mem_gb=gpu_memory_utilization * gpu_capacity_gb * g,
                   max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs) / g
        unused = (1.0 - gpu_memory_utilization) * gpu_capacity_gb
    elif engine == "trtllm":
        weights = step.engine_weights_gb("trtllm", parallel_embedding=parallel_embedding) / g
        act = workspace + step.logits_gb(max_num_seqs, TRTLLM_LOGIT_BYTES)
        free = gpu_capacity_gb - weights - act - runtime
        kv, unused = free_gpu_memory_fraction * free, (1.0 - free_gpu_memory_fraction) * max(free, 0.0)
    else:
        raise ValueError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    kv = max(kv, 0.0)
    return MemoryPlan(engine=engine, capacity_gb=gpu_capacity_gb * g, weights_gb=weights * g,
                      activation_gb=act * g, runtime_gb=runtime * g, kv_gb=kv * g,
                      unused_gb=unused * g, kv_tokens=int(kv * g / step.kv_gb_per_token))
