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
