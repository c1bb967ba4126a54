"""First-hour frictions of issue 27 item 5 on a two-GPU cluster: resolve offers only the TP/PP
configs the cluster holds, an infeasible task's reason names GPU count when that binds, and a
latency SLO above an hour or an arrival rate above the whole cluster's capacity is warned about."""
from __future__ import annotations

from pathlib import Path

import yaml

from selector.cli import main
from selector.problem import load_problem
from selector.sanity import cluster_max_rps

ROOT = Path(__file__).parents[2]
CLUSTER = {"name": "a6000x2", "nodes": [{"name": "n0", "gpus": [{"id": 0, "gpu": "a6000", "mem_gb": 48},
                                                                {"id": 1, "gpu": "a6000", "mem_gb": 48}]}],
           "instances": []}


def _files(tmp_path, **task_changes) -> tuple[str, str]:
    task = yaml.safe_load((ROOT / "configs/tasks/chat.yaml").read_text())
    task.update(task_changes)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(task))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CLUSTER))
    return str(tmp_path / "t.yaml"), str(tmp_path / "c.yaml")


def _resolve(capsys, tmp_path, **task_changes) -> tuple[Path, str]:
    task, cluster = _files(tmp_path, **task_changes)
    out = tmp_path / "p.yaml"
    assert main(["resolve", task, "--cluster", cluster, "--out", str(out)]) == 0
    return out, capsys.readouterr().err


def test_only_configs_the_cluster_holds_and_a_gpu_count_reason(tmp_path, capsys):
    path, err = _resolve(capsys, tmp_path, arrival_rate_rps=40.0)
    p = load_problem(path)
    assert {(c.tp, c.pp) for c in p.configs} == {(1, 1), (1, 2), (2, 1)}
    assert all(d.tp * d.pp <= 2 for d in p.deployments)
    assert "arrival_rate_rps 40 is above what the whole cluster could serve" in err
    assert cluster_max_rps(p) < 40.0
    assert main(["solve", str(path)]) == 0
    out = capsys.readouterr().out
    assert "infeasible" in out and "GPU count" in out and "least new memory" not in out
    assert "may not share a GPU" in out and "the cluster has 2" in out


def test_a_long_slo_warns_and_a_plain_task_does_not(tmp_path, capsys):
    _, err = _resolve(capsys, tmp_path)
    assert "warning" not in err
    _, err = _resolve(capsys, tmp_path, latency_slo_factor=None, latency_slo_s=6000)
    assert "warning: task.latency_slo_s 6000 is above an hour" in err
