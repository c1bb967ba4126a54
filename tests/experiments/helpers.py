"""An experiment's small config run end to end in a test, as ``python -m experiments.run`` runs it:
the config copied to the test's folder with some params changed (e.g. ``publish``), its results
under ``tmp_path/results`` as run ``t``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import yaml

from experiments.run import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "experiments"


class SmallRun(NamedTuple):
    args: list[str]        # the command's arguments: running them again resumes the run
    cfg: dict[str, Any]    # the config as run
    top: Path              # the experiment's results folder (where publish copies to)
    run: Path              # the run's folder


def run_small(name: str, tmp_path: Path, **params: Any) -> SmallRun:
    """Run ``configs/experiments/<name>.yaml`` with ``params`` replacing its params of those names;
    the run must succeed."""
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    cfg["params"].update(params)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    args = [str(path), "--results", str(tmp_path / "results"), "--run-id", "t", "--no-progress"]
    assert main(args) == 0
    top = tmp_path / "results" / cfg["experiment"]
    return SmallRun(args, cfg, top, top / "t")
