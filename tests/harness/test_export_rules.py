"""``harness.servers.export_rules`` through ``python -m harness export`` (issue 27 item 1): context
length from the task's token mix, the batched-token budget against it, the KV cache at that
length, per-instance arguments, a GPU type other than the plan's, a plan set with an undeployed task."""
from __future__ import annotations

import json

from harness.servers.export_rules import TAIL, call_tokens, context_len
from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from selector.taskspec import load_task, stage_tokens
from tests.real.test_serve_cli import _export

IID = "chat/respond/0"


def _plan(tmp_path, mem_gb: float = 30.0, *, gpu_type: str = "gpu", extra: list | None = None) -> str:
    inst = InstanceSpec(IID, "llama-3.1-8b", 1, 1, (0,), mem_gb, 0.3, gpu_type)
    dep = Deployment("chat", "respond", (inst,), (StageRoute("respond", 1, (Route((IID,)),)),))
    plans = [{"task": "chat", "status": "optimal", "deployment": dep.to_dict()}, *(extra or [])]
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"plans": plans, "cluster": {"gpus": [{"id": 0, "mem_gb": 48.0}]}}))
    return str(p)


def _value(out: str, flag: str) -> int:
    words = out.split()
    return int(words[words.index(flag) + 1])


def test_context_length_follows_the_tasks_longest_call(tmp_path, capsys):
    task = load_task("chat")
    (p, o), = stage_tokens(task, next(w for w in task.workflows if w.name == "respond"))
    dep = Deployment("chat", "respond", (), (StageRoute("respond", 1, (Route((IID,)),)),))
    assert call_tokens([dep]) == {IID: p + o}
    rc, out, err = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000")
    assert rc == 0, err
    length = _value(out, "--max-model-len")
    assert length == context_len(p + o, 131072) and TAIL * (p + o) <= length < TAIL * (p + o) + 1024
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000", "--backend", "trtllm")
    assert rc == 0 and _value(out, "--max_seq_len") == length
    assert context_len(None, 32768) == 32768 and context_len(10_000, 32768) == 32768


def test_a_share_too_small_for_the_kv_cache_names_the_instance(tmp_path, capsys):
    rc, _, err = _export(capsys, _plan(tmp_path, mem_gb=17.5), "--format", "sh", "--gpu", "a6000")
    assert rc == 2 and err.count("\n") == 1 and IID in err and "KV cache of" in err
    # the instance's own context length wins (and its KV check is the user's call)
    rc, out, err = _export(capsys, _plan(tmp_path, mem_gb=17.5), "--format", "sh", "--gpu", "a6000",
                           "--args", f"{IID}=--max-model-len 1024")
    assert rc == 0, err
    assert out.count("--max-model-len") == 1 and "--max-model-len 1024" in out


def test_a_budget_below_the_context_without_chunked_prefill_is_refused(tmp_path, capsys):
    rc, _, err = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000", "--scheduler", "vllm")
    assert rc == 2 and err.count("\n") == 1 and IID in err and "without chunked prefill" in err
    rc, out, err = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000", "--scheduler", "vllm",
                           "--max-batch-tokens", "16384")
    assert rc == 0, err
    assert "--no-enable-chunked-prefill" in out and _value(out, "--max-num-batched-tokens") == 16384


def test_an_undeployed_task_is_refused_unless_skipped(tmp_path, capsys):
    bad = {"task": "rag-qa", "status": "infeasible", "reason": "no variant meets the latency SLO",
           "deployment": None}
    plan = _plan(tmp_path, extra=[bad])
    rc, _, err = _export(capsys, plan, "--format", "sh", "--gpu", "a6000")
    assert rc == 2 and err.count("\n") == 1 and "rag-qa (infeasible: no variant meets" in err
    assert "--skip-infeasible" in err
    rc, out, err = _export(capsys, plan, "--format", "sh", "--gpu", "a6000", "--skip-infeasible")
    assert rc == 0 and "chat.respond.0" in out and "warning: skipped task rag-qa" in err


def test_a_gpu_other_than_the_plans_is_warned_about(tmp_path, capsys):
    rc, _, err = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "a6000")
    assert rc == 0 and "warning" not in err
    rc, _, err = _export(capsys, _plan(tmp_path), "--format", "sh", "--gpu", "h100-sxm")
    assert rc == 0 and "warning: --gpu h100-sxm has 80 GB, the plan's cluster GPUs 48 GB" in err
    rc, _, err = _export(capsys, _plan(tmp_path, gpu_type="a6000"), "--format", "sh", "--gpu", "h100-sxm")
    assert rc == 0 and "differs from the plan's GPU type a6000" in err
