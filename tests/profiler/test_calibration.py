"""Calibration against vidur: the stored constants reproduce the documented MAPE figures."""

from pathlib import Path

import pytest

from profiler.calibration import default_calibration_path, load_calibration
from profiler.catalog import shared_data_dir

MARGIN_PCT = 1.0  # absolute percentage points above the stored figure


def _vidur() -> Path:
    shared = shared_data_dir()
    if shared is None or not (shared / "vidur" / "data" / "profiling").is_dir():
        pytest.skip("vidur data absent (set FLOWMAKER_SHARED_DATA to the folder holding vidur/)")
    return shared / "vidur"


def test_calibration_file_covers_all_gpus():
    cal = load_calibration(default_calibration_path())
    assert set(cal.gpus) == {"a6000", "a40", "a100-80gb", "h100-sxm", "h200", "l40s"}
    assert cal.gpus["a6000"].source.startswith("transferred from a40")
    assert cal.gpus["h200"].source.startswith("transferred from h100-sxm")
    assert cal.commit == "7d47513363ec447a741ac5e47241580b47724fbf"


def test_mape_matches_documented_figures():
    from profiler.vidur_fit import evaluate_mape
    cal = load_calibration(default_calibration_path())
    got = evaluate_mape(_vidur(), cal)
    for gpu, classes in cal.mape_pct.items():
        for cls, stored in classes.items():
            assert got[gpu][cls]["after"] <= stored["after"] + MARGIN_PCT, (gpu, cls)
            assert got[gpu][cls]["after"] <= got[gpu][cls]["before"] + 0.5, (gpu, cls)
            assert got[gpu][cls]["after"] < 25.0, (gpu, cls)


@pytest.mark.slow
def test_refit_reproduces_stored_constants():
    from profiler.vidur_fit import fit_vidur
    fresh = fit_vidur(_vidur())
    stored = load_calibration(default_calibration_path())
    for gpu, c in stored.gpus.items():
        assert fresh.gpus[gpu].compute_eff == pytest.approx(c.compute_eff, rel=0.02)
