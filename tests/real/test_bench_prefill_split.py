"""The Table-3 measurement runs on the real engine and its split agrees with a single prefill."""
from __future__ import annotations


def test_measure_reports_each_split_and_equal_logits(llm):
    from experiments.bench_prefill_split import measure
    df = measure(llm, [(16, 48), (40, 24)], repeats=1)
    assert list(df.partial_tokens) == [16, 40]
    assert (df.max_abs_logit_diff < 1e-4).all()
    assert ((df.split_total_ms - df.partial_ms - df.full_ms).abs() < 1e-9).all()
    assert (df.single_ms > 0).all()


def test_cli_prints_the_table(tiny_llama_dir, capsys):
    from experiments.bench_prefill_split import main
    assert main(["--model-dir", str(tiny_llama_dir), "--splits", "8+8", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "overhead_pct" in out and "critical-path" in out
