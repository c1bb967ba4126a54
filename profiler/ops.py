"""Operator-level roofline formulas shared by the step model and the calibration fit.

Every function returns seconds and accepts floats or numpy arrays (the fit evaluates
thousands of measured shapes at once). Roofline: time = max(FLOPs / (eff_c * peak),
bytes / (eff_m * bandwidth)) + a fixed per-kernel cost, generalised by the calibration's
`overlap` to max(c, m) + (1 - overlap) * min(c, m) (`roof`; overlap 1 is the plain roofline).
"""

from __future__ import annotations

import numpy as np

from profiler.calibration import GpuCalibration
from profiler.catalog import GpuSpec

US = 1e-6


def peak_flops(gpu: GpuSpec) -> float:
    return gpu.bf16_tflops * 1e12


def mem_bw(gpu: GpuSpec) -> float:
    return gpu.mem_bw_gbps * 1e9


def roof(compute_s, memory_s, overlap: float = 1.0):
    """Kernel time from its compute and memory times: max + (1 - overlap) * min."""
    hi, lo = np.maximum(compute_s, memory_s), np.minimum(compute_s, memory_s)
    return hi if overlap >= 1.0 else hi + (1.0 - overlap) * lo


def gemm_s(gpu: GpuSpec, cal: GpuCalibration, tokens, k, n, dtype_bytes: int = 2):
    """[tokens x k] @ [k x n]: 2*tokens*k*n FLOPs; reads weights k*n and activations once."""
    flops_s = 2.0 * tokens * k * n / (cal.compute_eff * peak_flops(gpu))
    bytes_s = (k * n + tokens * (k + n)) * dtype_bytes / (cal.mem_eff * mem_bw(gpu))
    return roof(flops_s, bytes_s, cal.overlap) + cal.kernel_overhead_us * US


def elementwise_s(gpu: GpuSpec, cal: GpuCalibration, nbytes):
    """A memory-bound kernel (norm, rope, activation, residual add, embedding gather)."""
    return nbytes / (cal.elementwise_mem_eff * mem_bw(gpu)) + cal.elementwise_overhead_us * US


def attn_prefill_s(gpu: GpuSpec, cal: GpuCalibration, tokens2, tokens, q_heads, kv_heads,
                   head_dim, dtype_bytes: int = 2):
    """Causal flash attention over new tokens; `tokens2` = sum over chunks of (p+c)^2 - p^2.

    FLOPs = 4 * head_dim * q_heads * (attended pairs) = 2 * head_dim * q_heads * tokens2.
    """
    flops_s = 2.0 * head_dim * q_heads * tokens2 / (cal.attn_prefill_eff * peak_flops(gpu))
    nbytes = tokens * (2 * q_heads + 2 * kv_heads) * head_dim * dtype_bytes
    bytes_s = nbytes / (cal.mem_eff * mem_bw(gpu))
    return roof(flops_s, bytes_s, cal.overlap) + cal.attn_overhead_us * US


def attn_decode_s(gpu: GpuSpec, cal: GpuCalibration, context_tokens, q_heads, kv_heads,
                  head_dim, dtype_bytes: int = 2):
    """Paged decode attention: reads K and V of `context_tokens` (summed over the batch)."""
    bytes_s = context_tokens * 2 * kv_heads * head_dim * dtype_bytes / (
        cal.attn_decode_mem_eff * mem_bw(gpu))
    flops_s = 4.0 * head_dim * q_heads * context_tokens / (cal.compute_eff * peak_flops(gpu))
    return roof(flops_s, bytes_s, cal.overlap) + cal.attn_overhead_us * US


def allreduce_latency_s(gpu: GpuSpec, cal: GpuCalibration) -> float:
    lat = cal.allreduce_latency_us if cal.allreduce_latency_us is not None else gpu.link_latency_us
    return lat * US


def sendrecv_latency_s(gpu: GpuSpec, cal: GpuCalibration) -> float:
    lat = cal.sendrecv_latency_us if cal.sendrecv_latency_us is not None else gpu.link_latency_us
    return lat * US


def allreduce_s(gpu: GpuSpec, cal: GpuCalibration, nbytes, workers, link_bw_gbps: float | None = None):
    """All-reduce of `nbytes` per GPU over `workers` GPUs (scalar or array); 0 for one worker.

    The calibration's measured curve for that GPU count when it has one (`allreduce_curves`),
    else a ring: latency + 2(n-1)/n * bytes / (eff * link bandwidth)."""
    bw = (link_bw_gbps or gpu.link_bw_gbps) * 1e9 * cal.allreduce_bw_eff
    w = np.asarray(workers)
    t = allreduce_latency_s(gpu, cal) + 2.0 * (w - 1) / w * np.asarray(nbytes, dtype=float) / bw
    for n, curve in cal.allreduce_curves.items():
        if np.any(w == n):
            t = np.where(w == n, curve.seconds(nbytes), t)
    t = np.where(w > 1, t, 0.0)
    return float(t) if t.ndim == 0 else t


def sendrecv_s(gpu: GpuSpec, cal: GpuCalibration, nbytes, link_bw_gbps: float | None = None):
    """Point-to-point activation transfer between pipeline stages: the measured curve when the
    calibration has one (`sendrecv_curve`), else latency + bytes / (eff * link bandwidth)."""
    if cal.sendrecv_curve is not None:
        return cal.sendrecv_curve.seconds(nbytes)
    bw = (link_bw_gbps or gpu.link_bw_gbps) * 1e9 * cal.sendrecv_bw_eff
    return sendrecv_latency_s(gpu, cal) + nbytes / bw
