"""The GPU check's per-operator stage (vidur mlp.csv format) and its fit, run on the CPU."""

import json
import subprocess
import sys

import pytest

from profiler.calibration import Calibration
from profiler.catalog import repo_root
from profiler.cli import main
from profiler.measured import all_gpus
from profiler.torch_ops import MODES
from profiler.vidur_fit import fit_ops_file, load_ops_files


@pytest.fixture(scope="module")
def ops_csv(tmp_path_factory):
    """device_check.py --device cpu --tiny with only torch importable (as on the GPU machine)."""
    out = tmp_path_factory.mktemp("dc")
    block = ("import runpy, sys\n"
             "for m in ('pydantic', 'yaml', 'pandas', 'pyarrow', 'scipy', 'tqdm', 'numpy'):\n"
             "    sys.modules[m] = None\n"
             "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
    script = repo_root() / "experiments/scripts/device_check.py"
    r = subprocess.run([sys.executable, "-c", block, str(script), str(out), "--device", "cpu", "--tiny",
                        "--no-fingerprint"], capture_output=True, text=True, timeout=120, cwd=out)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    m = MODES["tiny"]
    assert summary["ops"]["complete"] and summary["ops"]["rows"] == len(m["tokens"]) * len(m["tp"])
    assert "calibrate-vidur --ops cpu=OUT/ops_mlp.csv" in (out / "summary.md").read_text()
    return out / "ops_mlp.csv"


def test_ops_csv_reads_as_vidur_rows(ops_csv):
    df = load_ops_files([ops_csv])
    m = MODES["tiny"]
    assert set(df.op) == {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
                          "layer_elementwise"}
    assert sorted(df.t.unique()) == m["tokens"] and sorted(df.tp.unique()) == m["tp"]
    assert (df.time_s > 0).all()


def test_ops_fit_improves_on_defaults(ops_csv):
    cal = fit_ops_file(ops_csv, all_gpus()["cpu"], Calibration())
    row = cal.mape_pct["cpu"]
    assert row["linear"]["after"] < row["linear"]["before"]
    assert row["elementwise"]["after"] < row["elementwise"]["before"]
    assert "operators fitted on ops_mlp.csv" in cal.gpus["cpu"].source


@pytest.mark.parametrize("spec, needle", [("h200", "GPU=CSV"), ("tpu=x.csv", "GPU=CSV"),
                                          ("h200=/nonexistent.csv", "no such file")])
def test_calibrate_vidur_ops_argument_errors(spec, needle, capsys, tmp_path):
    assert main(["calibrate-vidur", "--ops", spec, "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
