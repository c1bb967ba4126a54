"""The GPU check's closed-loop stage (experiments/scripts/device_check.py --loop-only), run on the
CPU with --tiny: with the project's PyTorch-only server (harness/servers/torchserve.py), without
pandas and scipy (the measured table is then the step model), and skipped with a reason when
its client libraries are missing, as on a bare GPU machine."""
from __future__ import annotations

import json
import subprocess
import sys

from profiler.catalog import repo_root

SCRIPT = repo_root() / "experiments/scripts/device_check.py"


def _run(tmp_path, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    block = ("import runpy, sys\n"
             f"for m in {blocked!r}:\n"
             "    sys.modules[m] = None\n"
             "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", block, str(SCRIPT), str(tmp_path), "--device", "cpu", "--tiny",
                           "--loop-only"], capture_output=True, text=True, timeout=240, cwd=tmp_path)


def test_loop_stage_without_pandas_and_scipy_uses_the_measured_table(tmp_path):
    r = _run(tmp_path, ("pandas", "pyarrow", "scipy"))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "loop" / "closed_loop.json").read_text())
    assert res["calibration"]["fitted"] is None and "measured table" in res["calibration"]["note"]
    (ld,) = res["loads"]
    assert ld["measured"]["completed"] == 6 and ld["measured"]["failed"] == 0
    assert "| 0.3 |" in (tmp_path / "loop_summary.md").read_text()


def test_loop_stage_says_why_it_is_skipped(tmp_path):
    r = _run(tmp_path, ("numpy", "pydantic"))
    assert r.returncode == 1
    assert "skipped" in json.loads((tmp_path / "loop_summary.json").read_text())
    assert "not importable" in (tmp_path / "loop_summary.md").read_text()
