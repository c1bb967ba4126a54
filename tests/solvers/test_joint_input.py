"""Spec section 11's input rules and command-line faces: every bad task set is one line naming the
field and exit status 2; ``joint``, ``deploy --joint``, ``bundle --joint``, and export of a joint
plan."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from selector.errors import ProblemError
from selector.joint import parse_task_set
from selector.yamlio import load_mapping
from tests.solvers.test_joint_examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]
BASE = load_mapping(EXAMPLES / "joint-same-tasks-for-less.yaml")


def edited(fn) -> dict:
    data = copy.deepcopy(BASE)
    fn(data)
    return data


BAD = {
    "unknown top key": (lambda d: d.update({"cluster_x": 1}), "cluster_x"),
    "missing cluster": (lambda d: d.pop("cluster"), "cluster"),
    "missing tasks": (lambda d: d.pop("tasks"), "tasks"),
    "empty tasks": (lambda d: d.update({"tasks": []}), "tasks"),
    "bad objective": (lambda d: d.update({"objective": "cheapest"}), "objective"),
    "usd without prices": (lambda d: d.update({"objective": "usd_per_hour"}), "cluster.prices"),
    "task not a mapping": (lambda d: d["tasks"].append("chat"), "tasks[2]"),
    "task with its own cluster": (lambda d: d["tasks"][0].update({"cluster": BASE["cluster"]}), "tasks[0].cluster"),
    "task with its own objective": (lambda d: d["tasks"][1].update({"objective": "gb_s"}), "tasks[1].objective"),
    "bad field in a task": (lambda d: d["tasks"][1]["perf"][0].update({"latency_s": -1}), "tasks[1].perf[0].latency_s"),
    "duplicate task names": (lambda d: d["tasks"][1]["task"].update({"name": "a"}), "tasks[1].task.name"),
    "bad cluster": (lambda d: d["cluster"]["gpus"][0].update({"used_gb": 99.0}), "cluster.gpus[0].used_gb"),
    "instance of a model a task does not list": (
        lambda d: d["cluster"].update({"instances": [{"id": "i0", "model": "small", "tp": 1, "pp": 1, "gpus": [0],
                                                      "utilization": 0.1}]}), "cluster.instances[0].model"),
    "input id of a task's new instance": (
        lambda d: d["cluster"].update({"instances": [{"id": "a/gen/0", "model": "big", "tp": 1, "pp": 1, "gpus": [0],
                                                      "utilization": 0.1}]}), "cluster.instances[0].id"),
    "shared id prefix": (lambda d: (d["tasks"][0]["task"].update({"name": "x/y"}),
                                    d["tasks"][1]["task"].update({"name": "x"}),
                                    d["tasks"][1]["workflows"][0]["stages"][0].update({"name": "y/gen"}),
                                    d["tasks"][1]["perf"][0].update({"stage": "y/gen"}),
                                    d["tasks"][0]["workflows"][0]["stages"][0].update({"name": "gen"})), "tasks[1]"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_task_sets_name_the_field(case: str) -> None:
    fn, field = BAD[case]
    with pytest.raises(ProblemError) as exc:
        parse_task_set(edited(fn))
    assert exc.value.field == field, str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_task_set_is_a_mapping() -> None:
    with pytest.raises(ProblemError, match="must be a mapping"):
        parse_task_set([BASE])


def test_an_id_of_another_number_form_is_no_clash() -> None:
    data = edited(lambda d: d["cluster"].update({"instances": [{"id": "a/gen/x", "model": "big", "tp": 1, "pp": 1,
                                                                "gpus": [0], "utilization": 0.1}]}))
    assert parse_task_set(data).cluster.instances[0].id == "a/gen/x"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "selector", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_joint_command_json_and_errors(tmp_path: Path) -> None:
    out = cli("joint", str(EXAMPLES / "joint-same-tasks-for-less.yaml"), "--solver", "exhaustive", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["status"], d["served"], d["total_cost"], d["objective"]) == ("optimal", 2, 30.0, "gb_s")
    assert [p["task"] for p in d["plans"]] == ["a", "b"] and len(d["cluster"]["instances"]) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps(edited(BAD["duplicate task names"][0])))
    for args in (("joint", str(bad)), ("joint", str(EXAMPLES / "joint-greedy-skips.yaml"), "--solver", "nope"),
                 ("joint", str(EXAMPLES / "joint-greedy-skips.yaml"), "--time-limit", "0")):
        res = cli(*args)
        assert res.returncode == 2 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, args


def test_bundle_joint_writes_a_task_set_that_deploy_joint_and_joint_solve(tmp_path: Path) -> None:
    problems = []
    for k, t in enumerate(BASE["tasks"]):
        p = tmp_path / f"t{k}.yaml"
        p.write_text(json.dumps({**t, "cluster": BASE["cluster"]}))
        problems.append(str(p))
    cluster = tmp_path / "cluster.yaml"
    out = tmp_path / "set.json"
    res = cli("bundle", *problems, "--joint", "--json", "--out", str(out))
    assert res.returncode == 0, res.stderr
    data = json.loads(out.read_text())
    assert "objective" not in data and len(data["tasks"]) == 2 and not cluster.exists()   # gb_s: also a bundle
    joint = json.loads(cli("joint", str(out), "--solver", "milp", "--json").stdout)
    deploy = json.loads(cli("deploy", str(out), "--joint", "--solver", "exhaustive", "--json").stdout)
    greedy = json.loads(cli("joint", str(out), "--solver", "sequential", "--json").stdout)
    assert joint["served"] == deploy["served"] == 2 and joint["total_cost"] == deploy["total_cost"] == 30.0
    assert greedy["total_cost"] == 40.0


def test_export_takes_a_joint_plan(tmp_path: Path) -> None:
    from harness.servers.export import load_deployments
    from solvers.joint_registry import get_joint_solver
    from selector.joint import load_task_set
    plan = get_joint_solver("exhaustive").select(load_task_set(EXAMPLES / "joint-greedy-skips.yaml"))
    path = tmp_path / "joint.json"
    path.write_text(plan.to_json())
    deps = load_deployments(path)
    assert [d.task for d in deps] == ["a", "b"]
    assert [len(d.instances) for d in deps] == [1, 2]
