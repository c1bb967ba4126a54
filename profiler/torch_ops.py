"""Per-operator timings of one transformer layer in vidur's `mlp.csv` format (torch + stdlib).

What vidur's profiler (and MaverIQ's A6000 data) records, so a GPU measured here goes through
the same operator fit as vidur's GPUs (`python -m profiler calibrate-vidur --ops GPU=CSV`):
the four GEMMs of a layer sharded for TP t on one GPU (QKV, attention output, gate+up, down)
and the memory-bound kernels (two RMSNorms, RoPE on q and k, SiLU*mul, residual add), each the
median of `repeats` timed calls (CUDA events on GPU) at every token count. Columns:
`time_stats.<op>.median` in ms plus n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size,
use_gated_mlp, num_tokens, num_tensor_parallel_workers. Plain PyTorch kernels: the norms and
RoPE are unfused (vLLM's are fused custom ops), so memory-bound times can exceed vidur's.
"""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
SHAPE_KEYS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
#: layer shapes (MaverIQ's A6000 set, so the two GPUs compare op by op) and grids per mode
MODES = {
    "gpu": {"shapes": {"llama-2-7b": (32, 32, 4096, 11008, 32000),
                       "llama-2-70b": (64, 8, 8192, 28672, 32000)},
            "tokens": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], "tp": [1, 2, 4, 8],
            "warmup": 2, "repeats": 7},
    "tiny": {"shapes": {"tiny-llama": (4, 2, 256, 688, 1024)}, "tokens": [1, 4, 16, 64],
             "tp": [1, 2], "warmup": 1, "repeats": 3},
}


def _median_ms(time_s: Callable[[Callable[[], object]], float], fn: Callable[[], object],
               warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    return 1e3 * statistics.median(time_s(fn) for _ in range(repeats))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


def layer_ops(shape: tuple[int, int, int, int, int], tp: int, tokens: int, *, device: torch.device,
              dtype: torch.dtype, time_s: Callable[[Callable[[], object]], float], warmup: int,
              repeats: int) -> dict[str, float]:
    """Median ms of each operator of one layer of `shape` sharded `tp` ways, at `tokens` tokens."""
    heads, kv_heads, h, ffn, _ = shape
    d, qh, kvh, f = h // heads, heads // tp, max(1, kv_heads // tp), ffn // tp
    fk = {"device": device, "dtype": dtype}
    x, res = torch.randn(tokens, h, **fk), torch.randn(tokens, h, **fk)
    w = {"attn_pre_proj": torch.randn((qh + 2 * kvh) * d, h, **fk) * 0.02,
         "attn_post_proj": torch.randn(h, qh * d, **fk) * 0.02,
         "mlp_up_proj": torch.randn(2 * f, h, **fk) * 0.02,
         "mlp_down_proj": torch.randn(h, f, **fk) * 0.02}
    ins = {"attn_pre_proj": x, "attn_post_proj": torch.randn(tokens, qh * d, **fk),
           "mlp_up_proj": x, "mlp_down_proj": torch.randn(tokens, f, **fk)}
    norm_w = torch.ones(h, **fk)
    q, k = torch.randn(tokens, qh, d, **fk), torch.randn(tokens, kvh, d, **fk)
    cos, sin = torch.randn(tokens, 1, d // 2, **fk), torch.randn(tokens, 1, d // 2, **fk)
    gate_up = torch.randn(tokens, 2 * f, **fk)
    run: dict[str, Callable[[], object]] = {n: (lambda n=n: F.linear(ins[n], w[n])) for n in GEMMS}
    run.update({
        "input_layernorm": lambda: _rms(x, norm_w),
        "post_attention_layernorm": lambda: _rms(res, norm_w),
        "attn_rope": lambda: (_rope(q, cos, sin), _rope(k, cos, sin)),
        "mlp_act": lambda: F.silu(gate_up[:, :f]) * gate_up[:, f:],
        "add": lambda: x + res,
    })
    with torch.inference_mode():
        return {n: _median_ms(time_s, fn, warmup, repeats) for n, fn in run.items()}


def measure_ops(mode: str, *, device: torch.device, dtype: torch.dtype,
                time_s: Callable[[Callable[[], object]], float], deadline: float,
                on_row: Callable[[dict], None] | None = None) -> tuple[list[dict], bool]:
    """All rows of `mode`'s grid (vidur mlp.csv columns) until `deadline` (time.monotonic());
    returns (rows, complete)."""
    m = MODES[mode]
    rows: list[dict] = []
    for name, shape in m["shapes"].items():
        for tp in m["tp"]:
            for tokens in m["tokens"]:
                if time.monotonic() > deadline:
                    return rows, False
                ms = layer_ops(shape, tp, tokens, device=device, dtype=dtype, time_s=time_s,
                               warmup=m["warmup"], repeats=m["repeats"])
                row = {"model": name, **{f"time_stats.{k}.median": v for k, v in ms.items()},
                       **dict(zip(SHAPE_KEYS, shape)), "use_gated_mlp": True, "num_tokens": tokens,
                       "num_tensor_parallel_workers": tp}
                rows.append(row)
                if on_row:
                    on_row(row)
    return rows, True


def write_mlp_csv(path: Path, rows: list[dict]) -> None:
    """Write rows in vidur's mlp.csv layout (readable by profiler.vidur_fit.load_ops_files)."""
    cols = ["model", *(f"time_stats.{k}.median" for k in GEMMS + ELEMENTWISE), *SHAPE_KEYS,
            "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.DictWriter(fh, fieldnames=cols)
        out.writeheader()
        out.writerows(rows)
