"""Latency profiles behind simulated engines.

``BatchProfile``: non-LLM engines, latency of a batch of ``batch`` items of ``tokens`` tokens each.
``LatencyProfile``: LLM engines, prefill of a batch of sequences (new tokens, tokens already in the
KV cache) and one decode step. The profiler's step model plugs in through
:class:`StepModelProfile`; tests and paper-calibrated configs use :class:`LinearLLMProfile`.
All times are seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np


class BatchProfile(Protocol):
    def batch_s(self, batch: int, tokens: float) -> float: ...


class LatencyProfile(Protocol):
    def prefill_s(self, new_tokens: Sequence[int], cached_tokens: Sequence[int]) -> float: ...

    def decode_step_s(self, batch: int, context_tokens: int) -> float: ...


@dataclass(frozen=True)
class TableProfile:
    """Measured/estimated grid: ``latency_ms[t][b]`` for ``tokens[t]`` x ``batch_sizes[b]``.
    Linear interpolation in tokens (clamped at the ends, never below 0) and in batch (linear
    extrapolation beyond the largest batch from the last segment)."""
    batch_sizes: tuple[int, ...]
    tokens: tuple[int, ...]
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
    """Prefill: ``base + per_token * sum(n) + attn * sum(n * (cached + n/2)) / 1000`` ms.
    Decode step: ``base + per_seq * batch + per_kctx * context_tokens / 1000`` ms."""
    prefill_base_ms: float
    prefill_per_token_ms: float
    prefill_attn_ms: float
    decode_base_ms: float
    decode_per_seq_ms: float
    decode_per_kctx_ms: float

    def prefill_s(self, new_tokens: Sequence[int], cached_tokens: Sequence[int]) -> float:
        n = np.asarray(new_tokens, float)
        c = np.asarray(cached_tokens, float)
        attn = float(np.sum(n * (c + n / 2))) / 1e3
        return (self.prefill_base_ms + self.prefill_per_token_ms * float(n.sum()) + self.prefill_attn_ms * attn) / 1e3

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        return (self.decode_base_ms + self.decode_per_seq_ms * batch + self.decode_per_kctx_ms * context_tokens / 1e3) / 1e3


class StepModelProfile:
    """Adapter from the profiler's analytic step model (``profiler.analytic``) to LatencyProfile.

    ``step_s(prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens)``: we pass
    the new tokens and the profiler's attention term ``sum((cached + n)^2 - cached^2)``, so a
    FullPrefilling pays attention over its cached prefix but never recomputes it. Decode steps go
    through ``step_s`` with the batch's *total* context (``decode_step_s`` there takes the mean)."""

    def __init__(self, step_model: Any) -> None:
        self._sm = step_model

    def prefill_s(self, new_tokens: Sequence[int], cached_tokens: Sequence[int]) -> float:
        attn = float(sum(int(n) * (int(n) + 2 * int(c)) for n, c in zip(new_tokens, cached_tokens)))
        return float(self._sm.step_s(int(sum(new_tokens)), attn, 0, 0.0, prefill_seqs=max(1, len(new_tokens))))

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        return float(self._sm.step_s(0, 0.0, batch, float(context_tokens)))


def profiler_llm_profile(model: str, gpu: str, *, tp: int = 1, pp: int = 1) -> StepModelProfile:
    """The profiler's analytic step model for ``model`` on ``gpu`` (imported lazily)."""
    from profiler.analytic import AnalyticModel  # noqa: PLC0415 - optional, owned by profiler/
    from profiler.catalog import load_gpus, load_models  # noqa: PLC0415
    models, gpus = load_models(), load_gpus()
    if model not in models:
        raise KeyError(f"unknown model {model!r}; known: {', '.join(sorted(models))}")
    if gpu not in gpus:
        raise KeyError(f"unknown gpu {gpu!r}; known: {', '.join(sorted(gpus))}")
    return StepModelProfile(AnalyticModel().step_model(models[model], gpus[gpu], tp, pp))


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
