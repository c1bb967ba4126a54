"""The capacity rule of selector/capacity.py: Erlang C, the delay tail, the call mix and the budget."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from selector.capacity import CallMix, capacity_rps, delay_tail, erlang_c, kv_slots
from selector.resolve import call_budget_s


def test_erlang_c_known_values() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)             # M/M/1: P(wait) = rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)           # textbook: 2 servers, 1 erlang


def test_delay_tail_is_gamma_plus_exponential() -> None:
    t, m, v, p, th = 2.0, 1.0, 0.25, 0.3, 1.5
    g = stats.gamma(m * m / v, scale=v / m)
    inner, _ = integrate.quad(lambda x: g.pdf(x) * math.exp(-th * (t - x)), 0.0, t)
    assert delay_tail(np.array([t]), np.array([m]), np.array([v]), p, th)[0] == pytest.approx(g.sf(t) + p * inner,
                                                                                           rel=1e-6)
    # a point delay: the exponential wait alone beyond it; a negative slack always misses
    assert delay_tail(np.array([2.0]), np.array([0.5]), np.array([0.0]), p, th)[0] == pytest.approx(
        p * math.exp(-th * 1.5))
    assert delay_tail(np.array([-0.1]), np.array([0.5]), np.array([0.1]), p, th)[0] == 1.0
    # a tilt past the gamma's scale (th * scale >= 1) stays a probability
    assert 0.0 <= delay_tail(np.array([1.0]), np.array([1.0]), np.array([4.0]), 0.5, 2.0)[0] <= 1.0


def _latency(b: int, prompt: int, output: int) -> float:
    """A toy step model: prefill 0.1 ms a token, decode 10 ms a token growing 5% per batched call."""
    return 1e-4 * prompt + (output - 1) * 0.01 * (1 + 0.05 * (b - 1))


CELLS = ((0.5, 0.5, 0.5), (0.3, 1.0, 1.0), (0.15, 1.5, 2.0), (0.05, 2.0, 3.0))


def test_unloaded_tail_is_the_size_tail() -> None:
    mix = CallMix(_latency, 1000, 100, 8, CELLS)
    sizes = [_latency(1, round(1000 * p), round(100 * o)) for _, p, o in CELLS]   # 0.54, 1.09, 2.14, 3.19 s
    assert mix.tail(0.0, 2.5) == pytest.approx(0.05)
    assert mix.tail(0.0, 3.5) == 0.0
    assert sizes[2] < 2.5 < sizes[3]


def test_tail_grows_with_load_and_capacity_sits_at_the_quantile() -> None:
    mix = CallMix(_latency, 1000, 100, 8, CELLS)
    tails = [mix.tail(lam, 4.0) for lam in (0.0, 0.5, 1.0, 2.0, 3.0)]
    assert tails == sorted(tails) and tails[0] == 0.0 and tails[-1] > 0.01
    cap = capacity_rps(CallMix(_latency, 1000, 100, 8, CELLS), 4.0)
    assert mix.tail(cap, 4.0) <= 0.01 < mix.tail(cap * 1.01, 4.0)
    assert mix.tail(cap * 1.01, 4.0) < 0.02                     # the tail is continuous in the rate
    # a looser budget takes more load; two slots queue where eight do not
    assert capacity_rps(CallMix(_latency, 1000, 100, 8, CELLS), 6.0) > cap
    assert capacity_rps(CallMix(_latency, 1000, 100, 2, CELLS), 4.0) < cap


def test_unloaded_quantile_of_the_cells() -> None:
    mix = CallMix(_latency, 1000, 100, 8, CELLS)                  # 0.54, 1.09, 2.14, 3.19 s at 50/30/15/5%
    assert mix.unloaded_s(0.01) == pytest.approx(_latency(1, 2000, 300))
    assert mix.unloaded_s(0.06) == pytest.approx(_latency(1, 1500, 200))
    assert mix.tail(0.0, mix.unloaded_s(0.06)) <= 0.06 < mix.tail(0.0, mix.unloaded_s(0.06) - 1e-9)


def test_capacity_is_zero_when_the_size_tail_alone_misses() -> None:
    # 5% of calls take 3.19 s unloaded: no rate keeps 99% within 3 s
    assert capacity_rps(CallMix(_latency, 1000, 100, 8, CELLS), 3.0) == 0.0
    # the mean call alone (no size mix) fits the same budget at some rate
    assert capacity_rps(CallMix(_latency, 1000, 100, 8), 3.0) > 0.0


def test_prefill_stalls_decodes() -> None:
    """Prefill-heavy calls: the same decode, a longer prompt, less capacity (rho = lam E[f])."""
    light = capacity_rps(CallMix(_latency, 500, 100, 8, CELLS), 4.0)
    heavy = capacity_rps(CallMix(_latency, 4000, 100, 8, CELLS), 4.0)
    assert heavy < light


def test_kv_slots_and_budget() -> None:
    assert kv_slots(1000, 200, kv_tokens=16384, block_size=16, max_num_seqs=256) == 16384 // 1200
    assert kv_slots(10, 6, kv_tokens=1 << 30, block_size=16, max_num_seqs=256) == 256
    assert call_budget_s(2.0, 4.0, 12.0, 0.25) == pytest.approx(6.0)   # 3x room in the SLO
    assert call_budget_s(2.0, 4.0, 4.4, 0.25) == pytest.approx(2.5)    # at least 1.25x
