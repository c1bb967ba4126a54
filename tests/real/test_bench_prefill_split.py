"""The Table-3 measurement runs on the real engine and its split agrees with a single prefill."""
from __future__ import annotations


def test_measure_reports_each_split_and_equal_logits(llm):
    from experiments.kinds.bench_prefill_split import measure
    df = measure(llm, [(16, 48), (40, 24)], repeats=1)
    assert list(df.partial_tokens) == [16, 40]
    assert (df.max_abs_logit_diff < 1e-4).all()
    assert ((df.split_total_ms - df.partial_ms - df.full_ms).abs() < 1e-9).all()
    assert (df.single_ms > 0).all()


def test_experiment_prints_and_writes_the_table(tiny_llama_dir, tmp_path, capsys):
    import pandas as pd
    import yaml

    from experiments.run import main
    cfg = tmp_path / "split.yaml"
    cfg.write_text(yaml.safe_dump({"experiment": "split", "kind": "bench_prefill_split", "params": {
        "model_dir": str(tiny_llama_dir), "splits": [[8, 8]], "repeats": 1}}))
    assert main([str(cfg), "--results", str(tmp_path / "results"), "--run-id", "r"]) == 0
    out = capsys.readouterr().out
    assert "overhead_pct" in out and "critical-path" in out
    run = tmp_path / "results" / "split" / "r"
    assert list(pd.read_parquet(run / "results.parquet").partial_tokens) == [8]
    assert "critical-path" in (run / "summary.md").read_text()
