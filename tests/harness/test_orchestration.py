"""Orchestrated requests of a deployed plan (harness.orchestration, orchestration: chain | teola)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.run import main
from profiler.catalog import load_prices
from harness.orchestration import OrchestrationError, bind, run_requests, scheme_for
from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from selector.errors import ProblemError
from selector.taskspec import load_task

GPU = "a6000"
CFG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "plan_orchestration_small.yaml"


def _dep(workflow: str, stages: tuple[str, ...]) -> tuple[Deployment, dict]:
    insts = tuple(InstanceSpec(f"rag-qa/{s}/0", "llama-3.2-3b", 2, 1, (2 * i, 2 * i + 1), 12.0)
                  for i, s in enumerate(stages))
    routes = tuple(StageRoute(s, 1, (Route((f"rag-qa/{s}/0",)),)) for s in stages)
    return Deployment("rag-qa", workflow, insts, routes), {i.id: i for i in insts}


WORKFLOWS = {"answer": ("answer",), "rewrite-answer": ("rewrite", "answer"), "answer-verify": ("answer", "verify")}


@pytest.mark.parametrize("workflow", list(WORKFLOWS))
def test_chain_and_teola_compute_the_same_outputs(workflow):
    dep, insts = _dep(workflow, WORKFLOWS[workflow])
    b = bind(load_task("rag-qa"), dep, insts)
    assert {c.engine for c in b.template.components if c.engine and c.engine.startswith("stage:")} == \
        {f"stage:{s}" for s in WORKFLOWS[workflow]}
    arrivals = [0.0, 0.3, 0.4, 1.5, 1.6, 3.0]
    chain = run_requests(b, arrivals, gpu=GPU, orchestration="chain", seed=3)
    teola = run_requests(b, arrivals, gpu=GPU, orchestration="teola", seed=3)
    assert [r.outputs for r in chain] == [r.outputs for r in teola]
    assert all(r.outputs and all(v for v in r.outputs.values()) for r in teola)


@pytest.mark.parametrize("workflow", list(WORKFLOWS))
def test_teola_never_slower_on_one_isolated_request(workflow):
    dep, insts = _dep(workflow, WORKFLOWS[workflow])
    b = bind(load_task("rag-qa"), dep, insts)
    for seed in range(3):
        (c,) = run_requests(b, [0.0], gpu=GPU, orchestration="chain", seed=seed)
        (t,) = run_requests(b, [0.0], gpu=GPU, orchestration="teola", seed=seed)
        assert t.latency_s <= c.latency_s + 1e-9


def test_chain_scheme_is_configurable_and_checked():
    assert scheme_for("chain") == "llamadist-to"
    assert scheme_for("chain", chain_scheme="llamadist-po") == "llamadist-po"
    assert scheme_for("teola", chain_scheme="llamadist-po") == "teola"
    for bad, kw in (("ayo", {}), ("chain", {"chain_scheme": "llamadsit-to"})):
        with pytest.raises(OrchestrationError) as e:
            scheme_for(bad, **kw)
        assert "\n" not in str(e.value) and "known:" in str(e.value)


def test_bind_errors_are_one_line():
    spec = load_task("rag-qa")
    dep, insts = _dep("answer", ("answer",))
    cases = [
        (spec.model_copy(update={"orchestration": {}}), dep, insts, "has no orchestration app"),
        (spec, None, {}, "not placed (no GPU left)"),
        (spec, dep, {}, "unknown instance"),
    ]
    o = spec.orchestration["rewrite-answer"]
    rdep, rinsts = _dep("rewrite-answer", ("rewrite", "answer"))
    cases.append((spec.model_copy(update={"orchestration": {"rewrite-answer": o.model_copy(
        update={"stages": {"synthesis": "answer"}})}}), rdep, rinsts, "expansion are not bound"))
    cases.append((spec.model_copy(update={"orchestration": {"answer": o.model_copy(
        update={"app": "naive_rgb", "stages": {"synthesis": "answer"}})}}), dep, insts, "unknown app 'naive_rgb'"))
    for s, d, i, msg in cases:
        with pytest.raises(OrchestrationError) as e:
            bind(s, d, i, reason="no GPU left")
        assert msg in str(e.value) and "\n" not in str(e.value)


def test_task_file_orchestration_is_validated(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "configs" / "tasks" / "rag-qa.yaml").read_text()
    line = "  answer: {app: naive_rag, stages: {synthesis: answer}}"
    assert line in text
    for new, msg in ((line.replace("answer}}", "answr}}"), "unknown stage(s) answr"),
                     (line + "\n  rewrite-answr: {app: naive_rag, stages: {synthesis: answer}}",
                      "unknown workflow 'rewrite-answr'")):
        p = tmp_path / "t.yaml"
        p.write_text(text.replace(line, new))
        with pytest.raises(ProblemError) as e:
            load_task(p)
        assert msg in str(e.value) and "\n" not in str(e.value)


def test_small_experiment_runs_and_reports_chain_vs_teola(tmp_path, capsys):
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "r", "--no-progress"]) == 0
    run = tmp_path / "plan_orchestration_small" / "r"
    res = pd.read_parquet(run / "results.parquet")
    assert set(res.orchestration) == {"chain", "teola"} and (res.requests > 0).all()
    assert res.goodput.between(0, 1).all()
    req = pd.read_parquet(run / "requests.parquet")
    c, t = (req[req.orchestration == o].set_index("request") for o in ("chain", "teola"))
    assert (c.arrival_s == t.arrival_s).all()
    md = (run / "summary.md").read_text()
    assert "Teola speedup over chain" in md and "| GPU-s held | USD |" in md
    a6000 = load_prices()["a6000"].usd_per_hour("on_demand")
    assert (res.gpu_s_held > 0).all() and np.allclose(res.usd, res.gpu_s_held / 3600.0 * a6000)


def test_experiment_config_errors_are_one_line(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(CFG.read_text().replace("loads_pct: [100]", "loads_pct: [100]\n  orchestrations: [chain, ayo]"))
    assert main([str(cfg), "--results", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown orchestration 'ayo'" in err and len(err.splitlines()) == 1
