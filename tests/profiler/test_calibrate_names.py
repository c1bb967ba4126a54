"""``python -m profiler calibrate --measured NAME`` records the table's path, not the name (a
later fit by path then listed one table twice)."""
from __future__ import annotations

from profiler.calibration import load_calibration
from profiler.catalog import repo_root
from profiler.cli import main


def test_a_table_given_by_name_is_recorded_by_its_path(tmp_path) -> None:
    out = tmp_path / "cal.yaml"
    assert (repo_root() / "results" / "profiles" / "cpu-tiny-torch.parquet").is_file()
    assert main(["calibrate", "--measured", "cpu-tiny-torch", "--out", str(out)]) == 0
    assert load_calibration(out).files == ["results/profiles/cpu-tiny-torch.parquet"]
