"""The harness's ``servers`` backend against real ``transformers serve`` processes on CPU (the tiny
random Llama of conftest, nothing downloaded): a 2-stage deployment on 2 servers."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from harness.cluster import Workload
from harness.live import LiveSettings, replay_live
from harness.servers.launcher import Fleet
from harness.servers.calls import exact_output_body
from harness.servers.deploy import endpoints_from_fleet, endpoints_from_urls, specs_for_instances
from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from tests.real.test_servers import free_port

A, B = "chat/draft/0", "chat/polish/0"
SIZES = [(40, 4), (24, 3)]          # (prompt, output) tokens per call of the two stages


def _problems():
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import CONFIGS
    cluster, gpu = load_cluster_file(CONFIGS / "clusters" / "a6000x8.yaml")
    cat = load_catalog()
    return [resolve_task(t, catalog=cat, cluster=cluster, gpu=gpu) for t in ("chat", "rag-qa")]


def _deployments():
    """chat: draft (1 call on A) then polish (2 calls on B), a model above its accuracy SLO;
    rag-qa: not placed (its requests fail)."""
    insts = (InstanceSpec(A, "llama-3.1-8b", 1, 1, (0,), 20.0), InstanceSpec(B, "llama-3.1-8b", 2, 1, (1, 2), 24.0))
    chat = Deployment("chat", "draft-polish", insts,
                      (StageRoute("draft", 1, (Route((A,)),)), StageRoute("polish", 2, (Route((B,)),))))
    return [chat, None]


TOKENS = [{"draft-polish": SIZES}, {}]


def _workload(n: int, span_s: float, unplaced=(3,)) -> Workload:
    rng = np.random.default_rng(0)
    task = np.zeros(n, dtype=np.int64)
    task[list(unplaced)] = 1
    return Workload(np.linspace(0.0, span_s, n), task, rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n),
                    rng.uniform(size=n))


def test_one_server_per_instance_with_its_tp_pp_and_gpus():
    insts = _deployments()[0].instances
    specs = specs_for_instances(insts, model_paths={"llama-3.1-8b": "/ckpt/8b"}, backend="vllm", base_port=8300)
    assert [(s.name, s.port, s.tp, s.gpus, s.model) for s in specs.values()] == [
        ("chat.draft.0", 8300, 1, (0,), "/ckpt/8b"), ("chat.polish.0", 8301, 2, (1, 2), "/ckpt/8b")]
    with pytest.raises(KeyError, match="llama-3.1-8b.*chat/draft/0"):
        specs_for_instances(insts, model_paths={"qwen2.5-3b": "/q"}, require_local=True)
    cpu = specs_for_instances(insts, stand_in="/tiny", backend="transformers")
    assert all((s.tp, s.pp, s.gpus, s.model) == (1, 1, (), "/tiny") for s in cpu.values())
    assert exact_output_body("vllm", 5) == {"ignore_eos": True} and exact_output_body(None, 5) == {}


@pytest.fixture(scope="module")
def fleet2(tiny_llama_dir, tmp_path_factory):
    """Two stand-in servers, one per instance (module scope: the kill test runs last and kills B)."""
    insts = _deployments()[0].instances
    specs = specs_for_instances(insts, stand_in=str(tiny_llama_dir), backend="transformers",
                                dtype="float32", startup_timeout_s=180)
    specs = {k: s.model_copy(update={"port": free_port()}) for k, s in specs.items()}
    with Fleet(list(specs.values()), log_dir=tmp_path_factory.mktemp("live-logs")) as f:
        yield f, specs


def _check_metrics(res, problems, wl):
    s, rows = res.summary, sorted(res.requests, key=lambda r: r["request"])
    slo = problems[0].task.latency_slo_s
    lat = np.array([r["latency_s"] for r in rows if not r["failed"]], dtype=float)
    good = [not r["failed"] and r["acc_ok"] and r["latency_s"] <= slo + 1e-9 for r in rows]
    assert s["goodput"] == pytest.approx(np.mean(good))
    assert s["latency_mean_s"] == pytest.approx(lat.mean())
    assert s["latency_p50_s"] == pytest.approx(np.percentile(lat, 50))
    assert s["latency_p99_s"] == pytest.approx(np.percentile(lat, 99))
    assert s["gb_reserved"] == pytest.approx(44.0) and s["instances"] == 2 and s["tasks_unplaced"] == 1
    ends = [r["end_s"] for r in rows] + [float(wl.arrival_s[-1]) * s["time_scale"]]
    assert s["residency_s"] == pytest.approx(max(ends))
    assert s["cost_usd"] == pytest.approx(44.0 * s["residency_s"] * 1e-6)


def test_two_stage_replay_conserves_requests_keeps_stage_order_and_metrics(fleet2):
    fleet, specs = fleet2
    problems, wl = _problems(), _workload(10, 2.0)
    eps = endpoints_from_fleet(fleet, specs, timeout_s=60)
    res = replay_live(problems, _deployments(), TOKENS, wl, endpoints=eps, price_per_gb_s=1e-6)
    s = res.summary
    assert s["requests"] == 10 and s["completed"] + s["failed"] == 10 and s["failed"] == 1
    assert sorted(r["request"] for r in res.requests) == list(range(10))           # each request ends once
    assert {r["error"] for r in res.requests if r["failed"]} == {"task not placed"}
    assert s["dead_instances"] == "" and s["calls"] == 9 * 3 and s["calls_failed"] == 0
    for i in range(10):
        if wl.task[i] == 1:
            continue
        calls = sorted((c for c in res.calls if c["request"] == i), key=lambda c: c["start_s"])
        assert [(c["stage"], c["instance"]) for c in calls] == [("draft", A), ("polish", B), ("polish", B)]
        assert all(a["end_s"] <= b["start_s"] for a, b in zip(calls, calls[1:]))    # one after another
        for c, (p, o) in zip(calls, [SIZES[0], SIZES[1], SIZES[1]]):
            assert c["prompt_tokens_asked"] == max(1, round(p * wl.prompt_scale[i]))   # the simulator's sizes
            assert c["output_tokens_asked"] == max(1, round(o * wl.output_scale[i]))
            assert c["output_tokens"] == c["output_tokens_asked"]                       # EOS ignored
            assert abs(c["prompt_tokens"] - c["prompt_tokens_asked"]) <= 1
    _check_metrics(res, problems, wl)


def test_user_endpoints_by_url(fleet2):
    fleet, specs = fleet2
    eps = endpoints_from_urls({k: s.base_url for k, s in specs.items()}, timeout_s=60, backend="transformers")
    assert eps[A].client.model == specs[A].model                 # from /v1/models
    res = replay_live(_problems(), _deployments(), TOKENS, _workload(3, 0.2, unplaced=()), endpoints=eps,
                      price_per_gb_s=0.0, settings=LiveSettings(time_scale=0.5, max_output_tokens=2))
    assert res.summary["completed"] == 3 and all(c["output_tokens"] <= 2 for c in res.calls)
    with pytest.raises(KeyError, match="no endpoint for instance"):
        replay_live(_problems(), _deployments(), TOKENS, _workload(2, 0.1, unplaced=()), endpoints={A: eps[A]},
                    price_per_gb_s=0.0)


def test_server_killed_mid_run_fails_its_requests_and_keeps_the_rest(fleet2):
    """Runs last in this module: it kills B."""
    fleet, specs = fleet2
    problems, wl = _problems(), _workload(12, 3.0, unplaced=())
    eps = endpoints_from_fleet(fleet, specs, timeout_s=30)
    finished = []
    killed = threading.Event()

    def on_request(row):
        finished.append(row)
        if len(finished) == 3 and not killed.is_set():
            killed.set()
            fleet.servers[specs[B].name].kill()
    res = replay_live(problems, _deployments(), TOKENS, wl, endpoints=eps, price_per_gb_s=1e-6,
                      on_request=on_request)
    s = res.summary
    assert killed.is_set() and s["completed"] + s["failed"] == 12
    assert s["completed"] >= 3 and s["failed"] >= 1          # finished results kept; later ones failed
    assert s["dead_instances"] == B
    failed = [r for r in res.requests if r["failed"]]
    assert all("died" in r["error"] or "no live instance" in r["error"] for r in failed)
    first_fail = min(r["arrival_s"] for r in failed)
    assert all(not r["failed"] for r in res.requests if r["end_s"] < first_fail)
    _check_metrics(res, problems, wl)


def _cfg(tmp_path, **params) -> str:
    import yaml
    base = {"tasks": ["chat"], "selectors": ["flowmaker"], "traces": ["conv"], "loads_pct": [100],
            "requests": {"conv": 4}, "backend": "transformers", "dtype": "float32", "startup_timeout_s": 180,
            "max_prompt_tokens": 64, "max_output_tokens": 4, "time_scale": 0.5}
    p = tmp_path / "live.yaml"
    p.write_text(yaml.safe_dump({"experiment": "live", "kind": "live_replay", "seed": 0, "params": {**base, **params}}))
    return str(p)


def test_live_replay_experiment_runs_and_resumes(tiny_llama_dir, tmp_path, capsys):
    import pandas as pd

    from experiments.run import main
    cfg = _cfg(tmp_path, stand_in_model=str(tiny_llama_dir), base_port=free_port())
    argv = [cfg, "--results", str(tmp_path), "--run-id", "r", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "STAND-IN MODEL" in out and "| flowmaker | conv | 100% | 4 | 4 | 0 |" in out
    run = tmp_path / "live" / "r"
    for f in ("results.parquet", "tasks.parquet", "requests.parquet", "calls.parquet", "deployments.parquet",
              "summary.md"):
        assert (run / f).exists(), f
    df = pd.read_parquet(run / "results.parquet")
    assert (df.completed + df.failed == df.requests).all() and (df.backend == "servers").all()
    logs = {p: p.stat().st_size for p in (run / "servers" / "flowmaker").iterdir()}
    assert list(logs) == [run / "servers" / "flowmaker" / "chat.respond.0.log"]     # one server per instance
    stamp = (run / "cells" / "flowmaker__conv__100.parquet").stat().st_mtime_ns
    assert main(argv) == 0                                   # finished cell skipped: no server started
    assert (run / "cells" / "flowmaker__conv__100.parquet").stat().st_mtime_ns == stamp
    assert all(p.stat().st_size == n for p, n in logs.items())


def test_missing_model_path_is_a_one_line_error(tmp_path, capsys):
    from experiments.run import main
    assert main([_cfg(tmp_path, backend="vllm", model_paths={"other-model": "/x"}), "--results", str(tmp_path),
                  "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: field 'params.model_paths': no local checkpoint for model") and "\n" not in err
