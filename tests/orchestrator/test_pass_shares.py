"""Each pass's share of Teola's speedup (experiments/kinds/_teola_passes.py): Shapley values of
ln(latency) over the pass subsets multiply back to the total exactly."""
from __future__ import annotations

import math

import pytest

from experiments.kinds import _teola_passes as by_pass
from orchestrator.schemes import ALL


def _lat(gain: dict[str, float], pair: float) -> dict[tuple[str, ...], float]:
    """Latency of each subset: additive log-gains plus one interaction between the first two passes."""
    out = {}
    for s in by_pass.subsets():
        v = sum(gain[p] for p in s) + (pair if {ALL[0], ALL[1]} <= set(s) else 0.0)
        out[s] = 2.0 * math.exp(-v)
    return out


def test_shapley_splits_an_interaction_evenly_and_sums_to_the_total():
    gain = {p: 0.1 * (i + 1) for i, p in enumerate(ALL)}
    lat = _lat(gain, pair=0.2)
    phi = by_pass.shapley(lat)
    assert phi[ALL[0]] == pytest.approx(gain[ALL[0]] + 0.1) and phi[ALL[2]] == pytest.approx(gain[ALL[2]])
    assert sum(phi.values()) == pytest.approx(math.log(lat[()] / lat[tuple(ALL)]))
    dec = by_pass.decompose("app", 1.0, "load", lat, "base", 3.0)
    parts, total = dec[~dec.part.str.startswith("total")], dec[dec.part.str.startswith("total")].iloc[0]
    assert parts.factor.prod() == pytest.approx(total.factor) and total.factor == pytest.approx(3.0 / lat[tuple(ALL)])
    assert total.share_pct == pytest.approx(100.0) and parts.share_pct.sum() == pytest.approx(100.0)
    # off-alone factors miss the total by the interaction, which the table reports
    assert not total.off_alone == pytest.approx(total.factor)


def test_subsets_with_the_same_graphs_share_one_representative():
    reps = by_pass.classes(lambda s: ["x"] if "prune" not in s else ["y"])
    assert len(set(reps.values())) == 2 and reps[()] == tuple(p for p in ALL if p != "prune")
    assert by_pass.scheme_of(tuple(ALL)) == "teola" and by_pass.scheme_of(()) == "teola-no-par-pipe"


def test_decomposition_over_the_applied_passes_sums_to_their_total():
    """Teola applies a subset (the guided optimiser's choice): the Shapley factors are over it, a
    pass left out has factor 1, and the factors still multiply to baseline / L(applied)."""
    gain = {p: 0.1 * (i + 1) for i, p in enumerate(ALL)}
    lat = _lat(gain, pair=0.2)
    applied = tuple(p for p in ALL if p != ALL[2])
    dec = by_pass.decompose("app", 1.0, "load", lat, "base", 3.0, applied)
    parts, total = dec[~dec.part.str.startswith("total")], dec[dec.part.str.startswith("total")].iloc[0]
    assert parts.factor.prod() == pytest.approx(total.factor) and total.factor == pytest.approx(3.0 / lat[applied])
    left_out = dec[dec.part == ALL[2]].iloc[0]
    assert left_out.factor == pytest.approx(1.0) and not left_out.applied
    assert dec[dec.part == ALL[0]].factor.iloc[0] == pytest.approx(math.exp(gain[ALL[0]] + 0.1))
