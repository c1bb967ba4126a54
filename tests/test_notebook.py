"""notebooks/compare_selectors.ipynb (issue 18 item 5): committed with its outputs; runs on a fresh
clone from the committed (published) results, and with no results at all by running the small
configs itself."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "compare_selectors.ipynb"


def _execute(root: Path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("FLOWMAKER_ROOT", str(root))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("GAP_RUN", raising=False)
    monkeypatch.delenv("SCALING_RUN", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(root)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_committed_with_outputs() -> None:
    import json
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("outputs") for c in code)
    assert not [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]
    images = [o for c in code for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert len(images) >= 2
    assert "draw_panel" in "".join("".join(c["source"]) for c in code)   # the time panels draw the dashed cap


def test_runs_from_the_committed_results(tmp_path, monkeypatch) -> None:
    """A fresh clone: only the files git tracks under results/selector_gap and results/selector_scaling."""
    files = subprocess.run(["git", "ls-files", "results/selector_gap", "results/selector_scaling"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    assert "results/selector_gap/gap.parquet" in files and "results/selector_scaling/scaling.parquet" in files
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / f, tmp_path / f)
    text = _execute(tmp_path, monkeypatch)
    assert "results/selector_gap (the published results)" in text
    assert "results/selector_scaling (the published results)" in text


def test_runs_the_small_configs_without_results(tmp_path, monkeypatch) -> None:
    (tmp_path / "results").mkdir()
    text = _execute(tmp_path, monkeypatch)
    assert "running the small config (selector_gap_small)" in text and "a small run made here" in text
