"""Plan export with hostile names (issue 27 item 2): instance ids, model paths, per-instance
arguments, environment values and ``--dtype`` holding newlines, ``$(...)``, backticks, quotes,
``#`` and non-ASCII text are data in every format. The script runs with stub servers on PATH and
creates nothing but its logs; compose and Kubernetes files load with ``yaml.safe_load`` and give
every value back after the consumer's ``$`` expansion; Kubernetes names are DNS labels."""
from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from harness.servers.deploy import specs_for_instances
from harness.servers.export import _container_spec, _portable, export_plan, render
from harness.servers.launcher import build_command, config_files
from selector.deployment import Deployment, InstanceSpec, Route, StageRoute

HOSTILE_IDS = ("x\ntouch PWNED_NL\n#", "$(touch PWNED_SUB)", "`touch PWNED_BT`",
               "q'\"; touch PWNED_Q; '\"", "#hash start", "ünïcødé/ステージ/0", "a" * 100)
HOSTILE_ARGS = ["--note", "$(touch PWNED_ARG)", "`touch PWNED_ARG2`", "a'b\"c $HOME", "line\nnext", "# x"]
MODEL_DIR = "/m/$(touch PWNED_MP)/my model"
ENV = {"FM_NOTE": "$(touch PWNED_ENV) `touch PWNED_ENV2` ${HOME} 'q'"}
DTYPE = "float16\nEOF\ntouch PWNED_DT\nkv_cache_config: {}"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _deployment() -> Deployment:
    insts = tuple(InstanceSpec(iid, "llama-3.1-8b", 1, 1, (k // 2,), 22.0) for k, iid in enumerate(HOSTILE_IDS))
    return Deployment("t$(x)\n", "v", insts, (StageRoute("s", len(insts), (Route(HOSTILE_IDS),)),))


def _specs(backend: str):
    return specs_for_instances(_deployment().instances, model_paths={"llama-3.1-8b": MODEL_DIR}, backend=backend,
                               gpu="a6000", instance_args={"*": HOSTILE_ARGS}, env=ENV, dtype=DTYPE,
                               **({"api_key_env": "FM_KEY"} if backend == "vllm" else {}))


def _dollars(obj):
    """What compose's interpolation and Kubernetes' $(VAR) expansion make of ``obj``: ``$$`` -> ``$``."""
    if isinstance(obj, str):
        return obj.replace("$$", "$")
    if isinstance(obj, list):
        return [_dollars(v) for v in obj]
    return {k: _dollars(v) for k, v in obj.items()}


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_sh_script_runs_hostile_names_as_data(tmp_path, backend):
    specs = _specs(backend)
    script = tmp_path / "up.sh"
    script.write_text(render(specs, "sh"), encoding="utf-8")
    stubs, run = tmp_path / "stubs", tmp_path / "run"
    stubs.mkdir()
    run.mkdir()
    for exe, body in ((_portable(build_command(next(iter(specs.values()))))[0],
                       'printf "%s\\0" "$@" > "$STUB_OUT/args.$$"'), ("curl", "exit 0")):
        (stubs / exe).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / exe).chmod(0o755)
    (tmp_path / "argv").mkdir()
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path), "LOG_DIR": str(run / "logs"),
           "STUB_OUT": str(tmp_path / "argv"), "FM_KEY": "k"}
    res = subprocess.run(["bash", str(script)], cwd=run, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith("PWNED")]          # nothing ran
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {i: s.base_url for i, s in specs.items()}
    # every server got exactly its command line, word for word
    got = sorted(tuple(p.read_bytes().decode().split("\0")[:-1]) for p in (tmp_path / "argv").iterdir())
    want = sorted(tuple(_portable(build_command(s, config_dir=str(run / "logs")))[1:]) for s in specs.values())
    assert got == want
    for s in specs.values():          # config files arrive whole, their dtype one YAML string
        for name, text in config_files(s).items():
            assert (run / "logs" / name).read_text() == text.rstrip("\n") + "\n"
            assert yaml.safe_load(text)["dtype"] == DTYPE


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_compose_round_trips_hostile_values(backend):
    specs = _specs(backend)
    doc = yaml.safe_load(render(specs, "compose"))
    services = doc["services"]
    assert len(services) == len(HOSTILE_IDS)
    assert all(re.match(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*$", name) for name in services)
    by_id = {_dollars(svc["labels"]["flowmaker.instance"]): svc for svc in services.values()}
    assert set(by_id) == set(HOSTILE_IDS)
    for iid, s in specs.items():
        svc = by_id[iid]
        assert _dollars(svc["entrypoint"]) == _portable(build_command(_container_spec(s), config_dir="/etc/flowmaker"))
        assert {k: _dollars(v) for k, v in svc["environment"].items() if k != "VLLM_API_KEY"} == ENV
        assert svc["volumes"][0].startswith("${HF_HOME:-")      # the intended interpolations stay
        if backend == "vllm":
            assert svc["environment"]["VLLM_API_KEY"] == "${FM_KEY}"
    for name, cfg in doc.get("configs", {}).items():
        assert yaml.safe_load(_dollars(cfg["content"]))["dtype"] == DTYPE


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_k8s_names_are_dns_labels_and_values_round_trip(backend):
    specs = _specs(backend)
    docs = list(yaml.safe_load_all(render(specs, "k8s")))
    for kind in ("Deployment", "Service"):
        names = [d["metadata"]["name"] for d in docs if d["kind"] == kind]
        assert len(names) == len(set(names)) == len(HOSTILE_IDS)
        assert all(DNS_1035.match(n) for n in names), names
    deps = {d["metadata"]["annotations"]["flowmaker/instance"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deps) == set(HOSTILE_IDS)
    for iid, s in specs.items():
        c = deps[iid]["spec"]["template"]["spec"]["containers"][0]
        assert _dollars(c["command"]) == _portable(build_command(_container_spec(s), config_dir="/etc/flowmaker"))
        assert {e["name"]: _dollars(e["value"]) for e in c["env"] if "value" in e} == ENV
        assert deps[iid]["spec"]["selector"]["matchLabels"]["app"] == deps[iid]["metadata"]["name"]
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert len(cm["metadata"]["name"]) <= 253 and re.match(r"^[a-z0-9-]+$", cm["metadata"]["name"])
        assert all(yaml.safe_load(text)["dtype"] == DTYPE for text in cm["data"].values())


def test_plan_file_with_hostile_ids_exports_and_bad_namespace_or_env_name_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"task": "t", "status": "optimal", "deployment": _deployment().to_dict()}))
    text = export_plan(plan, "sh", gpu="a6000")
    assert not [line for line in text.splitlines() if line.lstrip().startswith("touch")]
    with pytest.raises(ValueError, match="namespace"):
        export_plan(plan, "k8s", gpu="a6000", namespace="prod\nkind: Secret")
    with pytest.raises(ValueError, match="environment variable name"):
        render(specs_for_instances(_deployment().instances, gpu="a6000", env={"A=$(x)": "1"}), "sh")


def test_exported_names_stay_readable_for_plain_ids():
    specs = specs_for_instances((InstanceSpec("chat/draft@v2#0", "llama-3.1-8b", 1, 1, (0,), 10.0),), gpu="a6000")
    k8s = list(yaml.safe_load_all(render(specs, "k8s")))
    assert k8s[0]["metadata"]["name"] == "chat-draft-v2-0"
    assert list(yaml.safe_load(render(specs, "compose"))["services"]) == ["chat.draft-v2-0"]


def test_launch_dry_run_prints_hostile_ids_as_one_comment_line(tmp_path, capsys):
    from harness.cli import main
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"task": "t", "status": "optimal", "deployment": _deployment().to_dict()}))
    assert main(["launch", str(plan), "--gpu", "a6000", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * len(HOSTILE_IDS) and all(line.startswith("# ") for line in lines[::2])
