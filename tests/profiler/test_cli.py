"""`python -m profiler` commands, in-process (plus one real subprocess for the entry point)."""

import json
import subprocess
import sys

import pytest

from profiler.catalog import repo_root
from profiler.cli import main

EXAMPLE = ["predict", "--model", "llama-2-7b", "--gpu", "a6000", "--tp", "2", "--pp", "1", "--batch", "1",
           "--prompt-tokens", "2048", "--output-tokens", "100"]


def test_predict_json(capsys):
    assert main(EXAMPLE + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"ttft_s", "tpot_s", "latency_s", "mem_gb", "weights_gb", "kv_gb", "activation_gb"}
    assert out["latency_s"] > out["ttft_s"] > 0


def test_predict_text(capsys):
    assert main(EXAMPLE) == 0
    assert "tpot_s" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["--model", "nope"], "--model"),
    (["--gpu", "tpu"], "--gpu"),
    (["--batch", "0"], "--batch"),
    (["--prompt-tokens", "abc"], "--prompt-tokens"),
    (["--model", "qwen2.5-7b", "--tp", "8"], "--tp"),
])
def test_predict_errors(capsys, args, needle):
    argv = list(EXAMPLE)
    for i in range(0, len(args), 2):
        argv[argv.index(args[i]) + 1] = args[i + 1]
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err and err.count("\n") == 1


def test_table_command(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    assert main(["table", "--out", str(out), "--models", "llama-3.2-1b", "--gpus", "h200",
                 "--batches", "1", "2", "--prompt-tokens", "128", "--output-tokens", "16"]) == 0
    from profiler.table import read_table
    assert len(read_table(out)) == 10 * 2
    assert main(["table", "--out", str(out), "--models", "gpt-5"]) == 2


def test_entry_point_subprocess():
    r = subprocess.run([sys.executable, "-m", "profiler"] + EXAMPLE + ["--json"], cwd=repo_root(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "tpot_s" in json.loads(r.stdout)


def test_predict_engine_weight_layout(capsys):
    """--engine trtllm: TensorRT-LLM's replicated input embedding (1 extra copy at TP2)."""
    assert main(EXAMPLE + ["--json"]) == 0
    vllm = json.loads(capsys.readouterr().out)
    assert main(EXAMPLE + ["--json", "--engine", "trtllm"]) == 0
    trt = json.loads(capsys.readouterr().out)
    assert trt["weights_gb"] - vllm["weights_gb"] == pytest.approx(32000 * 4096 * 2 / 1e9, abs=1e-5)
    assert trt["tpot_s"] == vllm["tpot_s"]


def test_validate_engine_and_candidate_calibration(tmp_path, capsys):
    """`validate --engine` scores memory with that engine's weights; `--calibration` adds a run."""
    out = tmp_path / "t.parquet"
    assert main(["table", "--out", str(out), "--models", "llama-2-7b", "--gpus", "a6000", "--batches", "4",
                 "--prompt-tokens", "256", "--output-tokens", "32"]) == 0
    capsys.readouterr()
    assert main(["validate", "--measured", str(out)]) == 0  # the analytic table against itself: 0%
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("llama-2-7b")]
    assert rows and all(float(r[-2]) == 0.0 and float(r[-3]) == 0.0 for r in rows)
    assert main(["validate", "--measured", str(out), "--engine", "trtllm", "--calibration", "vidur"]) == 0
    text = capsys.readouterr().out
    assert "trtllm memory" in text and "with vidur" in text
    mem = {(r[2], r[3]): float(r[-2]) for r in (ln.split() for ln in text.splitlines())
           if r and r[0] == "llama-2-7b"}
    assert mem[("1", "1")] == 0.0 and mem[("8", "1")] > 5.0  # 7 missing embedding copies of 0.26 GB
    assert main(["validate", "--measured", str(out), "--calibration", "nope"]) == 2
