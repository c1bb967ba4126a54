"""Issue 14, item 2: results never mix (the runner's run folders), each reproduction as a test."""
from __future__ import annotations

import json
import types
from pathlib import Path

import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict, Field

import experiments.context as context
import experiments.run as runner


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cells: int = 3
    scale: float = 1.0
    time_limit_s: float = Field(default=1.0, gt=0)
    interrupt_after: int | None = None


def _run(params: _Params, ctx: context.RunContext) -> None:
    for i in range(params.cells):
        path = ctx.cell_path(f"c{i}")
        if path.exists():
            continue
        if params.interrupt_after is not None and i >= params.interrupt_after:
            raise KeyboardInterrupt
        context.atomic_write_parquet(path, pd.DataFrame({"cell": [i], "scale": [params.scale]}))


@pytest.fixture
def fake_kind(monkeypatch):
    mod = types.SimpleNamespace(Params=_Params, run=_run)
    monkeypatch.setattr(runner, "kind_module", lambda kind: mod)
    return mod


def _cfg(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _main(cfg: Path, results: Path, *extra: str) -> int:
    return runner.main([str(cfg), "--results", str(results), "--no-progress", *extra])


def test_new_run_ids_are_unique_within_one_second(tmp_path, monkeypatch) -> None:
    """Before: the id was the UTC second and the folder was made with exist_ok=True, so two runs
    started in the same second wrote into one folder."""
    ids = {context.new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(context.RUN_ID_PATTERN.fullmatch(i) for i in ids)
    hexes = iter(["aaaaaa", "aaaaaa", "bbbbbb"])           # even a repeated suffix gets its own folder
    monkeypatch.setattr(context.secrets, "token_hex", lambda n: next(hexes))
    a, _ = context.open_run_dir(tmp_path, "exp", None, {"x": 1})
    b, _ = context.open_run_dir(tmp_path, "exp", None, {"x": 1})
    assert a != b and a.is_dir() and b.is_dir() and b.name.endswith("-bbbbbb")


def test_resume_under_an_edited_config_is_refused(tmp_path, fake_kind) -> None:
    """Before: resuming --run-id under an edited config mixed old and new cells."""
    res = tmp_path / "results"
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 2, scale: 1.0}\n")
    assert _main(cfg, res, "--run-id", "r1") == 0
    run = res / "e" / "r1"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["config_sha256"] == context.config_hash({"experiment": "e", "kind": "fake", "seed": 0,
                                                          "params": {"cells": 2, "scale": 1.0}})
    assert _main(cfg, res, "--run-id", "r1") == 0              # same config: resumes
    edited = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 4, scale: 2.0}\n", "edited.yaml")
    assert _main(edited, res, "--run-id", "r1") == 2
    assert sorted(p.name for p in (run / "cells").iterdir()) == ["c0.parquet", "c1.parquet"]   # nothing mixed
    assert _main(edited, res, "--run-id", "r1", "--force") == 0
    assert (run / f"config.{meta['config_sha256'][:12]}.yaml").exists()   # the earlier config is kept
    assert json.loads((run / "meta.json").read_text())["forced_over_config_sha256"] == meta["config_sha256"]


def test_resume_of_an_older_run_without_a_stored_hash_uses_its_config_yaml(tmp_path, fake_kind) -> None:
    res = tmp_path / "results"
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 2}\n")
    assert _main(cfg, res, "--run-id", "old") == 0
    (res / "e" / "old" / "meta.json").unlink()
    assert _main(cfg, res, "--run-id", "old") == 0
    other = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 3}\n", "other.yaml")
    assert _main(other, res, "--run-id", "old") == 2


def test_duplicate_keys_in_an_experiment_config_are_refused(tmp_path, fake_kind, capsys) -> None:
    """Before: a second `kind:` key silently replaced the first, running the other experiment."""
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nkind: other\nparams: {}\n")
    assert _main(cfg, tmp_path / "results") == 2
    err = capsys.readouterr().err
    assert "duplicate key" in err and "kind" in err and len(err.strip().splitlines()) == 1
    nested = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 1, cells: 2}\n", "nested.yaml")
    assert _main(nested, tmp_path / "results") == 2
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("run_id", ["../../x", "../x", "a/b", "/tmp/x", ".hidden", "..", "x\n"])
def test_run_ids_stay_inside_the_results_root(tmp_path, fake_kind, run_id: str) -> None:
    """Before: --run-id ../../x wrote outside results/."""
    res = tmp_path / "a" / "results"
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 1}\n")
    assert _main(cfg, res, "--run-id", run_id) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "a" / "x").exists()
    assert not any((tmp_path / "a").rglob("cells"))


def test_a_symlinked_run_folder_leading_outside_is_refused(tmp_path, fake_kind) -> None:
    res = tmp_path / "results"
    (res / "e").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (res / "e" / "link").symlink_to(tmp_path / "elsewhere")
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 1}\n")
    assert _main(cfg, res, "--run-id", "link") == 2
    assert not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_non_finite_numbers_in_params_are_refused(tmp_path, fake_kind, value: str, capsys) -> None:
    """Before: `time_limit_s: .inf` passed `Field(gt=0)` and the run had no time limit."""
    cfg = _cfg(tmp_path, f"experiment: e\nkind: fake\nparams: {{time_limit_s: {value}}}\n")
    assert _main(cfg, tmp_path / "results") == 2
    assert "params.time_limit_s" in capsys.readouterr().err


def test_ctrl_c_keeps_finished_cells_and_exits_130(tmp_path, fake_kind, capsys) -> None:
    res = tmp_path / "results"
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 4, interrupt_after: 2}\n")
    assert _main(cfg, res, "--run-id", "r") == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("interrupted") and "--run-id r" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in (res / "e" / "r" / "cells").iterdir()) == ["c0.parquet", "c1.parquet"]


def test_resume_of_a_folder_with_cells_but_no_record_of_its_config_needs_force(tmp_path, fake_kind, capsys) -> None:
    """Issue 28, item 6. Before: a folder with cells and neither meta.json nor config.yaml was
    resumed under any config, mixing its cells with the new ones."""
    res = tmp_path / "results"
    cells = res / "e" / "r" / "cells"
    cells.mkdir(parents=True)
    context.atomic_write_parquet(cells / "c0.parquet", pd.DataFrame({"cell": [0], "scale": [9.0]}))
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 2}\n")
    assert _main(cfg, res, "--run-id", "r") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has cells but no meta.json or config.yaml" in err[0] and "--force" in err[0]
    assert sorted(p.name for p in cells.iterdir()) == ["c0.parquet"]
    assert _main(cfg, res, "--run-id", "r", "--force") == 0
    assert sorted(p.name for p in cells.iterdir()) == ["c0.parquet", "c1.parquet"]
    empty = res / "e" / "fresh"
    empty.mkdir()                                        # a folder without cells (e.g. made by hand) is fine
    assert _main(cfg, res, "--run-id", "fresh") == 0


def test_a_second_process_on_the_same_run_id_is_refused(tmp_path) -> None:
    """Issue 28, item 6. Before: two processes on one run id wrote into the same cells."""
    import os
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[2]
    cfg = _cfg(tmp_path, "experiment: e\nkind: selector_scaling\nparams: {depths: [1], catalog_sizes: [], "
                         "solvers: [flowmaker], publish: false}\n")
    run = tmp_path / "results" / "e" / "r"
    run.mkdir(parents=True)
    lock = context.RunLock(run)                          # this test process is the first one
    try:
        done = subprocess.run([sys.executable, "-m", "experiments.run", str(cfg), "--results", str(tmp_path / "results"),
                               "--run-id", "r", "--no-progress"], cwd=repo, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(repo)}, timeout=120)
    finally:
        lock.release()
    assert done.returncode == 2, done
    assert done.stderr.strip() == (f"error: {run}: in use by another process (pid {os.getpid()}); wait for it to "
                                   f"finish, or start a new run (no --run-id)")
    assert not (run / "cells").exists()
    with pytest.raises(context.UserError, match="in use"):   # the same in one process (a second open file)
        with_lock = context.RunLock(run)
        try:
            context.RunLock(run)
        finally:
            with_lock.release()


def test_meta_records_the_measured_wall_time(tmp_path, fake_kind, capsys) -> None:
    """A finished run's meta.json holds its wall and CPU time (issue 27 item 5: wall times measured),
    and the last line says it."""
    res = tmp_path / "results"
    cfg = _cfg(tmp_path, "experiment: e\nkind: fake\nparams: {cells: 2, scale: 1.0}\n")
    assert _main(cfg, res, "--run-id", "w") == 0
    meta = json.loads((res / "e" / "w" / "meta.json").read_text())
    assert meta["wall_s"] > 0 and meta["cpu_s"] >= 0 and meta["finished_at"] >= meta["started_at"]
    assert "wall time" in capsys.readouterr().out.splitlines()[-1]
