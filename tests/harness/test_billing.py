"""Dollars of a replay (docs/metrics.md, "dollars of a replay"): whole GPUs held x seconds, each
GPU once however many instances share it, at its type's price per GPU-hour."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness.billing import gpu_bill
from harness.cluster import SimTask, Workload
from harness.replay import cell_metrics
from selector.deployment import InstanceSpec


def _inst(iid: str, gpus: tuple[int, ...], gpu_type: str = "gpu", mem_gb: float = 10.0) -> InstanceSpec:
    return InstanceSpec(iid, "m", len(gpus), 1, gpus, mem_gb, gpu_type=gpu_type)


def test_a_shared_gpu_counts_once_over_the_union_of_its_spans() -> None:
    a, b = _inst("a", (0,)), _inst("b", (0, 1))          # both on GPU 0; b also on GPU 1
    gpu_s, usd = gpu_bill([(a, 0.0, 3600.0), (b, 1800.0, 7200.0)], {"gpu": 2.0})
    # GPU 0 held [0, 7200) once (not 3600 + 5400), GPU 1 held [1800, 7200)
    assert gpu_s == pytest.approx(7200.0 + 5400.0)
    assert usd == pytest.approx((7200.0 + 5400.0) / 3600.0 * 2.0)


def test_disjoint_spans_on_one_gpu_add_and_empty_spans_hold_nothing() -> None:
    a, b = _inst("a", (3,)), _inst("b", (3,))
    gpu_s, _ = gpu_bill([(a, 0.0, 10.0), (b, 20.0, 30.0), (_inst("c", (4,)), 5.0, 5.0)], None)
    assert gpu_s == pytest.approx(20.0)


def test_priced_and_unpriced_types() -> None:
    h100, a6000 = _inst("h", (0, 1), "h100-sxm"), _inst("a", (2,), "a6000")
    spans = [(h100, 0.0, 1800.0), (a6000, 0.0, 3600.0)]
    gpu_s, usd = gpu_bill(spans, {"h100-sxm": 3.99, "a6000": 1.09})
    assert gpu_s == pytest.approx(2 * 1800.0 + 3600.0)
    assert usd == pytest.approx(2 * 0.5 * 3.99 + 1.0 * 1.09)
    assert math.isnan(gpu_bill(spans, {"h100-sxm": 3.99})[1])    # a held type without a price
    assert math.isnan(gpu_bill(spans, None)[1])                  # a cluster without prices
    assert gpu_bill([(h100, 0.0, 1800.0)], {"h100-sxm": 3.99})[1] == pytest.approx(3.99)


def test_cell_metrics_carry_the_dollar_columns() -> None:
    one = np.ones(2)
    wl = Workload(np.array([0.0, 1.0]), np.array([0, 0]), one, one, 0.5 * one)
    insts = [_inst("a", (0,)), _inst("b", (0, 1))]
    s, _ = cell_metrics([SimTask("t", 10.0, ())], insts, wl, done_s=np.array([2.0, 3.0]),
                        failed=np.zeros(2, bool), acc_ok=np.ones(2, bool), residency_s=3600.0,
                        price_per_gb_s=1e-6, window_s=1800.0, drain_cap_s=0.0, prices={"gpu": 1.09})
    assert s["gpu_s_held"] == pytest.approx(2 * 3600.0) and s["usd"] == pytest.approx(2 * 1.09)
    assert s["usd_window"] == pytest.approx(1.09)                # 2 GPUs x 1800 s
    s, _ = cell_metrics([SimTask("t", 10.0, ())], insts, wl, done_s=np.array([2.0, 3.0]),
                        failed=np.zeros(2, bool), acc_ok=np.ones(2, bool), residency_s=3600.0, price_per_gb_s=1e-6)
    assert s["gpu_s_held"] == pytest.approx(7200.0) and math.isnan(s["usd"])
