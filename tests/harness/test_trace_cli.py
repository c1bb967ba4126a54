"""Trace layouts and the `python -m harness simulate` command line."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pytest

from harness.cli import main
from harness.simulate import SimulateConfig, simulate
from harness.trace import TraceError, load_trace

REQS = [(0.0, 512, 40), (0.25, 1500, 3), (0.25, 20, 200), (1.125, 800, 64), (3.5, 4000, 12), (3.75, 90, 1)]


def _write_all(tmp_path):
    native = tmp_path / "native.csv"
    native.write_text("# a comment\narrived_at_s,prompt_tokens,output_tokens\n"
                      + "".join(f"{a + 10},{p},{o}\n" for a, p, o in REQS))
    t0 = datetime(2023, 11, 16, 18, 15, 46, 680590)
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"{(t0 + timedelta(seconds=a)).isoformat(sep=' ')}0,{p},{o}\n" for a, p, o in REQS))
    proc = tmp_path / "processed.csv"
    proc.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    + "".join(f"{a},{p},{o}\n" for a, p, o in REQS))
    return native, azure, proc


def test_three_layouts_give_the_same_result(tmp_path):
    cfg = SimulateConfig(model="llama-2-7b", gpu="a100-80gb")
    results = []
    for path in _write_all(tmp_path):
        tr = load_trace(path)
        np.testing.assert_allclose(tr.arrived_at_s, [r[0] for r in REQS], atol=1e-6)
        s = dict(simulate(tr, cfg).summary)
        for k in ("wall_s", "requests_per_wall_s", "trace"):
            s.pop(k)
        results.append(json.dumps(s, sort_keys=True))
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("body, line, words", [
    ("arrived_at_s,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n", 3, "not a number"),
    ("arrived_at_s,prompt_tokens,output_tokens\n0,10,5\n1,10\n", 3, "3 comma-separated"),
    ("# c\narrived_at_s,prompt_tokens,output_tokens\n0,0,5\n", 3, ">= 1"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,1,2\nyesterday,1,2\n", 3, "date-time"),
    ("when,prompt,out\n0,1,1\n", 1, "unknown header"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n-1,4,4\n", 2, ">= 0"),
])
def test_malformed_trace_names_the_line(tmp_path, body, line, words):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(TraceError, match=f"line {line}: .*{words}"):
        load_trace(path)


def _run(capsys, *argv):
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_has_the_documented_fields(tmp_path, capsys):
    native, _, _ = _write_all(tmp_path)
    rc, out, err = _run(capsys, "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", str(native), "--json")
    assert rc == 0 and err == ""
    d = json.loads(out)
    for k in ("requests", "simulated_s", "wall_s", "kv_capacity_tokens", "preemptions"):
        assert k in d
    for k in ("e2e_s", "ttft_s", "tpot_s", "queue_s"):
        assert set(d[k]) == {"mean", "p50", "p90", "p99"}
    rc, out, _ = _run(capsys, "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", str(native),
                      "--scheduler", "sarathi", "--replicas", "2", "--router", "round-robin")
    assert rc == 0 and "ttft_s" in out and "KV capacity" in out


@pytest.mark.parametrize("argv, option", [
    (["--gpu", "a100-80gb"], "--model"),
    (["--model", "nope", "--gpu", "a100-80gb"], "--model"),
    (["--model", "llama-2-7b", "--gpu", "nope"], "--gpu"),
    (["--model", "llama-2-7b", "--gpu", "a100-80gb", "--tp", "3"], "--tp"),
    (["--model", "llama-2-7b", "--gpu", "a100-80gb", "--max-batch", "0"], "--max-batch"),
    (["--model", "llama-2-7b", "--gpu", "a100-80gb", "--time-scale", "-1"], "--time-scale"),
    (["--model", "llama-2-7b", "--gpu", "a100-80gb", "--scheduler", "orca"], "--scheduler"),
    (["--model", "llama-2-70b", "--gpu", "a6000"], "--tp"),                 # does not fit one GPU
    (["--model", "llama-2-7b", "--gpu", "a100-80gb", "--scheduler", "sarathi", "--chunk-size", "64",
      "--max-batch", "64"], "--max-batch"),
])
def test_cli_user_errors_are_one_line_naming_the_option(tmp_path, capsys, argv, option):
    native, _, _ = _write_all(tmp_path)
    rc, out, err = _run(capsys, *argv, "--trace", str(native))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and option in err


def test_cli_names_the_flag_that_helps(tmp_path, capsys):
    """A model whose weights exceed the GPUs blames --tp/--pp alone; one squeezed out by a low
    --gpu-mem-util is told about that flag too (issue 18 item 4)."""
    native, _, _ = _write_all(tmp_path)
    rc, _, err = _run(capsys, "--model", "llama-2-70b", "--gpu", "a6000", "--trace", str(native))
    assert rc == 2 and err.startswith("error: --tp:") and "--gpu-mem-util" not in err
    rc, _, err = _run(capsys, "--model", "llama-2-7b", "--gpu", "a6000", "--gpu-mem-util", "0.2",
                      "--trace", str(native))
    assert rc == 2 and "(--tp/--pp) or raise --gpu-mem-util" in err


def test_cli_bad_trace_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrived_at_s,prompt_tokens,output_tokens\n0,1,1\n0.5,2,x\n")
    rc, out, err = _run(capsys, "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", str(bad))
    assert rc == 2 and out == "" and "line 3" in err and len(err.strip().splitlines()) == 1
