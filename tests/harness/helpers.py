"""Small fakes shared by the harness tests."""
from __future__ import annotations

import numpy as np

from harness.trace import Trace


class LinearStep:
    """step = fixed + per-token * (prefill + decode tokens); records every call."""

    def __init__(self, fixed_s: float = 0.01, per_token_s: float = 1e-4) -> None:
        self.fixed_s, self.per_token_s = fixed_s, per_token_s
        self.calls: list[tuple[int, float, int, float, int]] = []
        self.weights_gb, self.kv_gb_per_token = 1.0, 1e-4

    def step_s(self, prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens, *,
               prefill_seqs=1):
        self.calls.append((prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens,
                           prefill_seqs))
        return self.fixed_s + self.per_token_s * (prefill_tokens + decode_batch)

    # memory interface of profiler.analytic.StepModel that profiler.engine.kv_gb reads: one GPU,
    # 0.5 GB of activation in all (workspace), nothing for logits or runtime overhead
    gpus, runtime_overhead_gb = 1, 0.0

    def workspace_gb(self, max_batch_tokens):
        return 0.5

    def logits_gb(self, max_seqs, bytes_per_logit=4.0):
        return 0.0

    def activation_gb(self, max_batch_tokens, max_seqs=1):
        return 0.5


class ConstStep(LinearStep):
    """Every iteration takes ``service_s``."""

    def __init__(self, service_s: float) -> None:
        super().__init__(service_s, 0.0)


def make_trace(arrivals, prompt, output, name: str = "t") -> Trace:
    a = np.asarray(arrivals, dtype=float)
    n = len(a)
    p = np.broadcast_to(np.asarray(prompt, dtype=np.int64), (n,)).copy()
    o = np.broadcast_to(np.asarray(output, dtype=np.int64), (n,)).copy()
    return Trace(name, a - a[0], p, o)


def poisson_trace(rate_rps: float, n: int, prompt, output, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    return make_trace(a, prompt, output)
