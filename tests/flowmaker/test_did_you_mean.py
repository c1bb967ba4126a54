"""A misspelt key in any input file is one line naming the field and the closest known key, exit 2
(issue 27 item 5): task, resolved problem, cluster file and experiment config."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]


def _run(*argv: str) -> tuple[int, str]:
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return p.returncode, p.stderr


def _one_line(rc: int, err: str, field: str, suggestion: str) -> None:
    assert rc == 2 and err.count("\n") == 1, err
    assert field in err and f"did you mean '{suggestion}'?" in err, err


def test_task_file(tmp_path):
    task = yaml.safe_load((ROOT / "configs/tasks/chat.yaml").read_text())
    task["descripton"] = task.pop("description", "x")
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(task))
    _one_line(*_run("-m", "selector", "resolve", str(path)), "descripton", "description")
    del task["descripton"]
    task["workflows"][0]["stages"][0]["rol"] = task["workflows"][0]["stages"][0].pop("role")
    path.write_text(yaml.safe_dump(task))
    _one_line(*_run("-m", "selector", "resolve", str(path)), "workflows.0.stages.0.rol", "role")


def test_problem_and_cluster_files(tmp_path):
    rc, _ = _run("-m", "selector", "resolve", "chat", "--out", str(tmp_path / "p.yaml"))
    assert rc == 0
    problem = yaml.safe_load((tmp_path / "p.yaml").read_text())
    problem["task"]["latency_slo"] = problem["task"].pop("latency_slo_s")
    (tmp_path / "bad.json").write_text(json.dumps(problem))
    _one_line(*_run("-m", "selector", "solve", str(tmp_path / "bad.json")), "task.latency_slo", "latency_slo_s")
    cluster = yaml.safe_load((ROOT / "configs/clusters/a6000x8.yaml").read_text())
    cluster["nodes"][0]["nmae"] = cluster["nodes"][0].pop("name")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    _one_line(*_run("-m", "selector", "resolve", "chat", "--cluster", str(tmp_path / "c.yaml")), "nmae", "name")


def test_experiment_config(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs/experiments/quickstart.yaml").read_text())
    cfg["sed"] = cfg.pop("seed")
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(cfg))
    _one_line(*_run("-m", "experiments.run", str(tmp_path / "e.yaml")), "sed", "seed")
    cfg["seed"] = cfg.pop("sed")
    cfg["params"]["clustr"] = cfg["params"].pop("cluster")
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(cfg))
    _one_line(*_run("-m", "experiments.run", str(tmp_path / "e.yaml")), "params.clustr", "cluster")
