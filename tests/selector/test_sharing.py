"""Spec section 9 in the selector's core: the `cluster.sharing` key, compute-aware LeastLoaded,
resolve's `--sharing` and cluster-file key, and sequential deployment keeping the mode."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from selector.deploy import deploy_bundle, deploy_sequence, deploy_task
from selector.errors import ProblemError
from selector.placement import StageDemand, gpu_busy, place
from selector.problem import parse_problem
from selector.clusterfile import load_cluster_file
from solvers.registry import get_solver
from tests.randprob import random_problem, with_sharing

ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "task": {"name": "t", "accuracy_slo": 20.0, "latency_slo_s": 10.0, "arrival_rate_rps": 1.0},
    "models": [{"name": "a", "accuracy": 25.0, "active_params_b": 7.0}],
    "configs": [{"tp": 1, "pp": 1}],
    "workflows": [{"name": "w", "stages": [{"name": "s", "calls": 1}]}],
    "deployments": [{"model": "a", "tp": 1, "pp": 1, "mem_gb": 16.0}],
    "perf": [{"workflow": "w", "stage": "s", "model": "a", "tp": 1, "pp": 1, "latency_s": 1.0, "capacity_rps": 2.0}],
    "cluster": {"gpus": [{"id": 0, "mem_gb": 48.0, "used_gb": 8.0}, {"id": 1, "mem_gb": 48.0, "used_gb": 16.0}],
                "instances": [{"id": "i0", "model": "a", "tp": 1, "pp": 1, "gpus": [0], "utilization": 0.7}]},
}


_UNSET = object()


def _small(sharing=_UNSET, **task) -> dict:
    d = copy.deepcopy(SMALL)
    d["task"].update(task)
    if sharing is not _UNSET:
        d["cluster"]["sharing"] = sharing
    return d


def test_missing_key_means_memory_and_both_modes_parse() -> None:
    assert parse_problem(_small()).cluster.sharing == "memory"
    assert parse_problem(_small("memory")).cluster.sharing == "memory"
    assert parse_problem(_small("compute")).cluster.compute


@pytest.mark.parametrize("bad", ["Compute", "gpu", "", 1, True, None, ["compute"]])
def test_bad_sharing_is_rejected_naming_the_field(bad) -> None:
    with pytest.raises(ProblemError) as exc:
        parse_problem(_small(bad))
    assert exc.value.field == "cluster.sharing"


def test_bad_sharing_on_the_command_line_exits_2(tmp_path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(_small("cpu")))
    r = subprocess.run([sys.executable, "-m", "selector", "solve", str(f)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "cluster.sharing" in r.stderr


def test_compute_placement_skips_busy_gpus_and_counts_what_it_places() -> None:
    free = {0: 40.0, 1: 32.0, 2: 20.0}
    busy = {0: 0.7, 1: 0.2, 2: 0.0}
    assert place(free, [StageDemand(1, 1, 8.0, 0.5)]) == [[[0]]]                  # memory: most free
    assert place(free, [StageDemand(1, 1, 8.0, 0.5)], busy) == [[[1]]]            # 0.7 + 0.5 > 1
    # the first replica lifts GPU 1 to 0.7, so the next stage's replica skips it too
    assert place(free, [StageDemand(1, 1, 8.0, 0.5), StageDemand(1, 1, 8.0, 0.4)], busy) == [[[1]], [[2]]]
    assert place(free, [StageDemand(2, 1, 8.0, 0.9)], busy) is None               # only GPU 2 has room
    assert place(free, [StageDemand(1, 1, 8.0, 0.3)], busy) == [[[0]]]            # 0.7 + 0.3 <= 1 (+1e-9)


def test_compute_sharing_moves_the_replica_away_from_the_busy_gpu() -> None:
    mem = get_solver("exhaustive").select(parse_problem(_small("memory", accuracy_slo=1.0)))
    comp = get_solver("exhaustive").select(parse_problem(_small("compute", accuracy_slo=1.0)))
    # reusing i0 (0.7 + 0.5) fails capacity, so both deploy one replica (u = 0.5)
    assert mem.stages[0].gpus == ((0,),) and comp.stages[0].gpus == ((1,),)
    assert mem.cost_gb_s == comp.cost_gb_s


def test_deploy_keeps_the_mode_and_the_next_task_sees_the_busy_gpus() -> None:
    p = parse_problem(_small("compute"))
    plan, cluster = deploy_task(p, get_solver("exhaustive"))
    assert plan.solved and cluster.sharing == "compute"
    assert gpu_busy(cluster) == pytest.approx({0: 0.7, 1: 0.5})
    tasks = [p.model_copy(update={"task": p.task.model_copy(update={"name": f"t{i}"})}) for i in range(3)]
    plans, final = deploy_sequence(tasks, p.cluster, get_solver("exhaustive"))
    assert final.sharing == "compute"
    # t1 fills t0's replica (0.5 + 0.5) by reuse; then no GPU has room for 0.5 more
    assert [pl.status for pl in plans] == ["optimal", "optimal", "infeasible"]
    assert plans[1].stages[0].reuse == "t0/s/0"
    assert all(b <= 1 + 1e-9 for b in gpu_busy(final).values())


def test_bundle_keeps_the_mode() -> None:
    p = parse_problem(_small("compute"))
    task = {k: v for k, v in p.to_dict().items() if k != "cluster"}
    from selector.deploy import parse_problem_cluster
    out = deploy_bundle({"cluster": parse_problem_cluster(p.to_dict()["cluster"]), "tasks": [parse_problem(
        {**task, "cluster": p.to_dict()["cluster"]})]}, get_solver("exhaustive"))
    assert out["cluster"]["sharing"] == "compute"


def test_sequence_in_compute_mode_never_overloads_a_gpu_it_touches() -> None:
    for seed in range(15):
        p = with_sharing(random_problem(seed), "compute")
        before = gpu_busy(p.cluster)
        plan, cluster = deploy_task(p, get_solver("exhaustive"))
        after = gpu_busy(cluster)
        touched = {g for g in after if after[g] != before[g]}
        assert all(after[g] <= 1 + 1e-6 for g in touched), seed


def test_cluster_file_key_and_override(tmp_path) -> None:
    base = yaml.safe_load((ROOT / "configs" / "clusters" / "a6000x8.yaml").read_text())
    assert load_cluster_file()[0].sharing == "memory"
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({**base, "sharing": "compute"}))
    assert load_cluster_file(f)[0].sharing == "compute"
    assert load_cluster_file(f, sharing="memory")[0].sharing == "memory"
    f.write_text(yaml.safe_dump({**base, "sharing": "gpu"}))
    with pytest.raises(ProblemError) as exc:
        load_cluster_file(f)
    assert exc.value.field == "cluster.sharing"
    f.write_text(yaml.safe_dump(base))
    with pytest.raises(ProblemError) as exc:
        load_cluster_file(f, sharing="both")
    assert exc.value.field == "--sharing"


def test_resolve_sharing_option() -> None:
    r = subprocess.run([sys.executable, "-m", "selector", "resolve", "chat", "--json", "--sharing", "compute"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cluster"]["sharing"] == "compute"
    r = subprocess.run([sys.executable, "-m", "selector", "resolve", "chat", "--sharing", "cpu"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == "" and "--sharing" in r.stderr


def test_shipped_compute_cluster_file() -> None:
    cluster, gpu = load_cluster_file(ROOT / "configs" / "clusters" / "a6000x8-compute.yaml")
    assert cluster.sharing == "compute" and gpu == "a6000" and len(cluster.gpus) == 8


def test_quickstart_reports_both_modes(tmp_path) -> None:
    import pandas as pd

    from experiments.context import RunContext
    from experiments.kinds import quickstart
    ctx = RunContext(run_dir=tmp_path, seed=0, progress=False, config_path=tmp_path / "q.yaml")
    quickstart.run(quickstart.Params(tasks=["chat", "rag-qa"], selectors=["exhaustive", "langchain"],
                                     sharing=["memory", "compute"]), ctx)
    df = pd.read_parquet(tmp_path / "tasks.parquet")
    assert sorted(set(df["sharing"])) == ["compute", "memory"] and len(df) == 2 * 2 * 2
    summary = pd.read_parquet(tmp_path / "summary.parquet")
    assert list(summary[["sharing", "selector"]].itertuples(index=False, name=None)) == [
        ("memory", "exhaustive"), ("memory", "langchain"), ("compute", "exhaustive"), ("compute", "langchain")]
    assert (tmp_path / "plans" / "exhaustive.json").exists() and (tmp_path / "plans" / "exhaustive-compute.json").exists()
    plans = json.loads((tmp_path / "plans" / "langchain-compute.json").read_text())
    assert plans["cluster"]["sharing"] == "compute"
