"""A plan's servers as a launch script, a docker-compose file or Kubernetes manifests.

``deployments_from_json`` reads what ``python -m selector`` prints (a plan with its
``deployment``, ``deploy --json``'s ``plans``, a list of plans, or bare deployments);
``render(specs, fmt)`` turns the :class:`~harness.servers.launcher.ServerSpec` s that
``harness.servers.deploy.specs_for_instances`` derives from them into text, with the same
command lines :class:`~harness.servers.launcher.Fleet` runs (engine flags, memory shares,
per-instance arguments) and the same config files (TensorRT-LLM's ``--config`` YAML):

- ``sh``: a bash script that starts every server in the background with its
  ``CUDA_VISIBLE_DEVICES`` (servers sharing a GPU one after another, each once the previous is
  healthy), waits for ``/health``, prints ``{instance id: URL}`` and stops them all on exit;
- ``compose``: one service per instance, its GPUs by device id (``deploy.resources.
  reservations.devices``), ``ipc: host``, the Hugging Face cache mounted, a health check;
- ``k8s``: per instance a ``Deployment`` (GPU request ``nvidia.com/gpu: tp*pp``, readiness probe
  on ``/health``, a node selector ``nvidia.com/gpu.product`` for its GPU type: the label NVIDIA GPU
  Feature Discovery puts on nodes) and a ``Service``; TensorRT-LLM configs in a ``ConfigMap``. Kubernetes' device
  plugin hands out whole GPUs, so instances the plan co-locates on one GPU each get a GPU of
  their own there unless the cluster shares GPUs (time-slicing, MPS); the plan's GPU ids and
  memory share are kept as annotations.

GPU types (spec section 10): each instance runs on its plan's ``gpu_type`` (its memory share is
of that GPU); a plan without types takes ``--gpu``. When a plan spans several types, the script
starts one type's servers per host (``GPU_TYPE=h100-sxm bash servers.sh``; unset: all) and the
compose services carry the type as a profile (``docker compose --profile h100-sxm up``); GPU ids
stay the plan's cluster ids, so map them to each host's device ids where a cluster numbers GPUs
across hosts.

Model paths default to the catalog's ``hf_id`` (the servers resolve them from the Hugging Face
cache or hub), or come from ``--model-path MODEL=DIR``.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.servers.launcher import ServerSpec, build_command, config_files
from selector.deployment import Deployment

FORMATS = ("sh", "compose", "k8s")
IMAGES = {"vllm": "vllm/vllm-openai:latest", "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:latest",
          "transformers": "huggingface/transformers-pytorch-gpu:latest"}
CONFIG_DIR = "/etc/flowmaker"
#: the node label NVIDIA GPU Feature Discovery sets to the GPU's product name
PRODUCT_LABEL = "nvidia.com/gpu.product"


def deployments_from_json(obj: Any) -> list[Deployment]:
    """Deployments in what ``python -m selector`` prints (module docstring); a plan that deploys
    nothing is skipped. ValueError when nothing in ``obj`` is a plan or a deployment."""
    if isinstance(obj, Mapping) and "plans" in obj:
        obj = obj["plans"]
    items = obj if isinstance(obj, list) else [obj]
    out: list[Deployment] = []
    for it in items:
        if not isinstance(it, Mapping):
            raise ValueError(f"expected a plan or a deployment, got {type(it).__name__}")
        if "instances" in it and "stages" in it:
            out.append(Deployment.from_dict(it))
        elif "status" in it or "deployment" in it:
            if it.get("deployment") is not None:
                out.append(Deployment.from_dict(it["deployment"]))
        else:
            raise ValueError("expected a plan (python -m selector solve --json) or a deployment; "
                             f"got keys {', '.join(sorted(it)) or 'none'}")
    return out


def load_deployments(path: str | Path) -> list[Deployment]:
    from flowmaker.inputs import InputError, parse_text, read_text
    p = Path(path)
    try:         # bounded: size, nesting (flowmaker.inputs)
        obj = parse_text(read_text(p), json_syntax=True, where=str(p))
    except InputError as exc:
        raise ValueError(str(exc)) from None
    return deployments_from_json(obj)


def _portable(cmd: list[str]) -> list[str]:
    return [Path(cmd[0]).name, *cmd[1:]]


def render(specs: Mapping[str, ServerSpec], fmt: str, *, image: str | None = None, namespace: str = "default",
           gpus: Mapping[str, Any] | None = None) -> str:
    """``specs`` ({instance id: spec}) as ``fmt`` (:data:`FORMATS`); ValueError for another.
    ``gpus``: {instance id: the catalog ``GpuSpec`` it runs on} (missing: not known)."""
    gpus = dict(gpus or {})
    if fmt == "sh":
        return _sh(specs, gpus)
    if fmt == "compose":
        return _compose(specs, image, gpus)
    if fmt == "k8s":
        return _k8s(specs, image, namespace, gpus)
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def _mixed(gpus: Mapping[str, Any]) -> bool:
    return len({g.name for g in gpus.values()}) > 1


def _sh(specs: Mapping[str, ServerSpec], gpus: Mapping[str, Any]) -> str:
    lines = ["#!/usr/bin/env bash", "# Servers of a FlowMaker plan (python -m selector export --format sh).",
             "# Logs and configs in $LOG_DIR (default ./flowmaker-servers); Ctrl-C stops every server.",
             "set -euo pipefail", 'LOG_DIR="${LOG_DIR:-./flowmaker-servers}"', 'mkdir -p "$LOG_DIR"',
             "pids=()", "trap 'kill \"${pids[@]}\" 2>/dev/null || true' EXIT INT TERM", "",
             "wait_healthy() {  # url name",
             '  for _ in $(seq 1 1800); do curl -sf "$1/health" >/dev/null && return 0; sleep 1; done',
             '  echo "$2 did not become healthy (log: $LOG_DIR/$2.log)" >&2; exit 1', "}", ""]
    pending: list[ServerSpec] = []
    for iid, s in specs.items():
        for other in [o for o in pending if set(o.gpus) & set(s.gpus)]:
            lines.append(f"wait_healthy {other.base_url} {other.name}  # shares a GPU with {s.name}")
            pending.remove(other)
        for name, text in config_files(s).items():
            lines += [f"cat > \"$LOG_DIR/{name}\" <<'EOF'", text.rstrip("\n"), "EOF"]
        cmd = " ".join(shlex.quote(a) for a in _portable(build_command(s, config_dir="$LOG_DIR")))
        cmd = cmd.replace("'$LOG_DIR/", '"$LOG_DIR"\'/')      # keep the variable expandable
        env = [f"CUDA_VISIBLE_DEVICES={','.join(map(str, s.gpus))}", "HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-0}",
               *(f"{k}={shlex.quote(v)}" for k, v in s.env.items())]
        if s.api_key_env:
            env.append(f'VLLM_API_KEY="${{{s.api_key_env}:?set {s.api_key_env}}}"')
        start = [f"env {' '.join(env)} {cmd} > \"$LOG_DIR/{s.name}.log\" 2>&1 &", "pids+=($!)"]
        gpu = gpus.get(iid)
        lines.append(f"# {iid}" + (f" on {gpu.name} ({gpu.product or gpu.description})" if gpu else ""))
        if _mixed(gpus):     # one host per GPU type: GPU_TYPE picks this host's servers
            lines += [f'if [[ -z "${{GPU_TYPE:-}}" || "$GPU_TYPE" == {gpu.name} ]]; then', *start, "fi"]
        else:
            lines += start
        pending.append(s)
    lines += ["", *(f"wait_healthy {s.base_url} {s.name}" for s in pending)]
    endpoints = json.dumps({iid: s.base_url for iid, s in specs.items()})
    lines += [f"echo {shlex.quote(endpoints)}", "wait", ""]
    return "\n".join(lines)


def _container_spec(s: ServerSpec) -> ServerSpec:
    return s.model_copy(update={"host": "0.0.0.0"})


def _compose(specs: Mapping[str, ServerSpec], image: str | None, gpus: Mapping[str, Any]) -> str:
    services, configs = {}, {}
    for iid, s in specs.items():
        c = _container_spec(s)
        svc: dict[str, Any] = {
            "image": image or IMAGES[s.backend], "entrypoint": _portable(build_command(c, config_dir=CONFIG_DIR)),
            "ports": [f"{s.port}:{s.port}"], "ipc": "host",
            "volumes": ["${HF_HOME:-~/.cache/huggingface}:/root/.cache/huggingface"],
            "environment": {**s.env, **({"VLLM_API_KEY": "${" + s.api_key_env + "}"} if s.api_key_env else {})},
            "healthcheck": {"test": ["CMD", "curl", "-sf", f"http://localhost:{s.port}/health"],
                            "interval": "10s", "retries": 180},
            "labels": {"flowmaker.instance": iid, **({"flowmaker.gpu-type": gpus[iid].name} if iid in gpus else {})},
        }
        if _mixed(gpus):
            svc["profiles"] = [gpus[iid].name]
        if s.gpus:
            svc["deploy"] = {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", "device_ids": [str(g) for g in s.gpus], "capabilities": ["gpu"]}]}}}
        for name, text in config_files(s).items():
            configs[name] = {"content": text}
            svc["configs"] = [{"source": name, "target": f"{CONFIG_DIR}/{name}"}]
        services[s.name] = svc
    doc: dict[str, Any] = {"services": services}
    if configs:
        doc["configs"] = configs
    head = "# Servers of a FlowMaker plan (python -m selector export --format compose): docker compose up\n"
    return head + yaml.safe_dump(doc, sort_keys=False)


def _k8s(specs: Mapping[str, ServerSpec], image: str | None, namespace: str, gpus: Mapping[str, Any]) -> str:
    docs: list[dict] = []
    for iid, s in specs.items():
        c = _container_spec(s)
        app = s.name.lower().replace(".", "-").replace("_", "-").replace("@", "-").replace("#", "-")
        files = config_files(s)
        container: dict[str, Any] = {
            "name": "server", "image": image or IMAGES[s.backend],
            "command": _portable(build_command(c, config_dir=CONFIG_DIR)),
            "ports": [{"containerPort": s.port}],
            "env": [{"name": k, "value": v} for k, v in s.env.items()],
            "readinessProbe": {"httpGet": {"path": "/health", "port": s.port}, "periodSeconds": 10,
                               "failureThreshold": 180},
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
        }
        if s.api_key_env:
            container["env"].append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {
                "name": "flowmaker-api-key", "key": s.api_key_env}}})
        if s.gpus:
            n = str(len(s.gpus))
            container["resources"] = {"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}}
        volumes: list[dict] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
        if files:
            docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": f"{app}-config", "namespace": namespace}, "data": files})
            volumes.append({"name": "config", "configMap": {"name": f"{app}-config"}})
            container["volumeMounts"].append({"name": "config", "mountPath": CONFIG_DIR})
        note = {"flowmaker/instance": iid, "flowmaker/plan-gpus": ",".join(map(str, s.gpus)),
                "flowmaker/gpu-memory-utilization": str(s.engine_config.gpu_memory_utilization)}
        pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
        gpu = gpus.get(iid)
        if gpu is not None:
            note["flowmaker/gpu-type"] = gpu.name
            if s.gpus and gpu.product_label:
                pod["nodeSelector"] = {PRODUCT_LABEL: gpu.product_label}
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": app, "namespace": namespace, "annotations": note},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                              "template": {"metadata": {"labels": {"app": app}, "annotations": note},
                                           "spec": pod}}})
        docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": app, "namespace": namespace},
                     "spec": {"selector": {"app": app}, "ports": [{"port": s.port, "targetPort": s.port}]}})
    head = "# Servers of a FlowMaker plan (python -m selector export --format k8s): kubectl apply -f\n"
    return head + yaml.safe_dump_all(docs, sort_keys=False)


def export_plan(path: str | Path, fmt: str, *, backend: str = "vllm", gpu: str | None = None,
                model_paths: Mapping[str, str] | None = None, base_port: int = 8100, engine: Any = None,
                instance_args: Mapping[str, Sequence[str]] | None = None, image: str | None = None,
                namespace: str = "default", **common: Any) -> str:
    """``python -m selector export``: the plan file's servers rendered as ``fmt``. Each instance
    runs on its plan's GPU type; ``gpu`` names the type of instances whose plan names none."""
    from harness.servers.deploy import instance_gpu, specs_for_instances
    deps = load_deployments(path)
    instances = [i for d in deps for i in d.instances]
    if not instances:
        raise ValueError(f"{path}: the plan deploys no instance")
    types = {i.id: g for i in instances if (g := instance_gpu(i, gpu)) is not None}
    untyped = [i.id for i in instances if i.id not in types]
    if untyped:
        raise ValueError(f"instance {untyped[0]} names no gpu_type (a plan without GPU types): give --gpu")
    specs = specs_for_instances(instances, model_paths=model_paths, backend=backend, base_port=base_port,
                                engine=engine, gpu=gpu, instance_args=instance_args, **common)
    return render(specs, fmt, image=image, namespace=namespace, gpus=types)
