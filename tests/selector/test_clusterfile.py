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
    # a 70B instance with a 144 GB footprint leaves 8 GB per GPU: room for an 8B instance at TP2
    cluster, gpu = cluster_from_spec(_h100x2({**BIG, "mem_gb": 144.0}))
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


def test_a_one_type_cluster_stays_the_untyped_problem_with_its_price() -> None:
    cluster, gpu = cluster_from_spec(_h100x2(BIG))
    assert gpu == "h100-sxm" and {g.type for g in cluster.gpus} == {"gpu"} and cluster.prices == {"gpu": 3.99}
    p = resolve_task("chat", catalog=load_catalog(), cluster=cluster, gpu=gpu)
    assert "type" not in p.to_dict()["cluster"]["gpus"][0] and "gpu_type" not in p.to_dict()["configs"][0]


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


# -- mixed types and prices (issue 24 item 3, spec section 10) ------------------------------------
def test_a_mixed_cluster_resolves_rows_per_type_with_prices_from_the_catalog() -> None:
    from profiler.catalog import load_prices
    from selector.clusterfile import load_cluster_file
    cluster, gpu = load_cluster_file("mixed-a6000-h100")
    assert gpu is None and [g.type for g in cluster.gpus] == ["a6000"] * 4 + ["h100-sxm"] * 4
    listed = load_prices()
    assert cluster.prices == {t: listed[t].on_demand.usd_per_hour for t in ("a6000", "h100-sxm")}
    p = resolve_task("chat", catalog=load_catalog(), cluster=cluster, objective="usd_per_hour")
    assert p.objective == "usd_per_hour"
    held = sum(1 for tp, pp in load_catalog().configs if tp * pp <= 4)       # 4 GPUs of each type
    assert held < 10 and [c.gpu_type for c in p.configs] == ["a6000"] * held + ["h100-sxm"] * held
    mem = {(d.model, d.tp, d.pp, d.gpu_type): d.mem_gb for d in p.deployments}
    assert ("llama-3.1-70b", 2, 1, "h100-sxm") in mem and ("llama-3.1-70b", 2, 1, "a6000") not in mem
    lat = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r.latency_s for r in p.perf}
    key = ("respond", "respond", "qwen2.5-3b", 1, 1)
    assert lat[(*key, "h100-sxm")] < lat[(*key, "a6000")]             # H100: more bandwidth


def test_the_latency_slo_follows_the_reference_gpu_not_the_pool() -> None:
    from selector.clusterfile import load_cluster_file
    from selector.resolve import ResolveSettings
    a6000, gpu = load_cluster_file("a6000x8")
    mixed, _ = load_cluster_file("mixed-six")
    ref = ResolveSettings(reference_gpu="a6000")
    slo = [resolve_task("rag-qa", cluster=c, gpu=g, settings=ref).task.latency_slo_s
           for c, g in ((a6000, gpu), (mixed, None))]
    assert slo[0] == pytest.approx(slo[1])
    h100 = resolve_task("rag-qa", cluster=mixed, settings=ResolveSettings(reference_gpu="h100-sxm"))
    assert h100.task.latency_slo_s < slo[0]


def test_spot_pricing_and_a_cluster_override() -> None:
    from profiler.catalog import load_prices
    from selector.clusterfile import load_cluster_file
    cluster, _ = load_cluster_file("mixed-spot-a100-h200")
    assert cluster.prices == {"a100-80gb": load_prices()["a100-80gb"].spot.usd_per_hour, "h200": 2.5}
    assert [g.used_gb for g in cluster.gpus][4:] == [pytest.approx(cluster.gpus[4].used_gb)] * 2
    assert cluster.gpus[4].used_gb > 70


def test_an_instance_across_types_and_a_missing_price_are_named() -> None:
    spec = _h100x2()
    spec["nodes"][0]["gpus"][1]["gpu"] = "a100-80gb"
    with pytest.raises(ProblemError) as exc:
        cluster_from_spec({**spec, "instances": [{**BIG, "mem_gb": 100.0}]})
    assert exc.value.field == "cluster: instances[0].gpus"
    cluster, _ = cluster_from_spec(spec)
    assert cluster.prices is not None
    with pytest.raises(ProblemError) as exc:
        resolve_task("chat", cluster=cluster.model_copy(update={"prices": None}), objective="usd_per_hour")
    assert exc.value.field == "cluster.prices" and "h100-sxm" in str(exc.value)
    from profiler.catalog import CatalogError
    with pytest.raises(CatalogError, match=r"field 'prices.h100-sxm': Input should be greater than 0"):
        cluster_from_spec({**spec, "prices": {"h100-sxm": -1.0}})


def test_every_catalog_gpu_has_a_sourced_price() -> None:
    from profiler.catalog import load_gpus, load_prices
    prices = load_prices()
    assert set(load_gpus()) <= set(prices)
    for name in ("a6000", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h200"):
        p = prices[name]
        assert p.spot is not None and p.spot.usd_per_hour < p.on_demand.usd_per_hour
        for entry in (p.on_demand, p.spot):
            assert entry.note if entry.estimate else (entry.source.startswith("https://") and entry.read[:4] == "2026")


def test_resolve_cli_objective_usd_per_hour(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    r = subprocess.run([sys.executable, "-m", "selector", "resolve", "chat", "--cluster", "mixed-a6000-h100",
                        "--objective", "usd_per_hour", "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    p = yaml.safe_load(out.read_text())
    assert p["objective"] == "usd_per_hour" and p["cluster"]["prices"]["h100-sxm"] > p["cluster"]["prices"]["a6000"]


def test_bundle_and_deploy_keep_types_prices_and_objective(tmp_path: Path, capsys) -> None:
    import json

    from selector.cli import main
    out = tmp_path / "b.yaml"
    assert main(["bundle", "chat", "rag-qa", "--cluster", "mixed-a6000-h100", "--objective", "usd_per_hour",
                 "--out", str(out)]) == 0
    b = yaml.safe_load(out.read_text())
    assert b["cluster"]["prices"] == {"a6000": 1.09, "h100-sxm": 3.99}
    assert {t["objective"] for t in b["tasks"]} == {"usd_per_hour"}
    capsys.readouterr()
    assert main(["deploy", str(out), "--solver", "milp", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [g.get("type") for g in res["cluster"]["gpus"]] == ["a6000"] * 4 + ["h100-sxm"] * 4
    assert res["cluster"]["prices"] == b["cluster"]["prices"]
    for plan in res["plans"]:
        assert plan["status"] == "optimal"
        usd = sum(s["replicas"] * s["tp"] * s["pp"] * b["cluster"]["prices"][s["gpu_type"]] for s in plan["stages"])
        assert usd > 0 and plan["usd_per_hour"] == pytest.approx(usd)
        assert all(i["gpu_type"] in ("a6000", "h100-sxm") for i in plan["deployment"]["instances"])
