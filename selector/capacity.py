"""``perf.capacity_rps``: the calls per second one instance serves while its calls keep a latency budget.

The rule (docs/resolve.md, "capacity"): an instance is ``b`` KV slots, each serving one call in
``latency(b)`` (the step model's latency of a batch of ``b`` such calls, so a slot is never
faster than when every slot is busy); calls arrive as a Poisson process and wait for a free slot
(M/M/b, Erlang C). Its capacity is the highest rate at which the tail ``tail_q`` (0.01: the p99)
of a call's latency, ``latency(b) + wait``, stays within the call's budget, maximised over
``b`` = 1, 2, 4, ... and the most calls the KV reserve holds (at most ``max_num_seqs``).

The budget of a call is the share of the task's latency SLO its stage would get if the whole
workflow ran on this model and config: ``latency_s x SLO / workflow latency`` (at least
``(1 + latency_slack) x latency_s``). A plan that meets the SLO at batch 1 therefore keeps meeting
it for 99% of requests at its planned rate, and a task whose SLO leaves room lets each instance
take more load before it breaks (the simulator's goodput does exactly that).

Pure arithmetic on the latency model (microseconds per row), so ``python -m selector resolve``
stays fast; ``harness.capacity`` checks the rule against the simulator (tests/harness).
"""
from __future__ import annotations

import math
from collections.abc import Callable

#: the latency quantile the budget bounds (0.01: 99% of calls within it, goodput 0.99)
TAIL_Q = 0.01


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in M/M/``servers`` at ``offered`` erlangs (< servers)."""
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1.0 - rho * (1.0 - b))


def slot_rate(servers: int, service_s: float, wait_s: float, *, tail_q: float = TAIL_Q) -> float:
    """The highest arrival rate at which M/M/``servers`` (mean service ``service_s``) keeps
    P(wait > ``wait_s``) <= ``tail_q`` (Erlang C); 0.0 when ``wait_s`` < 0."""
    if wait_s < 0:
        return 0.0
    mu = 1.0 / service_s

    def tail(lam: float) -> float:
        return erlang_c(servers, lam * service_s) * math.exp(-(servers * mu - lam) * wait_s)

    lo, hi = 0.0, servers * mu
    for _ in range(24):                   # 6e-8 of the bracket: far below the model's error
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tail(mid) <= tail_q else (lo, mid)
    return lo


def kv_slots(prompt: int, output: int, *, kv_tokens: int, block_size: int, max_num_seqs: int) -> int:
    """Calls whose whole KV (prompt + output, in blocks) fit ``kv_tokens``, at most ``max_num_seqs``."""
    per_call = math.ceil((prompt + output) / block_size) * block_size
    return max(1, min(max_num_seqs, kv_tokens // per_call))


def capacity_rps(latency: Callable[[int], float], budget_s: float, slots: int, *, tail_q: float = TAIL_Q) -> float:
    """Calls/s of one instance (module docstring); ``latency(b)``: one call in a batch of ``b``.
    Candidate sizes: powers of two up to ``m`` and ``m`` itself, ``m`` = the most slots whose
    batch latency is within the budget (binary search; latency grows with ``b``). Positive
    whenever ``budget_s > latency(1)`` (resolve's budget always is)."""
    lat = {1: latency(1)}
    if lat[1] > budget_s:
        return 0.0
    lo, hi = 1, slots + 1                       # latency(lo) <= budget < latency(hi) (hi: past the slots)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lat[mid] = latency(mid)
        lo, hi = (mid, hi) if lat[mid] <= budget_s else (lo, mid)
    best = 0.0
    for b in sorted({*(2 ** k for k in range(lo.bit_length())), lo}):
        t = lat[b] if b in lat else latency(b)
        best = max(best, slot_rate(b, t, budget_s - t, tail_q=tail_q))
    return best
