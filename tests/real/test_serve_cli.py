"""``python -m harness export``, ``python -m harness launch`` and ``python -m harness replay``:
exported files checked as text (vLLM and TensorRT-LLM are not installed here), and one real
launch + replay on a ``transformers serve`` stand-in."""
from __future__ import annotations

import json
import subprocess

import yaml

from selector.deployment import Deployment, InstanceSpec, Route, StageRoute

A, B, C = "chat/draft/0", "chat/polish/0", "chat/polish/1"


def _plan(tmp_path) -> str:
    insts = (InstanceSpec(A, "llama-3.1-8b", 1, 1, (0,), 22.0), InstanceSpec(B, "llama-3.1-8b", 2, 1, (1, 2), 40.0),
             InstanceSpec(C, "llama-3.1-8b", 1, 1, (0,), 24.0))
    dep = Deployment("chat", "draft-polish", insts, (StageRoute("draft", 1, (Route((A,)),)),
                                                     StageRoute("polish", 2, (Route((B, C)),))))
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"task": "chat", "status": "optimal", "deployment": dep.to_dict()}))
    return str(p)


def _export(capsys, *argv) -> tuple[int, str, str]:
    from harness.cli import main
    rc = main(["export", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_export_sh_is_a_valid_script_with_each_instances_flags(tmp_path, capsys):
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000")
    assert rc == 0 and out.startswith("#!/usr/bin/env bash")
    script = tmp_path / "up.sh"
    script.write_text(out)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert out.count("vllm serve meta-llama/Llama-3.1-8B-Instruct") == 3          # hf_id by default
    assert "CUDA_VISIBLE_DEVICES=1,2" in out and "--gpu-memory-utilization 0.426" in out
    # C shares GPU 0 with A: it starts once A is healthy
    assert out.index("wait_healthy http://127.0.0.1:8100") < out.index("# chat/polish/1")
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000", "--backend", "trtllm")
    assert rc == 0 and "<<'FLOWMAKER_EOF_" in out and "enable_block_reuse: false" in out and '"$LOG_DIR"' in out
    script.write_text(out)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_export_compose_and_k8s(tmp_path, capsys):
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "compose", "--gpu", "a6000",
                         "--model-path", "llama-3.1-8b=/models/8b")
    assert rc == 0
    svc = yaml.safe_load(out)["services"]
    assert list(svc) == ["chat.draft.0", "chat.polish.0", "chat.polish.1"]
    b = svc["chat.polish.0"]
    assert b["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1", "2"]
    assert b["entrypoint"][:3] == ["vllm", "serve", "/models/8b"] and "0.0.0.0" in b["entrypoint"]
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "k8s", "--gpu", "a6000", "--backend", "trtllm")
    assert rc == 0
    docs = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Deployment") == 3 and kinds.count("Service") == 3 and kinds.count("ConfigMap") == 3
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "chat-polish-0")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2" and "--kv_cache_free_gpu_memory_fraction" in c["command"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert dep["metadata"]["annotations"]["flowmaker/plan-gpus"] == "1,2"


def test_export_errors_are_one_line(tmp_path, capsys):
    rc, _, err = _export(capsys, str(tmp_path / "none.json"), "--format", "sh", "--gpu", "a6000")
    assert rc == 2 and err.startswith("error:") and "no such file" in err and err.count("\n") == 1
    rc, _, err = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "b9000")
    assert rc == 2 and "unknown GPU 'b9000'" in err


def test_exporting_a_resolved_problem_says_solve_first(tmp_path, capsys):
    from selector.cli import main
    for name, flags in (("problem.yaml", []), ("problem.json", ["--json"])):
        path = tmp_path / name
        assert main(["resolve", "chat", "--out", str(path), *flags]) == 0
        capsys.readouterr()
        rc, _, err = _export(capsys, str(path), "--format", "sh", "--gpu", "a6000")
        assert rc == 2 and err.count("\n") == 1 and err.count(str(path)) == 1, err
        assert "a resolved problem, not a plan" in err and "selector solve" in err and "malformed" not in err


def test_launch_dry_run_and_user_errors(tmp_path, capsys):
    from harness.cli import main
    assert main(["launch", _plan(tmp_path), "--gpu", "a6000", "--dry-run", "--args", f"{A}=--seed 1",
                 "--max-batch", "64"]) == 0
    out = capsys.readouterr().out
    assert out.count("--max-num-seqs 64") == 3 and "--seed 1" in out.split("# chat/polish/0")[0]
    assert main(["launch", _plan(tmp_path), "--dry-run"]) == 2
    assert "--gpu" in capsys.readouterr().err
    assert main(["launch", _plan(tmp_path), "--gpu", "a6000", "--dry-run", "--max-batch", "0"]) == 2
    assert "max_num_seqs" in capsys.readouterr().err


def test_launch_refuses_a_remote_host_without_a_key(tmp_path, capsys):
    from harness.cli import main
    plan = _plan(tmp_path)
    for host in ("0.0.0.0", "10.0.0.5", "::", "gpu-box.example"):
        for mode in ("--dry-run", "--check"):      # refused before anything starts
            assert main(["launch", plan, "--gpu", "a6000", "--host", host, mode]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"--host {host}" in err and "--api-key-env" in err
    for ok in (["--host", "localhost"], ["--host", "127.0.0.2"], ["--host", "::1"],
               ["--host", "0.0.0.0", "--api-key-env", "FM_KEY"],
               ["--host", "0.0.0.0", "--allow-unauthenticated-remote"]):
        assert main(["launch", plan, "--gpu", "a6000", "--dry-run", *ok]) == 0, ok
        assert "--host" in capsys.readouterr().out


def test_launch_then_replay_on_a_stand_in(tiny_llama_dir, tmp_path, capsys):
    from harness.cli import main
    from tests.real.test_servers import free_port
    one = Deployment("chat", "respond", (InstanceSpec(A, "llama-3.1-8b", 1, 1, (0,), 22.0),),
                     (StageRoute("respond", 1, (Route((A,)),)),))
    plan = tmp_path / "one.json"
    plan.write_text(json.dumps({"plans": [{"task": "chat", "status": "optimal", "deployment": one.to_dict()}]}))
    eps = tmp_path / "eps.json"
    port = free_port()
    assert main(["launch", str(plan), "--backend", "transformers", "--stand-in", str(tiny_llama_dir),
                 "--base-port", str(port), "--dtype", "float32", "--log-dir", str(tmp_path / "logs"),
                 "--endpoints-out", str(eps), "--check"]) == 0
    assert json.loads(capsys.readouterr().out) == {A: f"http://127.0.0.1:{port}"}
    # the servers are stopped after --check: start one by hand and replay a trace on it
    from harness.servers.launcher import Fleet, ServerSpec
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at_s,prompt_tokens,output_tokens\n0,24,3\n0.1,40,4\n0.2,16,2\n")
    with Fleet([ServerSpec(name="s", model=str(tiny_llama_dir), port=port, dtype="float32", startup_timeout_s=180)],
               log_dir=tmp_path / "logs2"):
        assert main(["replay", "--endpoints-file", str(eps), "--trace", str(trace), "--backend", "transformers",
                     "--tokenizer", str(tiny_llama_dir), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    sim_keys = {"requests", "completed", "failed", "simulated_s", "wall_s", "e2e_s", "ttft_s", "tpot_s", "queue_s",
                "kv_capacity_tokens", "preemptions", "iterations", "replicas", "trace", "model"}
    assert sim_keys <= set(s) and s["completed"] == 3 and s["failed"] == 0
    # TPOT is measured (not None) but may be 0: the stand-in server can send a short answer's text in one
    # stream event (seen once on a loaded CI machine: TPOT mean 0.0 over the three calls), and the client,
    # as vllm bench serve does, times token events, not tokens
    assert 0 < s["ttft_s"]["mean"] <= s["e2e_s"]["mean"] and s["tpot_s"]["mean"] >= 0 and s["queue_s"]["mean"] is None
