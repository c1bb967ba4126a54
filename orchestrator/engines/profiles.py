"""Latency profiles behind simulated engines.

``BatchProfile``: non-LLM engines, latency of a batch of ``batch`` items of ``tokens`` tokens each.
LLM engines are timed per iteration by a step model (``orchestrator.engines.llm_timing.StepTime``):
the profiler's ``StepModel`` (``profiler.steps.step_model``, the one cached adapter), or, for tests
and paper-calibrated configs, :class:`LinearLLMProfile`. All times are seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np


class BatchProfile(Protocol):
    def batch_s(self, batch: int, tokens: float) -> float: ...


@dataclass(frozen=True)
class TableProfile:
    """Measured/estimated grid: ``latency_ms[t][b]`` for ``tokens[t]`` x ``batch_sizes[b]``.
    Linear interpolation in tokens (clamped at the ends, never below 0) and in batch (linear
    extrapolation beyond the largest batch from the last segment)."""
    batch_sizes: tuple[int, ...]
    tokens: tuple[float, ...]
    latency_ms: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        if len(self.latency_ms) != len(self.tokens) or any(len(r) != len(self.batch_sizes) for r in self.latency_ms):
            raise ValueError("latency_ms must be len(tokens) rows of len(batch_sizes) values")
        if list(self.batch_sizes) != sorted(self.batch_sizes) or list(self.tokens) != sorted(self.tokens):
            raise ValueError("batch_sizes and tokens must be increasing")

    def _row(self, r: int, batch: float) -> float:
        b, y = np.asarray(self.batch_sizes, float), np.asarray(self.latency_ms[r], float)
        if batch > b[-1] and len(b) > 1:
            return float(y[-1] + (batch - b[-1]) * (y[-1] - y[-2]) / (b[-1] - b[-2]))
        return float(np.interp(batch, b, y))

    def batch_s(self, batch: int, tokens: float) -> float:
        rows = [self._row(r, batch) for r in range(len(self.tokens))]
        return max(0.0, float(np.interp(tokens, self.tokens, rows))) / 1e3


@dataclass(frozen=True)
class LinearProfile:
    """``base_ms + per_item_ms * batch + per_ktoken_ms * batch * tokens / 1000``."""
    base_ms: float
    per_item_ms: float = 0.0
    per_ktoken_ms: float = 0.0

    def batch_s(self, batch: int, tokens: float) -> float:
        return (self.base_ms + self.per_item_ms * batch + self.per_ktoken_ms * batch * tokens / 1e3) / 1e3


@dataclass(frozen=True)
class LinearLLMProfile:
    """Prefill pass: ``base + per_token * sum(n) + attn * sum(n * (cached + n/2)) / 1000`` ms.
    Decode step: ``base + per_seq * batch + per_kctx * context_tokens / 1000`` ms. An iteration
    with both (chunked prefill) pays both."""
    prefill_base_ms: float
    prefill_per_token_ms: float
    prefill_attn_ms: float
    decode_base_ms: float
    decode_per_seq_ms: float
    decode_per_kctx_ms: float

    def step_s(self, prefill_tokens: int, prefill_attn_tokens2: float, decode_batch: int,
               decode_context_tokens: float, *, prefill_seqs: int = 1) -> float:
        """One iteration (``StepTime``): ``sum(n * (cached + n/2)) = prefill_attn_tokens2 / 2``."""
        ms = 0.0
        if prefill_tokens:
            ms += (self.prefill_base_ms + self.prefill_per_token_ms * prefill_tokens
                   + self.prefill_attn_ms * prefill_attn_tokens2 / 2e3)
        if decode_batch:
            ms += self.decode_base_ms + self.decode_per_seq_ms * decode_batch + self.decode_per_kctx_ms * decode_context_tokens / 1e3
        return ms / 1e3


def max_efficient_batch(latency_s: Callable[[int], float], *, limit: int = 1024, min_gain: float = 1.05) -> int:
    """Double the batch while throughput (items/s) improves by at least ``min_gain``x (TO)."""
    b = 1
    thr = 1 / max(latency_s(1), 1e-12)
    while b * 2 <= limit:
        t2 = (b * 2) / max(latency_s(b * 2), 1e-12)
        if t2 < thr * min_gain:
            break
        b, thr = b * 2, t2
    return b
