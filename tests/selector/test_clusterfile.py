"""Cluster files: deployed instances reserve their footprint on their GPUs (issue 24 item 1)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from selector.clusterfile import cluster_from_spec
from selector.errors import ProblemError
from selector.resolve import load_catalog, resolve_task
from solvers.registry import get_solver

ROOT = Path(__file__).resolve().parents[2]


def _h100x2(*instances: dict) -> dict:
    return {"name": "h100x2", "nodes": [{"name": "n0", "gpus": [
        {"id": 0, "gpu": "h100-sxm", "mem_gb": 80}, {"id": 1, "gpu": "h100-sxm", "mem_gb": 80}]}],
        "instances": list(instances)}


BIG = {"id": "big", "model": "llama-3.1-70b", "tp": 2, "pp": 1, "gpus": [0, 1], "utilization": 0.3}


def test_a_deployed_instance_reserves_what_resolve_gives_a_new_one() -> None:
    cluster, gpu = cluster_from_spec(_h100x2(BIG))
    p = resolve_task("chat", catalog=load_catalog(), cluster=cluster, gpu=gpu)
    mem = {(d.model, d.tp, d.pp): d.mem_gb for d in p.deployments}[("llama-3.1-70b", 2, 1)]
    assert [g.used_gb for g in p.cluster.gpus] == pytest.approx([mem / 2, mem / 2])
    assert mem / 2 > 70.0                       # 140 GB of weights over two GPUs, plus the reserve


def test_the_plan_only_uses_the_memory_the_instance_leaves() -> None:
    cluster, gpu = cluster_from_spec(_h100x2(BIG))
    p = resolve_task("chat", catalog=load_catalog(), cluster=cluster, gpu=gpu)
    plan = get_solver("milp").select(p, time_limit_s=30)
    assert plan.solved
    mem = {(d.model, d.tp, d.pp): d.mem_gb for d in p.deployments}
    placed = {g.id: g.used_gb for g in p.cluster.gpus}
    for st in plan.stages:
        for gpus in st.gpus:
            for g in gpus:
                placed[g] += mem[(st.model, st.tp, st.pp)] / (st.tp * st.pp)
    assert all(placed[g.id] <= g.mem_gb + 1e-9 for g in p.cluster.gpus)


def test_an_explicit_mem_gb_is_taken_as_the_footprint() -> None:
    cluster, _ = cluster_from_spec(_h100x2({**BIG, "mem_gb": 100.0}))
    assert [g.used_gb for g in cluster.gpus] == [50.0, 50.0]
    assert "mem_gb" not in cluster.instances[0].model_dump()


@pytest.mark.parametrize("inst, field", [
    ({**BIG, "mem_gb": 170.0}, "instances[1]"),                         # 2 x 85 GB on 80 GB GPUs
    ({**BIG, "id": "b2"}, "instances[1]"),                              # a second 70B on the same GPUs
    ({**BIG, "id": "b2", "mem_gb": -1}, "instances[1].mem_gb"),
    ({**BIG, "id": "b2", "model": "nope-1b"}, "instances[1].model"),
    ({**BIG, "id": "b2", "gpus": [0, 7]}, "instances[1].gpus"),
    ({**BIG, "id": "b2", "tp": 3, "gpus": [0, 1, 1]}, "instances[1].gpus"),
    ({**BIG}, "instances[1].id"),                                        # duplicate id
])
def test_bad_or_overfull_instances_are_named(inst: dict, field: str) -> None:
    small = {"id": "s", "model": "llama-3.2-1b", "tp": 1, "pp": 1, "gpus": [1], "utilization": 0.0}
    first = BIG if inst.get("mem_gb") != 170.0 else small
    with pytest.raises(ProblemError) as exc:
        cluster_from_spec(_h100x2(first, inst))
    assert exc.value.field == f"cluster: {field}"


@pytest.mark.parametrize("inst", [{**BIG, "model": "nope-1b"}, {**BIG, "mem_gb": 200.0},
                                  {**BIG, "tp": 4, "gpus": [0, 1, 2, 3]}])
def test_resolve_cli_rejects_them_with_one_line_and_exit_2(tmp_path: Path, inst: dict) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(_h100x2(inst)))
    r = subprocess.run([sys.executable, "-m", "selector", "resolve", "chat", "--cluster", str(f)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "instances[0]" in r.stderr, r.stderr


def test_an_instance_of_a_model_without_accuracy_score_is_named() -> None:
    cluster, gpu = cluster_from_spec(_h100x2({**BIG, "model": "llama-2-70b"}))   # a catalog model
    catalog = load_catalog()
    assert "llama-2-70b" not in catalog.models                                  # with no score
    with pytest.raises(ProblemError) as exc:
        resolve_task("chat", catalog=catalog, cluster=cluster, gpu=gpu)
    assert exc.value.field == "cluster.instances[0].model"
