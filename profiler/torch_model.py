"""A compact Llama/Qwen/Mistral/Mixtral-style decoder in plain PyTorch with random weights.

Latency and memory do not depend on weight values, so no checkpoint is downloaded: the
architecture comes from the catalog numbers (`Arch`). Layers mirror what a serving engine
runs: fused QKV and gate+up GEMMs, RMSNorm, rotary embeddings, grouped-query attention
(SDPA) over a preallocated KV cache, SwiGLU MLP or top-k routed experts, and an LM head on
the last position of each sequence only.

Depends on torch and the standard library only (the GPU check runs it where nothing else is
installed); import this module only where torch is wanted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

ROPE_THETA = 500000.0
NORM_EPS = 1e-5
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Arch:
    """Decoder shape (catalog `ModelSpec` fields); `qkv_bias` is set for the Qwen family."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    experts: int = 1
    experts_per_token: int = 1
    tie_embeddings: bool = False
    qkv_bias: bool = False

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any]) -> "Arch":
        """From a catalog entry (dict or `ModelSpec.model_dump()`); extra keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: spec[k] for k in names if k in spec}
        kw.setdefault("qkv_bias", str(spec.get("family", "")).startswith("qwen"))
        return cls(**kw)

    def with_layers(self, layers: int) -> "Arch":
        return dataclasses.replace(self, layers=layers)


class KVCache:
    """K and V for every layer: [layers, batch, kv_heads, max_tokens, head_dim] each (zeros,
    so the memory is touched and counted as a serving engine's reserved cache would be)."""

    def __init__(self, arch: Arch, batch: int, max_tokens: int, *, device: torch.device | str,
                 dtype: torch.dtype) -> None:
        shape = (arch.layers, batch, arch.kv_heads, max_tokens, arch.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class _Attention(nn.Module):
    def __init__(self, a: Arch, fk: dict) -> None:
        super().__init__()
        self.a = a
        self.qkv = nn.Linear(a.hidden, (a.heads + 2 * a.kv_heads) * a.head_dim, bias=a.qkv_bias, **fk)
        self.o = nn.Linear(a.heads * a.head_dim, a.hidden, bias=False, **fk)

    def forward(self, x, cos, sin, cache: KVCache, layer: int, pos0: int):
        a, (b, t, _) = self.a, x.shape
        q, k, v = self.qkv(x).split([a.heads * a.head_dim, a.kv_heads * a.head_dim,
                                     a.kv_heads * a.head_dim], dim=-1)
        q = _rope(q.view(b, t, a.heads, a.head_dim).transpose(1, 2), cos, sin)
        k = _rope(k.view(b, t, a.kv_heads, a.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, t, a.kv_heads, a.head_dim).transpose(1, 2)
        end = pos0 + t
        cache.k[layer, :, :, pos0:end] = k
        cache.v[layer, :, :, pos0:end] = v
        keys, values = cache.k[layer, :, :, :end], cache.v[layer, :, :, :end]
        # a whole prompt is causal; one decode token attends to every cached position
        causal = t > 1
        if causal and pos0:
            raise ValueError("chunked prefill after a cached prefix is not modelled")
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=causal,
                                             enable_gqa=a.heads != a.kv_heads)
        return self.o(out.transpose(1, 2).reshape(b, t, a.heads * a.head_dim))


class _Mlp(nn.Module):
    def __init__(self, a: Arch, fk: dict) -> None:
        super().__init__()
        self.gate_up = nn.Linear(a.hidden, 2 * a.ffn, bias=False, **fk)
        self.down = nn.Linear(a.ffn, a.hidden, bias=False, **fk)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class _Moe(nn.Module):
    """Top-k routing over `experts` SwiGLU experts (Mixtral): softmax over the k chosen logits."""

    def __init__(self, a: Arch, fk: dict) -> None:
        super().__init__()
        self.k = a.experts_per_token
        self.router = nn.Linear(a.hidden, a.experts, bias=False, **fk)
        self.experts = nn.ModuleList(_Mlp(a, fk) for _ in range(a.experts))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, chosen = self.router(x).topk(self.k, dim=-1)
        weights = weights.softmax(dim=-1, dtype=torch.float32).to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * weights[rows, slot, None])
        return out.view(shape)


class _Block(nn.Module):
    def __init__(self, a: Arch, fk: dict) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(a.hidden, eps=NORM_EPS, **fk)
        self.attn = _Attention(a, fk)
        self.norm2 = nn.RMSNorm(a.hidden, eps=NORM_EPS, **fk)
        self.mlp = _Moe(a, fk) if a.experts > 1 else _Mlp(a, fk)

    def forward(self, x, cos, sin, cache, layer, pos0):
        x = x + self.attn(self.norm1(x), cos, sin, cache, layer, pos0)
        return x + self.mlp(self.norm2(x))


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Decoder(nn.Module):
    """Random-weight decoder; `forward(tokens, pos0, cache)` returns the greedy next token of
    each sequence ([batch] int64), computing logits for the last position only."""

    def __init__(self, arch: Arch, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.bfloat16, max_positions: int = 32768) -> None:
        super().__init__()
        fk = {"device": device, "dtype": dtype}
        self.arch = arch
        self.embed = nn.Embedding(arch.vocab, arch.hidden, **fk)
        self.blocks = nn.ModuleList(_Block(arch, fk) for _ in range(arch.layers))
        self.norm = nn.RMSNorm(arch.hidden, eps=NORM_EPS, **fk)
        self.head = nn.Linear(arch.hidden, arch.vocab, bias=False, **fk)
        if arch.tie_embeddings:
            self.head.weight = self.embed.weight
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, arch.head_dim, 2, device=device).float() / arch.head_dim)
        ang = torch.outer(torch.arange(max_positions, device=device).float(), inv)
        self.register_buffer("cos", ang.cos().to(dtype), persistent=False)
        self.register_buffer("sin", ang.sin().to(dtype), persistent=False)
        self.requires_grad_(False)

    @property
    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, pos0: int, cache: KVCache) -> torch.Tensor:
        t = tokens.shape[1]
        cos, sin = self.cos[pos0:pos0 + t], self.sin[pos0:pos0 + t]
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, cache, i, pos0)
        logits = self.head(self.norm(x)[:, -1])
        return logits.argmax(dim=-1)
