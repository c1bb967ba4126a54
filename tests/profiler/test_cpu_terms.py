"""CPU terms of the analytic model (overlap, cache spill) and the fingerprint layer pair."""

import pytest

from profiler.analytic import AnalyticModel
from profiler.calibration import Calibration, GpuCalibration, load_calibration, default_calibration_path
from profiler.fingerprint import extrapolate_row
from profiler.measured import all_gpus, all_models


def _tpot(gc: GpuCalibration, gpu: str, model: str = "small-llama", batch: int = 4) -> float:
    am = AnalyticModel(calibration=Calibration(gpus={gpu: gc}), dtype_bytes=4)
    return am.predict(all_models()[model], all_gpus()[gpu], tp=1, pp=1, batch=batch, prompt_tokens=128,
                      output_tokens=32).tpot_s


def test_defaults_keep_every_gpu_unchanged():
    cal = load_calibration(default_calibration_path())
    # a6000 fits its overlap on MaverIQ's operator data (docs/profiler.md); vidur's GPUs keep 1
    assert all(c.overlap == 1.0 for n, c in cal.gpus.items() if n != "a6000")
    assert 0.0 < cal.gpus["a6000"].overlap < 1.0
    assert all(c.spill_factor == 1.0 for c in cal.gpus.values())
    assert all(g.cache_mb is None for n, g in all_gpus().items() if n != "cpu")


def test_overlap_moves_between_roofline_and_sum():
    roof, half, serial = (_tpot(GpuCalibration(overlap=o), "cpu") for o in (1.0, 0.5, 0.0))
    assert roof < half < serial
    assert half == pytest.approx((roof + serial) / 2, rel=1e-9)  # linear in overlap


def test_spill_only_for_multi_row_gemms_beyond_the_device_cache():
    plain, spill = GpuCalibration(), GpuCalibration(spill_factor=2.0)
    assert _tpot(spill, "cpu", batch=1) == _tpot(plain, "cpu", batch=1)  # one row: GEMV
    assert _tpot(spill, "cpu", batch=4) > _tpot(plain, "cpu", batch=4)
    assert _tpot(spill, "h200", batch=4) == _tpot(plain, "h200", batch=4)  # no cache_mb


@pytest.mark.parametrize("pair", [(1, 2), (2, 4), (1, 3)])
def test_fingerprint_pair_is_exact_on_linear_costs(pair):
    base = dict(model="m", gpu="cpu", tp=1, pp=1, batch=1, prompt_tokens=8, output_tokens=4,
                activation_gb=0.5)

    def at(layers):  # fixed 3 + 2 per layer
        return {**base, "layers": layers, **{k: 3.0 + 2.0 * layers for k in
                                              ("ttft_s", "tpot_s", "weights_gb", "kv_gb")}}
    out = extrapolate_row(at(pair[0]), at(pair[1]), 8, pair)
    assert out["tpot_s"] == pytest.approx(19.0) and out["weights_gb"] == pytest.approx(19.0)
    with pytest.raises(ValueError):
        extrapolate_row(at(pair[1]), at(pair[0]), 8, pair)
