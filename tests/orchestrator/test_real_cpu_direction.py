"""teola_real_cpu's direction statement against a simulation given per (app, rate)."""
from __future__ import annotations

import pandas as pd

from experiments.kinds.teola_real_cpu import Params, _directions


def _summary() -> pd.DataFrame:
    rows = [("naive_rag", 0.2, 0.95, 0.88, 1.05), ("naive_rag", 0.4, 0.92, 0.78, 1.26),
            ("advanced_rag", 0.1, 0.49, 0.33, 0.65)]
    return pd.DataFrame([{"app": a, "rate_rps": r, "teola_vs_best": x, "teola_vs_best_min": lo,
                          "teola_vs_best_max": hi, "best_baseline": "b", "saturated": False} for a, r, x, lo, hi in rows])


def test_direction_uses_the_simulation_of_each_rate_and_names_its_source():
    p = Params(simulation_vs_best={"naive_rag": {0.2: 1.01, 0.4: 0.9}, "advanced_rag": 1.2},
               simulation_source="the CPU deployment simulated")
    lines = [x for x in _directions(_summary(), p) if x]
    assert "the CPU deployment simulated" in lines[0]
    naive02, naive04, adv = lines[1:]
    assert "simulation 1.01x (faster)" in naive02 and "disagrees in the mean" in naive02
    assert "simulation 0.90x (slower)" in naive04 and "agrees in the mean, not in every repeat" in naive04
    assert "simulation 1.20x (faster)" in adv and adv.endswith("disagrees")


def test_a_rate_the_simulation_did_not_run_gets_no_verdict():
    p = Params(simulation_vs_best={"naive_rag": {0.3: 1.0}})
    naive02 = [x for x in _directions(_summary(), p) if x][1]
    assert "simulation" not in naive02
