"""The capacity rule of selector/capacity.py: Erlang C, the tail-bounded rate and the budget."""
from __future__ import annotations

import math

import pytest

from selector.capacity import capacity_rps, erlang_c, kv_slots, slot_rate
from selector.resolve import call_budget_s


def test_erlang_c_known_values() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)             # M/M/1: P(wait) = rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)           # textbook: 2 servers, 1 erlang


def test_slot_rate_keeps_the_tail() -> None:
    lam = slot_rate(1, 1.0, 3.0)                               # M/M/1: P(W > t) = rho e^{-(mu - lam) t}
    assert lam * math.exp(-(1 - lam) * 3.0) == pytest.approx(0.01, rel=1e-6)
    assert slot_rate(1, 1.0, -0.1) == 0.0
    assert slot_rate(4, 1.0, 3.0) > 2 * slot_rate(2, 1.0, 3.0)  # pooling: more slots, more per slot
    assert slot_rate(2, 1.0, 6.0) > slot_rate(2, 1.0, 3.0)      # a looser budget takes more load


def test_capacity_uses_slots_within_the_budget() -> None:
    flat = capacity_rps(lambda b: 1.0, 4.0, 8)                  # batching is free: 8 slots
    assert slot_rate(8, 1.0, 3.0) == pytest.approx(flat)
    steep = capacity_rps(lambda b: float(b), 4.0, 8)            # a batch of b takes b s: 4 slots at most
    assert steep == pytest.approx(max(slot_rate(b, b, 4.0 - b) for b in (1, 2, 4)))
    assert kv_slots(1000, 200, kv_tokens=16384, block_size=16, max_num_seqs=256) == 16384 // 1200
    assert kv_slots(10, 6, kv_tokens=1 << 30, block_size=16, max_num_seqs=256) == 256


def test_budget_is_the_slo_share_or_the_slack() -> None:
    assert call_budget_s(2.0, 4.0, 12.0, 0.25) == pytest.approx(6.0)   # 3x room in the SLO
    assert call_budget_s(2.0, 4.0, 4.4, 0.25) == pytest.approx(2.5)    # at least 1.25x
