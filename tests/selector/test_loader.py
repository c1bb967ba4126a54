"""Every kind of bad input the spec lists is rejected with a one-line message naming the
field, exit status 2 and nothing on standard output."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from selector.errors import ProblemError
from selector.problem import parse_problem
from tests.shared import SMALL_PROBLEM

ROOT = Path(__file__).resolve().parents[2]
GOOD = SMALL_PROBLEM


def _mut(path: str, value=None, delete: bool = False, append=None) -> dict:
    d = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    cur = d
    for p in parents:
        cur = cur[int(p)] if p.isdigit() else cur[p]
    if append is not None:
        cur[last].append(append)
    elif delete:
        del cur[int(last) if last.isdigit() else last]
    else:
        cur[int(last) if last.isdigit() else last] = value
    return d


BAD = [
    ("unknown model in perf", _mut("perf.0.model", "zz"), "perf[0].model"),
    ("unknown model in deployment", _mut("deployments.0.model", "zz"), "deployments[0].model"),
    ("unknown workflow", _mut("perf.0.workflow", "zz"), "perf[0].workflow"),
    ("unknown stage", _mut("perf.0.stage", "zz"), "perf[0].stage"),
    ("negative latency", _mut("perf.0.latency_s", -1.0), "perf[0].latency_s"),
    ("zero capacity", _mut("perf.0.capacity_rps", 0), "perf[0].capacity_rps"),
    ("zero mem", _mut("deployments.0.mem_gb", 0.0), "deployments[0].mem_gb"),
    ("non-numeric", _mut("task.latency_slo_s", "ten"), "task.latency_slo_s"),
    ("non-finite", _mut("task.arrival_rate_rps", float("inf")), "task.arrival_rate_rps"),
    ("nan", _mut("models.0.accuracy", float("nan")), "models[0].accuracy"),
    ("tp zero", _mut("configs.0.tp", 0), "configs[0].tp"),
    ("pp not whole", _mut("configs.1.pp", 1.5), "configs[1].pp"),
    ("calls zero", _mut("workflows.0.stages.0.calls", 0), "workflows[0].stages[0].calls"),
    ("bool as number", _mut("models.0.accuracy", True), "models[0].accuracy"),
    ("workflow without stages", _mut("workflows.0.stages", []), "workflows[0].stages"),
    ("missing key", _mut("task.latency_slo_s", delete=True), "task.latency_slo_s"),
    ("unknown key", _mut("task.priority", 3), "task.priority"),
    ("missing section", _mut("perf", delete=True), "perf"),
    ("duplicate perf row", _mut("perf", append=dict(GOOD["perf"][0])), "perf[1]"),
    ("duplicate model", _mut("models", append=dict(GOOD["models"][0])), "models[1]"),
    ("duplicate config", _mut("configs", append={"tp": 1, "pp": 1}), "configs[2]"),
    ("duplicate gpu id", _mut("cluster.gpus", append={"id": 0, "mem_gb": 48.0, "used_gb": 0.0}), "cluster.gpus[2]"),
    ("duplicate instance id", _mut("cluster.instances", append=dict(GOOD["cluster"]["instances"][0], gpus=[1])),
     "cluster.instances[1]"),
    ("gpu not listed", _mut("cluster.instances.0.gpus", [7]), "cluster.instances[0].gpus"),
    ("gpus != tp*pp", _mut("cluster.instances.0.gpus", [0, 1]), "cluster.instances[0].gpus"),
    ("utilization > 1", _mut("cluster.instances.0.utilization", 1.2), "cluster.instances[0].utilization"),
    ("used above mem", _mut("cluster.gpus.0.used_gb", 50.0), "cluster.gpus[0].used_gb"),
    ("instance unknown model", _mut("cluster.instances.0.model", "zz"), "cluster.instances[0].model"),
    ("negative used", _mut("cluster.gpus.1.used_gb", -1.0), "cluster.gpus[1].used_gb"),
]


def test_good_problem_parses() -> None:
    p = parse_problem(GOOD)
    assert p.workflows[0].stages[0].calls == 1
    d = copy.deepcopy(GOOD)
    del d["workflows"][0]["stages"][0]["calls"]
    del d["cluster"]["instances"]
    p = parse_problem(d)
    assert p.workflows[0].stages[0].calls == 1 and p.cluster.instances == ()


def test_config_bigger_than_cluster_is_not_an_error() -> None:
    parse_problem(_mut("configs", append={"tp": 8, "pp": 2}))


@pytest.mark.parametrize("label,data,field", BAD, ids=[b[0] for b in BAD])
def test_rejects(label: str, data: dict, field: str) -> None:
    with pytest.raises(ProblemError) as exc:
        parse_problem(data)
    assert str(exc.value).startswith(field), str(exc.value)
    assert "\n" not in str(exc.value)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "selector", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("label,data,field", BAD[::4], ids=[b[0] for b in BAD[::4]])
def test_cli_exit_2_one_line(tmp_path: Path, label: str, data: dict, field: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(data))
    r = _cli("solve", str(f), "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and field in r.stderr


@pytest.mark.parametrize("text,field", [
    ("task: [unclosed", "malformed YAML"),
    ("task: {name: a}\ntask: {name: b}\n", "duplicate key"),
    ("- just\n- a list\n", "top level"),
])
def test_cli_syntax_errors(tmp_path: Path, text: str, field: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    r = _cli("solve", str(f))
    assert r.returncode == 2 and r.stdout == "" and field in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_unknown_solver_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(GOOD))
    r = _cli("solve", str(f), "--solver", "mlip")
    assert r.returncode == 2 and "error: --solver: unknown solver 'mlip'; known: exhaustive" in r.stderr
    r = _cli("solve", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_cli_profile_without_the_model_names_profile_not_solver() -> None:
    """A KeyError is no longer reported as an error of ``--solver`` (issue 11 item 7)."""
    table = ROOT / "results" / "profiles" / "cpu-tiny-torch.parquet"     # tiny models only
    r = _cli("resolve", "chat", "--profile", str(table))
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: --profile: no rows for model=") and "--solver" not in r.stderr


def test_cli_deploy_rejects_duplicate_task_names(tmp_path: Path) -> None:
    task = {k: v for k, v in GOOD.items() if k != "cluster"}
    f = tmp_path / "bundle.yaml"
    f.write_text(yaml.safe_dump({"cluster": GOOD["cluster"], "tasks": [task, task]}))
    r = _cli("deploy", str(f))
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "tasks[1].task.name: duplicate task name 't'" in r.stderr


def test_cli_infeasible_exits_0(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(_mut("task.accuracy_slo", 90.0)))
    r = _cli("solve", str(f), "--json")
    assert r.returncode == 0 and '"status": "infeasible"' in r.stdout and "accuracy:" in r.stdout
