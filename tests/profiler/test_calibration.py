"""Calibration against vidur: the stored constants reproduce the documented MAPE figures."""

from pathlib import Path

import pytest

from profiler.calibration import default_calibration_path, load_calibration
from profiler.catalog import shared_data_dir

MARGIN_PCT = 1.0  # absolute percentage points above the stored figure


def _maveriq() -> Path:
    from profiler.maveriq_fit import DATA_NAME, has_data
    shared = shared_data_dir()
    if shared is None or not has_data(shared / DATA_NAME):
        pytest.skip("MaverIQ A6000 data absent (set FLOWMAKER_SHARED_DATA to the folder holding "
                    "maveriq-a6000/)")
    return shared / DATA_NAME


def _vidur() -> Path:
    shared = shared_data_dir()
    if shared is None or not (shared / "vidur" / "data" / "profiling").is_dir():
        pytest.skip("vidur data absent (set FLOWMAKER_SHARED_DATA to the folder holding vidur/)")
    return shared / "vidur"


def test_calibration_file_covers_all_gpus():
    cal = load_calibration(default_calibration_path())
    assert set(cal.gpus) == {"a6000", "a40", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s"}
    assert cal.gpus["a6000"].source.startswith("MaverIQ A6000")
    assert set(cal.gpus["a6000"].allreduce_curves) == {2, 4, 8} and cal.gpus["a6000"].sendrecv_curve
    assert cal.gpus["h200"].source.startswith("transferred from h100-sxm")
    assert cal.commit == "7d47513363ec447a741ac5e47241580b47724fbf"


def test_mape_matches_documented_figures():
    from profiler.vidur_fit import evaluate_mape
    cal = load_calibration(default_calibration_path())
    got = evaluate_mape(_vidur(), cal)
    for gpu, classes in cal.mape_pct.items():
        if gpu not in got:
            continue  # a6000 (MaverIQ's data: test_a6000_mape_...) or a GPU fitted with --ops
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
        if gpu == "a6000":
            continue  # fitted on MaverIQ's data: test_a6000_refit_reproduces_stored_constants
        assert fresh.gpus[gpu].compute_eff == pytest.approx(c.compute_eff, rel=0.02)


def test_a6000_mape_matches_documented_figures():
    """The stored a6000 constants reproduce the documented MaverIQ MAPE, within the issue's
    targets: per-operator classes <= 10%, collectives far below their alpha-beta fit."""
    from profiler.maveriq_fit import evaluate_a6000
    cal = load_calibration(default_calibration_path())
    got = evaluate_a6000(_maveriq(), cal)
    for cls, stored in cal.mape_pct["a6000"].items():
        assert got[cls]["after"] <= stored["after"] + MARGIN_PCT, cls
        assert got[cls]["after"] < got[cls]["before"], cls
    assert got["linear"]["after"] <= 10.0 and got["elementwise"]["after"] <= 10.0
    assert got["all_reduce"]["after"] <= 5.0 and got["send_recv"]["after"] <= 5.0
    assert got["all_reduce"]["alpha_beta"] > 5 * got["all_reduce"]["after"]


def test_a6000_refit_reproduces_stored_constants():
    from profiler.maveriq_fit import fit_a6000
    stored = load_calibration(default_calibration_path())
    fresh = fit_a6000(_maveriq(), stored).gpus["a6000"]
    old = stored.gpus["a6000"]
    for key in ("compute_eff", "mem_eff", "overlap", "elementwise_mem_eff"):
        assert getattr(fresh, key) == pytest.approx(getattr(old, key), rel=0.02), key
    for n, curve in old.allreduce_curves.items():
        assert fresh.allreduce_curves[n].us == pytest.approx(curve.us, rel=0.02), n


def test_calibrate_vidur_without_maveriq_keeps_a40_transfer(tmp_path, monkeypatch, capsys):
    """No MaverIQ data: the a6000 entry falls back to the a40 transfer, and the command says so."""
    from profiler.cli import main
    vidur = _vidur()
    monkeypatch.setenv("FLOWMAKER_SHARED_DATA", str(tmp_path))  # holds no maveriq-a6000/
    out = tmp_path / "cal.yaml"
    assert main(["calibrate-vidur", "--data", str(vidur), "--out", str(out)]) == 0
    assert "a6000 keeps the constants transferred from a40" in capsys.readouterr().err
    cal = load_calibration(out)
    assert cal.gpus["a6000"].source.startswith("transferred from a40")
    assert not cal.gpus["a6000"].allreduce_curves and "a6000" not in cal.mape_pct
    assert main(["calibrate-vidur", "--data", str(vidur), "--maveriq", str(tmp_path),
                 "--out", str(out)]) == 2
