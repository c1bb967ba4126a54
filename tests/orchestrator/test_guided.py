"""Cost-model-guided pass application (orchestrator/guided.py): a pass is applied unless its cost
model says dropping it pays, and the choice is never costlier than applying no pass."""
from __future__ import annotations

import math

import pytest

from orchestrator.guided import choose_passes
from orchestrator.schemes import ALL


def _cost(gain: dict[str, float], calls: list | None = None):
    """Latency with additive log-gains per pass (a negative gain: the pass loses)."""
    def cost(s: tuple[str, ...]) -> float:
        if calls is not None:
            calls.append(s)
        return 2.0 * math.exp(-sum(gain[p] for p in s))
    return cost


def test_every_pass_that_pays_is_kept():
    assert choose_passes(_cost({p: 0.05 for p in ALL})) == tuple(ALL)


def test_a_losing_pass_is_dropped_and_a_neutral_one_kept():
    gain = {p: 0.05 for p in ALL} | {"prefill_split": -0.02, "stage": 0.0}
    assert choose_passes(_cost(gain)) == tuple(p for p in ALL if p != "prefill_split")


def test_a_loss_within_min_gain_keeps_the_pass():
    gain = {p: 0.05 for p in ALL} | {"prefill_split": -0.001}
    assert choose_passes(_cost(gain), min_gain=0.005) == tuple(ALL)
    assert "prefill_split" not in choose_passes(_cost(gain), min_gain=0.0)


def test_never_costlier_than_no_pass_and_each_subset_costed_once():
    # every pass loses alone: elimination may stop at a local optimum, the empty set is the floor
    gain = {p: -0.01 for p in ALL}
    calls: list = []
    assert choose_passes(_cost(gain, calls)) == ()
    assert len(calls) == len(set(calls))


def test_min_gain_is_checked():
    with pytest.raises(ValueError, match="min_gain"):
        choose_passes(_cost({p: 0.0 for p in ALL}), min_gain=1.0)
