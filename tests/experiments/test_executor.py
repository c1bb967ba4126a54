"""Issue 22, item 8: one cell executor for every sweep. The same tables in this process, in
local worker processes and on a local Ray cluster; finished cells kept and skipped on resume;
an interrupted sweep keeps its finished cells."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.context import Execution, RunContext
from experiments.executor import Cell, run_cells
from tests.experiments.test_interrupt import _interrupt


def square(i: int, scale: float = 1.0) -> pd.DataFrame:
    return pd.DataFrame({"i": [i], "sq": [scale * i * i], "pid": [os.getpid()]})


def two_tables(i: int) -> dict[str, pd.DataFrame]:
    return {"results": pd.DataFrame({"i": [i]}), "rows": pd.DataFrame({"i": [i] * i, "k": list(range(i))})}


def _ctx(tmp_path: Path, **execution) -> RunContext:
    return RunContext(run_dir=tmp_path, seed=0, progress=False, config_path=tmp_path / "c.yaml",
                      execution=Execution(**execution))


def test_results_in_cell_order_written_once_and_skipped_on_resume(tmp_path) -> None:
    ctx = _ctx(tmp_path, workers=2)
    cells = [Cell(f"c{i}", square, (i,), {"scale": 2.0}) for i in (3, 1, 2)] + [Cell("c1", square, (1,))]
    out = run_cells(ctx, cells)
    assert [int(df.i.iloc[0]) for df in out] == [3, 1, 2, 1]           # equal names: one unit of work
    assert {int(df.pid.iloc[0]) for df in out} - {os.getpid()}          # ran in worker processes
    stamp = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").iterdir()}
    assert sorted(stamp) == ["c1.parquet", "c2.parquet", "c3.parquet"]
    again = run_cells(_ctx(tmp_path), cells + [Cell("c4", square, (4,))])   # resume: only c4 runs
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").iterdir() if p.name != "c4.parquet"} == stamp
    assert int(again[-1].sq.iloc[0]) == 16


def test_named_tables_marker_last(tmp_path) -> None:
    ctx = _ctx(tmp_path)
    cells = [Cell(f"t{i}", two_tables, (i,), tables=("results", "rows")) for i in (1, 2)]
    out = run_cells(ctx, cells)
    assert [len(r["rows"]) for r in out] == [1, 2]
    (tmp_path / "cells" / "t2__results.parquet").unlink()                 # the marker: t2 is unfinished
    assert run_cells(ctx, cells)[1]["results"].i.tolist() == [2]
    with pytest.raises(TypeError, match="returned DataFrame, not a mapping"):
        run_cells(ctx, [Cell("bad", square, (1,), tables=("results", "rows"))])
    with pytest.raises(TypeError, match="returned no table 'other'"):
        run_cells(ctx, [Cell("bad", two_tables, (1,), tables=("results", "other"))])


def test_processes_give_the_same_tables_as_this_process(tmp_path) -> None:
    cells = [Cell(f"c{i}", two_tables, (i,), tables=("results", "rows")) for i in range(6)]
    one = run_cells(_ctx(tmp_path / "a"), cells)
    two = run_cells(_ctx(tmp_path / "b", workers=3), cells)
    for a, b in zip(one, two):
        for t in ("results", "rows"):
            pd.testing.assert_frame_equal(a[t], b[t])


_SWEEP = ("experiment: ex\nkind: selector_scaling\nparams:\n  depths: [1, 2, 3]\n  seeds: [0, 1]\n"
          "  catalog_sizes: [11]\n  catalog_depth: 2\n  sharing: [memory, compute]\n  solvers: [flowmaker, milp]\n"
          "  time_limit_s: 20\n  publish: false\n")
_TIMING = ["elapsed_s", "capped"]       # wall time is the only thing that depends on where a cell ran


def _scaling(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "scaling.parquet").drop(columns=_TIMING)


def test_cells_on_a_local_ray_cluster_match_local_processes(tmp_path, monkeypatch) -> None:
    """A small sweep of real cells (``selector_scaling.solve_cell``) as Ray tasks on a local
    Ray cluster that listens on loopback only, and in two local worker processes: the same tables."""
    from experiments.kinds.selector_scaling import Params, solve_cell
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    params = Params(solvers=["flowmaker", "milp"], time_limit_s=20)
    cells = [Cell(f"d{d}-{mode}", solve_cell, ("depth", d, 11, 0, params, mode)) for d in (1, 2, 3)
             for mode in ("memory", "compute")]
    procs = run_cells(_ctx(tmp_path / "procs", workers=2), cells)
    seen = {}

    def on_done(cell: Cell, df: pd.DataFrame) -> None:
        import ray
        seen["node"] = ray.util.get_node_ip_address()

    on_ray = run_cells(_ctx(tmp_path / "ray", runtime="ray", workers=2), cells, on_done=on_done)
    assert seen["node"] == "127.0.0.1"
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()   # the cluster it started is gone
    for a, b in zip(procs, on_ray):
        pd.testing.assert_frame_equal(a.drop(columns=_TIMING), b.drop(columns=_TIMING), check_exact=True)


@pytest.mark.slow
def test_a_sweep_on_a_local_ray_cluster_matches_local_processes(tmp_path, monkeypatch) -> None:
    """The same experiment through ``experiments.run`` in this process, in two local worker
    processes and as Ray tasks on a local (loopback-only) Ray cluster: identical tables."""
    from experiments.run import main
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(_SWEEP)
    res = tmp_path / "res"
    for run_id, extra in [("one", []), ("procs", ["--workers", "2"]), ("ray", ["--runtime", "ray", "--workers", "2"])]:
        assert main([str(cfg), "--results", str(res), "--run-id", run_id, "--no-progress", *extra]) == 0, run_id
    ref = _scaling(res / "ex" / "one")
    assert len(ref) == 2 * 2 * 4 * 2                         # seeds x sharing x sizes x solvers
    for run_id in ("procs", "ray"):
        pd.testing.assert_frame_equal(_scaling(res / "ex" / run_id), ref, check_exact=True)
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()   # the local cluster it started is gone


def _interrupt_sweep(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Start a sweep whose 7-stage cells run long, SIGINT it once two cells are finished."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(_SWEEP.replace("depths: [1, 2, 3]", "depths: [1, 7, 2, 7, 3]").replace(
        "[flowmaker, milp]", "[milp, exhaustive]").replace("time_limit_s: 20", "time_limit_s: 60"))
    args = [sys.executable, "-m", "experiments.run", str(cfg), "--results", str(tmp_path / "res"), "--run-id", "r",
            "--no-progress", *extra]
    cells = tmp_path / "res" / "ex" / "r" / "cells"
    ready = lambda proc: cells.is_dir() and len(list(cells.glob("*.parquet"))) >= 2   # noqa: E731
    return _interrupt(args, ready, within_s=180, env={"RAY_AUTH_MODE": "disabled"}), cells


@pytest.mark.parametrize("runtime", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_an_interrupted_sweep_keeps_its_finished_cells(tmp_path, runtime: str) -> None:
    """Ctrl-C in a sweep on two local workers (or Ray tasks): one line, exit 130, the finished
    cells kept and nothing half-written; the running cells are stopped, not waited for."""
    done, cells = _interrupt_sweep(tmp_path, "--workers", "2", "--runtime", runtime)
    assert done.returncode == 130, done
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "ray" not in ln.lower()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: finished results are kept"), done.stderr
    assert "--run-id r" in lines[0]
    kept = sorted(p.name for p in cells.glob("*.parquet"))
    assert 2 <= len(kept) < 20 and not list(cells.glob(".*")), kept         # no partial file
    assert all("-d7-" not in k for k in kept)                               # the 60 s cells were cut short
