"""Every committed experiment config (benchmarks included) loads, names a kind that exists and
whose ``Params`` accept its ``params``; the benchmark kinds run through the one runner."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml

from experiments.run import kind_module, load_config, main
from profiler.catalog import configs_dir

CONFIGS = sorted((configs_dir() / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_validates_against_its_kind(path) -> None:
    cfg = load_config(path)
    mod = kind_module(cfg.kind)
    mod.Params.model_validate(cfg.params)
    assert callable(mod.run)


def test_benchmarks_are_experiment_kinds() -> None:
    bench = {p.stem for p in CONFIGS if p.stem.startswith("bench_")}
    assert bench == {"bench_measured", "bench_nonllm", "bench_nonllm_paired", "bench_pgvector", "bench_prefill_split",
                     "bench_selectors", "bench_sim", "bench_time_limits", "bench_tinyllm", "bench_vidur"}


def test_a_benchmark_kind_writes_its_table_and_summary(tmp_path, capsys) -> None:
    """bench_selectors on the smallest space it has: one solver, one repeat."""
    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump({"experiment": "b", "kind": "bench_selectors", "params": {
        "solvers": ["flowmaker"], "spaces": ["paper-empty"], "sharing": ["memory"], "repeats": 1}}))
    assert main([str(cfg), "--results", str(tmp_path / "r"), "--run-id", "x", "--no-progress"]) == 0
    run = tmp_path / "r" / "b" / "x"
    table = pd.read_parquet(run / "results.parquet")
    assert list(table.solver) == ["flowmaker"] and list(table.space) == ["paper-empty"]
    assert table.median_s.iloc[0] > 0 and table.status.iloc[0] in ("optimal", "feasible")
    assert "paper-empty" in (run / "summary.md").read_text() and "flowmaker" in capsys.readouterr().out
