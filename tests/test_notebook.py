"""notebooks/compare_selectors.ipynb executes end to end on small gap and scaling runs."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_compare_selectors_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from experiments.run import main

    for cfg in ("selector_gap_small", "selector_scaling_small"):
        assert main([str(ROOT / "configs" / "experiments" / f"{cfg}.yaml"), "--results", str(tmp_path),
                     "--run-id", "t", "--no-progress"]) == 0
    monkeypatch.setenv("GAP_RUN", str(tmp_path / "selector_gap_small" / "t"))
    monkeypatch.setenv("SCALING_RUN", str(tmp_path / "selector_scaling_small" / "t"))
    monkeypatch.setenv("FLOWMAKER_ROOT", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "notebooks" / "compare_selectors.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
