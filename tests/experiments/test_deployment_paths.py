"""One serving model (issue 11): ``make run`` (the quickstart) and the paper experiment deploy the
seven tasks through the same ``plan.deployment``, so every selector gets the same instances,
GPUs and GB on both paths (they used to differ for the baselines)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.context import RunContext
from experiments.kinds import paper_goodput_cost, quickstart
from solvers.registry import names

TASKS = ["code-completion", "chat", "rag-qa", "code-review", "summarization", "math-reasoning", "text-to-sql"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paths")
    q = RunContext(run_dir=root / "quickstart", seed=0, progress=False, config_path=root / "q.yaml")
    p = RunContext(run_dir=root / "paper", seed=0, progress=False, config_path=root / "p.yaml")
    for ctx in (q, p):
        ctx.run_dir.mkdir()
    quickstart.run(quickstart.Params(tasks=TASKS, selectors=names()), q)
    params = paper_goodput_cost.Params(tasks=TASKS, selectors=names())
    problems, _, _ = paper_goodput_cost.resolve_all(params)
    seqs = paper_goodput_cost.deploy_all(params, problems, p)
    return q.run_dir, p.run_dir, seqs


def _cluster(path) -> dict:
    return json.loads(path.read_text())["cluster"]


@pytest.mark.parametrize("selector", names())
def test_same_instances_gpus_and_gb_on_both_paths(runs, selector):
    q_dir, p_dir, seqs = runs
    q = pd.read_parquet(q_dir / "tasks.parquet").query("selector == @selector")
    p = pd.read_parquet(p_dir / "deployments.parquet").query("selector == @selector")
    assert list(q.task) == list(p.task) == TASKS
    assert list(q.new_instances) == list(p.instances_new)
    assert list(q.new_mem_gb) == pytest.approx(list(p.gb_new), rel=1e-12)
    assert list(q.placed) == list(p.placed)
    # the cluster each path leaves: the same instances on the same GPUs, the same memory used
    assert _cluster(q_dir / "plans" / f"{selector}.json") == _cluster(p_dir / "deployments" / f"{selector}.json")
    # and what the simulator runs is that deployment
    plans = json.loads((q_dir / "plans" / f"{selector}.json").read_text())["plans"]
    for d, (_, plan) in zip(plans, seqs[selector]):
        assert d.get("deployment") == (None if plan.deployment is None else plan.deployment.to_dict())
