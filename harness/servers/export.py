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

Quoting: a plan's ids and names, model paths and per-instance arguments are data, never code.
The script shell-quotes every word it writes (``shlex.quote``) and escapes comments onto one line;
compose and Kubernetes files are emitted by ``yaml.safe_dump`` with ``$`` doubled where compose
(``${VAR}``) or Kubernetes (``$(VAR)`` in ``command`` and ``env``) would expand it; compose service
names keep ``[A-Za-z0-9._-]`` and Kubernetes object names are DNS-1123 labels that also start with a
letter (a ``Service`` name is an RFC 1035 label), with a short hash of the instance id where the
name had to change beyond ``._@#`` -> ``-``. The namespace must be a DNS-1123 label and environment
variable names identifiers (ValueError otherwise); ``--image`` is written as given.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.servers.launcher import ServerSpec, build_command, config_files
from flowmaker.entry import command_name, one_line
from selector.deployment import Deployment

log = logging.getLogger(__name__)

FORMATS = ("sh", "compose", "k8s")
IMAGES = {"vllm": "vllm/vllm-openai:latest", "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:latest",
          "transformers": "huggingface/transformers-pytorch-gpu:latest"}
CONFIG_DIR = "/etc/flowmaker"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: the node label NVIDIA GPU Feature Discovery sets to the GPU's product name
PRODUCT_LABEL = "nvidia.com/gpu.product"


def comment_line(text: str) -> str:
    """``text`` as one shell/YAML comment line: newlines and other control characters escaped."""
    return "# " + json.dumps(text)[1:-1]


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _sh_word(arg: str) -> str:
    """``arg`` shell-quoted; a leading ``$LOG_DIR/`` (the config files' folder) stays expandable."""
    head = "$LOG_DIR/"
    return f'"$LOG_DIR"/{shlex.quote(arg[len(head):])}' if arg.startswith(head) else shlex.quote(arg)


def _no_expand(obj: Any) -> Any:
    """``obj`` with every ``$`` doubled in its strings: compose's ``${VAR}`` interpolation and
    Kubernetes' ``$(VAR)`` expansion both read ``$$`` as ``$``, so they give the text back."""
    if isinstance(obj, str):
        return obj.replace("$", "$$")
    if isinstance(obj, list):
        return [_no_expand(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _no_expand(v) for k, v in obj.items()}
    return obj


def _unique(names: dict[str, str], iid: str, name: str) -> str:
    """``name`` for instance ``iid``, with a hash of ``iid`` where another instance has it."""
    if name in names.values():
        name = f"{name[:54].rstrip('-')}-{_short_hash(iid)}"
    if name in names.values():
        raise ValueError(f"instance {iid!r}: its exported name {name!r} is taken by another instance")
    names[iid] = name
    return name


def compose_service(name: str) -> str:
    """A server name as a compose service name (``[A-Za-z0-9._-]``, starting with a letter or digit)."""
    out = re.sub(r"[^A-Za-z0-9._-]", "-", name)
    return out if out[:1].isalnum() else f"s{out}"


def dns_label(name: str, iid: str) -> str:
    """``name`` as a Kubernetes object name: a DNS-1123 label that starts with a letter (RFC 1035,
    what a ``Service`` needs), at most 63 characters; a hash of ``iid`` is added where the name
    changed beyond lower-casing and ``._@#`` -> ``-``."""
    plain = re.sub(r"[._@#]", "-", name.lower())
    label = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", plain)).strip("-")
    if not label[:1].isalpha():
        label = f"i-{label}".rstrip("-")
    if label != plain or len(label) > 63:
        label = f"{label[:54].rstrip('-')}-{_short_hash(iid)}"
    assert _DNS_LABEL.match(label), label
    return label


def _check_env(specs: Mapping[str, ServerSpec]) -> None:
    for s in specs.values():
        bad = [k for k in s.env if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"environment variable name {bad[0]!r}: expected letters, digits and _")


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
        elif _is_problem(it):
            raise ValueError(resolved_not_plan())
        else:
            raise ValueError(f"expected a plan ({command_name('selector')} solve --json) or a deployment; "
                             f"got keys {', '.join(sorted(it)) or 'none'}")
    return out


def resolved_not_plan() -> str:
    """The message for a resolved problem given where a plan is expected, naming the user's command."""
    return (f"a resolved problem, not a plan: run `{command_name('selector')} solve FILE --json > plan.json` "
            "first and export plan.json")


def _is_problem(obj: Any) -> bool:
    """Whether ``obj`` looks like what ``python -m selector resolve`` writes (a task and its workflows)."""
    return isinstance(obj, Mapping) and "task" in obj and "workflows" in obj


def read_plan_file(path: str | Path) -> Any:
    """The parsed plan file ``path``; ValueError with a message that does not repeat the path (the
    callers name it), e.g. :func:`resolved_not_plan` for a resolved problem (YAML or JSON)."""
    from flowmaker.inputs import InputError, parse_text, read_text
    p = Path(path)
    try:         # bounded: size, nesting (flowmaker.inputs)
        text = read_text(p)
        return parse_text(text, json_syntax=True, where=str(p))
    except InputError as exc:
        try:     # resolve writes YAML: say what the file is instead of where its JSON breaks
            problem = exc.message.startswith("malformed JSON") and _is_problem(parse_text(text, json_syntax=False,
                                                                                          where=str(p)))
        except InputError:
            problem = False
        raise ValueError(resolved_not_plan() if problem else exc.message) from None


def load_deployments(path: str | Path, *, skip_infeasible: bool = True) -> list[Deployment]:
    """The deployments in the plan file ``path`` (:func:`read_plan_file`); ``skip_infeasible``
    False: ValueError naming the first task of the plan set that has no deployment."""
    obj = read_plan_file(path)
    deps = deployments_from_json(obj)
    check_deployed(obj, skip_infeasible)
    return deps


def check_deployed(obj: Any, skip_infeasible: bool) -> None:
    """ValueError naming the first task of the plan set ``obj`` that has no deployment, unless
    ``skip_infeasible`` (then a warning per such task)."""
    bad = undeployed_tasks(obj)
    if bad and not skip_infeasible:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ValueError(f"task {bad[0]}{more} has no deployment: nothing exported; --skip-infeasible exports "
                         "the other tasks' servers")
    for b in bad:
        log.warning("skipped task %s: it has no deployment", b)


def undeployed_tasks(obj: Any) -> list[str]:
    """The plans in ``obj`` (a plan set) that deploy nothing, as ``name (status: reason)``."""
    items = obj.get("plans", obj) if isinstance(obj, Mapping) else obj
    out = []
    for it in items if isinstance(items, list) else [items]:
        if isinstance(it, Mapping) and "status" in it and it.get("deployment") is None:
            why = f"{it.get('status')}: {it['reason']}" if it.get("reason") else str(it.get("status"))
            out.append(one_line(f"{it.get('task', '?')} ({why})", 300))
    return out


def _portable(cmd: list[str]) -> list[str]:
    return [Path(cmd[0]).name, *cmd[1:]]


def render(specs: Mapping[str, ServerSpec], fmt: str, *, image: str | None = None, namespace: str = "default",
           gpus: Mapping[str, Any] | None = None) -> str:
    """``specs`` ({instance id: spec}) as ``fmt`` (:data:`FORMATS`); ValueError for another, for a
    namespace that is not a DNS-1123 label or an environment variable name that is not an identifier.
    ``gpus``: {instance id: the catalog ``GpuSpec`` it runs on} (missing: not known)."""
    _check_env(specs)
    if fmt == "k8s" and not _DNS_LABEL.match(namespace):
        raise ValueError(f"namespace {namespace!r}: expected a DNS-1123 label (a-z, 0-9, '-', at most 63)")
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
    lines = ["#!/usr/bin/env bash", "# Servers of a FlowMaker plan (python -m harness export --format sh).",
             "# Logs and configs in $LOG_DIR (default ./flowmaker-servers); Ctrl-C stops every server.",
             "set -euo pipefail", 'LOG_DIR="${LOG_DIR:-./flowmaker-servers}"', 'mkdir -p "$LOG_DIR"',
             "pids=()", "trap 'kill \"${pids[@]}\" 2>/dev/null || true' EXIT INT TERM", "",
             "wait_healthy() {  # url name",
             '  for _ in $(seq 1 1800); do curl -sf "$1/health" >/dev/null && return 0; sleep 1; done',
             '  echo "$2 did not become healthy (log: $LOG_DIR/$2.log)" >&2; exit 1', "}", ""]
    pending: list[ServerSpec] = []
    for iid, s in specs.items():
        for other in [o for o in pending if set(o.gpus) & set(s.gpus)]:
            lines += [comment_line(f"{other.name} shares a GPU with {s.name}"),
                      f"wait_healthy {shlex.quote(other.base_url)} {shlex.quote(other.name)}"]
            pending.remove(other)
        for name, text in config_files(s).items():
            end = f"FLOWMAKER_EOF_{_short_hash(text)}"     # a line of the text cannot end the here-document
            lines += [f"cat > {_sh_word('$LOG_DIR/' + name)} <<'{end}'", text.rstrip("\n"), end]
        cmd = " ".join(_sh_word(a) for a in _portable(build_command(s, config_dir="$LOG_DIR")))
        env = [f"CUDA_VISIBLE_DEVICES={','.join(map(str, s.gpus))}", "HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-0}",
               *(f"{k}={shlex.quote(v)}" for k, v in s.env.items())]
        if s.api_key_env:
            env.append(f'VLLM_API_KEY="${{{s.api_key_env}:?set {s.api_key_env}}}"')
        log = _sh_word(f"$LOG_DIR/{s.name}.log")
        start = [f"env {' '.join(env)} {cmd} > {log} 2>&1 &", "pids+=($!)"]
        gpu = gpus.get(iid)
        lines.append(comment_line(iid + (f" on {gpu.name} ({gpu.product or gpu.description})" if gpu else "")))
        if _mixed(gpus):     # one host per GPU type: GPU_TYPE picks this host's servers
            lines += [f'if [[ -z "${{GPU_TYPE:-}}" || "$GPU_TYPE" == {shlex.quote(gpu.name)} ]]; then', *start, "fi"]
        else:
            lines += start
        pending.append(s)
    lines += ["", *(f"wait_healthy {shlex.quote(s.base_url)} {shlex.quote(s.name)}" for s in pending)]
    endpoints = json.dumps({iid: s.base_url for iid, s in specs.items()})
    lines += [f"echo {shlex.quote(endpoints)}", "wait", ""]
    return "\n".join(lines)


def _container_spec(s: ServerSpec) -> ServerSpec:
    return s.model_copy(update={"host": "0.0.0.0"})


def _compose(specs: Mapping[str, ServerSpec], image: str | None, gpus: Mapping[str, Any]) -> str:
    services, configs, names = {}, {}, {}
    for iid, s in specs.items():
        c = _container_spec(s)
        svc: dict[str, Any] = {
            "image": image or IMAGES[s.backend], "entrypoint": _portable(build_command(c, config_dir=CONFIG_DIR)),
            "ports": [f"{s.port}:{s.port}"], "ipc": "host",
            "volumes": ["${HF_HOME:-~/.cache/huggingface}:/root/.cache/huggingface"],
            "environment": _no_expand(s.env),
            "healthcheck": {"test": ["CMD", "curl", "-sf", f"http://localhost:{s.port}/health"],
                            "interval": "10s", "retries": 180},
            "labels": _no_expand({"flowmaker.instance": iid,
                                  **({"flowmaker.gpu-type": gpus[iid].name} if iid in gpus else {})}),
        }
        if _mixed(gpus):
            svc["profiles"] = [gpus[iid].name]
        if s.gpus:
            svc["deploy"] = {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", "device_ids": [str(g) for g in s.gpus], "capabilities": ["gpu"]}]}}}
        for name, text in config_files(s).items():
            configs[name] = {"content": _no_expand(text)}
            svc["configs"] = [{"source": name, "target": f"{CONFIG_DIR}/{name}"}]
        svc["entrypoint"] = _no_expand(svc["entrypoint"])
        if s.api_key_env:      # the one value compose is meant to fill in
            svc["environment"]["VLLM_API_KEY"] = "${" + s.api_key_env + "}"
        services[_unique(names, iid, compose_service(s.name))] = svc
    doc: dict[str, Any] = {"services": services}
    if configs:
        doc["configs"] = configs
    head = "# Servers of a FlowMaker plan (python -m harness export --format compose): docker compose up\n"
    return head + yaml.safe_dump(doc, sort_keys=False)


def _k8s(specs: Mapping[str, ServerSpec], image: str | None, namespace: str, gpus: Mapping[str, Any]) -> str:
    docs: list[dict] = []
    names: dict[str, str] = {}
    for iid, s in specs.items():
        c = _container_spec(s)
        app = _unique(names, iid, dns_label(s.name, iid))
        files = config_files(s)
        container: dict[str, Any] = {
            "name": "server", "image": image or IMAGES[s.backend],
            "command": _no_expand(_portable(build_command(c, config_dir=CONFIG_DIR))),
            "ports": [{"containerPort": s.port}],
            "env": [{"name": k, "value": _no_expand(v)} for k, v in s.env.items()],
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
    head = "# Servers of a FlowMaker plan (python -m harness export --format k8s): kubectl apply -f\n"
    return head + yaml.safe_dump_all(docs, sort_keys=False)


def export_plan(path: str | Path, fmt: str, *, backend: str = "vllm", gpu: str | None = None,
                model_paths: Mapping[str, str] | None = None, base_port: int = 8100, engine: Any = None,
                instance_args: Mapping[str, Sequence[str]] | None = None, image: str | None = None,
                namespace: str = "default", skip_infeasible: bool = False, **common: Any) -> str:
    """``python -m harness export``: the plan file's servers rendered as ``fmt``. Each instance
    runs on its plan's GPU type; ``gpu`` names the type of instances whose plan names none. A plan
    set with a task that has no deployment is refused unless ``skip_infeasible``; every command
    follows ``harness.servers.export_rules`` (ValueError naming the instance that breaks one)."""
    from harness.servers.deploy import instance_gpu, specs_for_instances
    from harness.servers.export_rules import apply_rules, warn_gpu_mismatch
    obj = read_plan_file(path)
    deps = deployments_from_json(obj)
    check_deployed(obj, skip_infeasible)
    instances = [i for d in deps for i in d.instances]
    if not instances:
        raise ValueError(f"{path}: the plan deploys no instance")
    types = {i.id: g for i in instances if (g := instance_gpu(i, gpu)) is not None}
    untyped = [i.id for i in instances if i.id not in types]
    if untyped:
        raise ValueError(f"instance {untyped[0]} names no gpu_type (a plan without GPU types): give --gpu")
    warn_gpu_mismatch(obj, instances, instance_gpu(None, gpu))
    specs = specs_for_instances(instances, model_paths=model_paths, backend=backend, base_port=base_port,
                                engine=engine, gpu=gpu, instance_args=instance_args, **common)
    specs = apply_rules(specs, instances, deps, types)
    return render(specs, fmt, image=image, namespace=namespace, gpus=types)
