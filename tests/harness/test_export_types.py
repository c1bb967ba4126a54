"""``python -m harness export`` of a plan on a mixed fleet (issue 24 item 4): each instance keeps its
GPU type: its memory share is of that GPU, a Kubernetes node selector asks for that product, the
script and the compose file start one type's servers per host."""
from __future__ import annotations

import json
import subprocess

import yaml

from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from tests.real.test_serve_cli import _export

A, B = "chat/classify/0", "chat/respond/0"


def _plan(tmp_path, typed: bool = True) -> str:
    insts = (InstanceSpec(A, "llama-3.1-8b", 1, 1, (0,), 22.0, 0.3, "a6000" if typed else "gpu"),
             InstanceSpec(B, "llama-3.1-70b", 2, 1, (4, 5), 150.0, 0.5, "h100-sxm" if typed else "gpu"))
    dep = Deployment("chat", "classify-respond", insts, (StageRoute("classify", 1, (Route((A,)),)),
                                                         StageRoute("respond", 1, (Route((B,)),))))
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"task": "chat", "status": "optimal", "deployment": dep.to_dict()}))
    return str(p)


def test_k8s_selects_nodes_by_gpu_product_and_shares_memory_per_type(tmp_path, capsys):
    rc, out, err = _export(capsys, _plan(tmp_path), "--format", "k8s")
    assert rc == 0, err
    deps = [d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"]
    sel = [d["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for d in deps]
    assert sel == ["NVIDIA-RTX-A6000", "NVIDIA-H100-80GB-HBM3"]
    util = [float(d["metadata"]["annotations"]["flowmaker/gpu-memory-utilization"]) for d in deps]
    # 22 GB of a 48 GiB A6000; 75 GB per GPU of an 80 GiB H100
    assert util == [round(22.0 / (48 * 2**30 / 1e9) - 5e-4, 3), round(75.0 / (80 * 2**30 / 1e9) - 5e-4, 3)]


def test_sh_and_compose_start_one_type_per_host(tmp_path, capsys):
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "sh")
    assert rc == 0 and 'if [[ -z "${GPU_TYPE:-}" || "$GPU_TYPE" == h100-sxm ]]; then' in out
    script = tmp_path / "up.sh"
    script.write_text(out)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    rc, out, _ = _export(capsys, _plan(tmp_path), "--format", "compose")
    services = yaml.safe_load(out.split("\n", 1)[1])["services"]
    assert [s["profiles"] for s in services.values()] == [["a6000"], ["h100-sxm"]]


def test_an_untyped_plan_needs_gpu(tmp_path, capsys):
    rc, _, err = _export(capsys, _plan(tmp_path, typed=False), "--format", "k8s")
    assert rc == 2 and err.count("\n") == 1 and "--gpu" in err
    rc, out, _ = _export(capsys, _plan(tmp_path, typed=False), "--format", "compose", "--gpu", "h100-sxm")
    assert rc == 0 and "profiles" not in out                        # one type: no profiles
