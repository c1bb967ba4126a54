"""``perf.capacity_rps``: the calls per second one instance serves while its calls keep a latency budget.

The rule (docs/resolve.md, "Capacity"): calls arrive as a Poisson process at rate ``lam`` with the
sizes of the task's trace: cells ``k`` of weight ``w_k`` whose prompt and output are the stage's
mean sizes times the cell's scales (``size_cells`` of configs/task_tokens.yaml). One instance
runs them as the simulated engine does (continuous batching, chunked prefill: each step carries
the pending prefill with the running decodes, so prefill stalls them):

* a call's prefill takes ``f_k`` (the step model, batch 1, one output token); prefill keeps the
  engine busy a share ``rho = lam E[f]`` of the time;
* its decode takes ``D_k = (O_k - 1) tau(n)``: ``tau(n)`` the time per output token in a batch of
  ``n`` mean-size calls, ``n = 1 + lam E[D] / (1 - rho)`` (the call and those decoding beside it,
  Little's law), at most ``b``;
* the prefills arriving meanwhile stretch the decode to the *delay busy period* of an M/G/1 queue
  whose priority work is prefill: mean ``D_k / (1 - rho)``, variance ``D_k lam E[f^2] / (1 - rho)^3``.
  The call's time in its slot, ``S_k = f_k`` + that, is taken as normal;
* a call waits for one of ``b`` KV slots (:func:`kv_slots` of the mean call): M/G/b with
  ``P(wait > 0)`` = Erlang C(``b``, ``lam E[S]``) and an exponential tail of rate
  ``(b / E[S] - lam) x 2 / (1 + cs2)`` (Allen-Cunneen's ``(1 + cs2) / 2`` on M/M/b's; ``cs2`` of ``S``);
* ``P(latency > budget) = sum_k w_k P(S_k + wait > budget)`` (normal plus exponential: ex-Gaussian).

Its capacity is the highest ``lam`` keeping that within ``tail_q`` (0.01: the p99 within the
budget); 0.0 when the size tail alone (an unloaded instance) misses more than ``tail_q`` of calls.

The budget of a call is the share of the task's latency SLO its stage would get if the whole
workflow ran on this model and config: ``latency_s x SLO / workflow latency`` (at least
``(1 + latency_slack) x latency_s``; ``selector.resolve.call_budget_s``).

Pure arithmetic on the latency model (``latency(batch, prompt, output)``, seconds), about a
hundred latency calls a row, so ``python -m selector resolve`` stays fast; ``harness.capacity``
checks the rule against the simulator (tests/harness/test_capacity.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: the latency quantile the budget bounds (0.01: 99% of calls within it, goodput 0.99)
TAIL_Q = 0.01
#: one cell: the trace's mean sizes (a trace without a size mix)
MEAN_CELL = ((1.0, 1.0, 1.0),)
#: the rate's relative tolerance and the batch fixed point's limit
_XTOL, _FIXED = 1e-3, 12

Latency = Callable[[int, int, int], float]


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in M/M/``servers`` at ``offered`` erlangs (< servers)."""
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1.0 - rho * (1.0 - b))


def kv_slots(prompt: int, output: int, *, kv_tokens: int, block_size: int, max_num_seqs: int) -> int:
    """Calls whose whole KV (prompt + output, in blocks) fit ``kv_tokens``, at most ``max_num_seqs``."""
    per_call = math.ceil((prompt + output) / block_size) * block_size
    return max(1, min(max_num_seqs, kv_tokens // per_call))


def delay_tail(slack_s, mean, var, wait_p, theta) -> np.ndarray:
    """``P(X + Y > slack_s)``: ``X`` gamma with ``mean`` and ``var`` (``var`` 0: the point ``mean``),
    ``Y`` 0 with probability ``1 - wait_p`` else exponential of rate ``theta`` (all broadcast).
    Closed form: the gamma's survival plus ``wait_p e^{-theta t} E[e^{theta X}; X < t]``, the
    latter the gamma tilted by ``theta`` (when its scale allows; else ``X`` at its mean there)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):    # huge budgets: tails clip to 0..1
        return _delay_tail(slack_s, mean, var, wait_p, theta)


def _delay_tail(slack_s, mean, var, wait_p, theta) -> np.ndarray:
    from scipy.special import gammainc, gammaincc
    t, m = np.asarray(slack_s, float), np.maximum(np.asarray(mean, float), 1e-12)
    v = np.maximum(np.asarray(var, float), 1e-24 * m * m)
    k, scale = m * m / v, v / m
    pos = np.maximum(t, 0.0)
    survive = np.where(np.asarray(mean, float) <= 1e-12, 0.0, gammaincc(k, pos / scale))   # no delay: none
    if np.all(np.asarray(wait_p) <= 0.0):
        return np.where(t < 0, 1.0, survive)
    ts = theta * scale
    ok = ts < 1.0 - 1e-3
    log_mgf = -k * np.log1p(-np.where(ok, ts, 0.0))                   # log E[e^{theta X}]
    tilted = np.exp(np.minimum(-theta * pos + log_mgf, 0.0)) * gammainc(k, pos * np.where(ok, 1.0 - ts, 1.0) / scale)
    at_mean = (1.0 - survive) * np.exp(-theta * np.maximum(pos - m, 0.0))
    waited = wait_p * np.where(ok, tilted, at_mean)
    return np.where(t < 0, 1.0, np.minimum(1.0, survive + waited))


class CallMix:
    """One stage's calls on one instance (module docstring): the cells' prefill times and decode
    lengths, and ``tau(n)`` from ``latency`` at batch 1 and at the slots."""

    def __init__(self, latency: Latency, prompt: int, output: int, slots: int,
                 cells: Sequence[Sequence[float]] = MEAN_CELL) -> None:
        c = np.asarray(cells, dtype=float)
        self.w = c[:, 0] / c[:, 0].sum()
        ps = np.maximum(1, np.rint(prompt * c[:, 1])).astype(int)
        os_ = np.maximum(1, np.rint(output * c[:, 2])).astype(int)
        uniq, back = np.unique(ps, return_inverse=True)          # cells share their prompt bin's size
        self.f = np.array([latency(1, int(p), 1) for p in uniq])[back]
        self.dec = (os_ - 1).astype(float)
        self.ef, self.ef2, self.ef3 = (float(self.w @ self.f ** k) for k in (1, 2, 3))
        self.ed = float(self.w @ self.dec)                             # mean decode tokens
        self.slots = slots
        o = max(output, 2)
        self.tau1, self.tau_b = ((latency(b, prompt, o) - latency(b, prompt, 1)) / (o - 1) for b in (1, slots))

    def tau(self, n: float) -> float:
        """Seconds per output token in a batch of ``n`` (1 to the slots): linear between the latency
        model's batch 1 and full slots (a decode step reads the weights once and each sequence's
        KV: on the analytic model the chord is within 4% of batches 2, 4, ..., 256)."""
        if self.slots == 1:
            return self.tau1
        x = min(float(self.slots), max(1.0, n))
        return self.tau1 + (self.tau_b - self.tau1) * (x - 1.0) / (self.slots - 1)

    def max_rate(self) -> float:
        """A rate past which the instance is unstable (prefill alone, or the slots, saturate)."""
        return min(1.0 / self.ef, self.slots / float(self.w @ (self.f + self.dec * self.tau1)))

    def unloaded_s(self, tail_q: float = TAIL_Q) -> float:
        """The unloaded call latency that all but ``tail_q`` of calls keep (the p99 at 0.01): the
        cells' batch-1 latencies, weighted."""
        s0 = self.f + self.dec * self.tau1
        order = np.argsort(-s0)
        above = np.cumsum(self.w[order])
        return float(s0[order[int(np.searchsorted(above, tail_q, side="right"))]])

    def tail(self, lam: float, budget_s: float) -> float:
        """``P(latency > budget_s)`` at Poisson rate ``lam`` (1.0 past stability)."""
        rho = lam * self.ef
        if rho >= 1.0:
            return 1.0
        stall = 1.0 / (1.0 - rho)
        n = 1.0
        for _ in range(_FIXED):                                         # the batch a call decodes in
            n_next = min(float(self.slots), 1.0 + lam * self.ed * self.tau(n) * stall)
            if abs(n_next - n) < 1e-3:
                break
            n = n_next
        d = self.dec * self.tau(n)
        queue = lam * self.ef2 * stall / 2.0                            # Pollaczek-Khinchine
        delay = queue + d * (rho * stall)                               # random: gamma (delay_tail)
        var = (lam * self.ef3 * stall / 3.0 + queue * queue) + d * (lam * self.ef2 * stall ** 3)
        fixed = self.f + d
        mu = fixed + delay
        es = float(self.w @ mu)
        offered = lam * es
        if offered >= self.slots:
            return 1.0
        cs2 = float(self.w @ (mu * mu + var)) / (es * es) - 1.0
        wait_p = erlang_c(self.slots, offered) if lam > 0 else 0.0
        theta = (self.slots / es - lam) * 2.0 / (1.0 + cs2)
        return float(self.w @ delay_tail(budget_s - fixed, delay, var, wait_p, theta))


def capacity_rps(mix: CallMix, budget_s: float, *, tail_q: float = TAIL_Q) -> float:
    """Calls/s of one instance (module docstring) whose calls are ``mix``: the highest rate where
    :meth:`CallMix.tail` is within ``tail_q`` (it grows with the rate and is 1.0 past stability),
    by regula falsi with the Illinois step on the log of the tail over ``[0, max_rate]``, to
    ``_XTOL`` of the rate found (at least ``_XTOL ** 2`` of the range); 0.0 when the unloaded
    tail already exceeds ``tail_q``."""
    def g(lam: float) -> float:
        return math.log(max(mix.tail(lam, budget_s), 1e-12) / tail_q)

    lo, g_lo = 0.0, g(0.0)
    if g_lo > 0:
        return 0.0
    hi = mix.max_rate()
    g_hi, side, floor = -math.log(tail_q), 0, _XTOL * hi
    while hi - lo > (tol := _XTOL * max(lo, floor)):
        x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo)
        x = min(max(x, lo + 0.5 * tol), hi - 0.5 * tol)
        gx = g(x)
        if gx <= 0:
            lo, g_lo = x, gx
            g_hi, side = (g_hi / 2, -1) if side == -1 else (g_hi, -1)
        else:
            hi, g_hi = x, gx
            g_lo, side = (g_lo / 2, 1) if side == 1 else (g_lo, 1)
    return lo
