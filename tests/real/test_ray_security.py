"""Issue 14, item 7: a local Ray started by ``init_ray`` listens on loopback only and demands a
token, so nobody else on the network (or on the machine) can submit work to it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

REPO = Path(__file__).resolve().parents[2]

_DRIVER = textwrap.dedent("""
    import json, os, sys
    import psutil
    from orchestrator.runtime.ray_runtime import init_ray
    ray = init_ray(num_cpus=1)
    assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42        # workers are up and listening
    me = psutil.Process()
    pids = {p.pid: p.name() for p in [me] + me.children(recursive=True)}
    listening = sorted({(pids[c.pid], c.laddr.ip) for c in psutil.net_connections(kind="inet")
                        if c.status == psutil.CONN_LISTEN and c.pid in pids})
    gcs = ray.get_runtime_context().gcs_address
    print(json.dumps({"listening": listening, "gcs": gcs, "mode": os.environ.get("RAY_AUTH_MODE")}), flush=True)
    intruder = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    intruder.update(RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")   # dial 127.0.0.1, no token
    code = "import ray; ray.init(address=%r, log_to_driver=False); print('INTRUDER-IN', flush=True)" % gcs
    import subprocess
    try:
        out = subprocess.run([sys.executable, "-c", code], env=intruder, capture_output=True, text=True, timeout=10)
        stdout, stderr = out.stdout, out.stderr
    except subprocess.TimeoutExpired as exc:                  # still retrying: not let in either
        stdout, stderr = (b.decode() if isinstance(b, bytes) else (b or "") for b in (exc.stdout, exc.stderr))
    print(json.dumps({"intruder_in": "INTRUDER-IN" in stdout,
                      "refused": "InvalidAuthToken" in stderr or "Unauthenticated" in stderr}), flush=True)
    ray.shutdown()
""")


def _loopback(ip: str) -> bool:
    return ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def test_local_ray_listens_on_loopback_only_and_requires_a_token() -> None:
    """Before: init_ray set RAY_AUTH_MODE=disabled and GCS, raylet and workers listened on '::'."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", _DRIVER], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    names = {name for name, _ in first["listening"]}
    assert {"gcs_server", "raylet"} <= names, first
    assert all(_loopback(ip) for _, ip in first["listening"]), first
    assert first["gcs"].startswith("127.0.0.1:") and first["mode"] == "token"
    assert not second["intruder_in"] and second["refused"], second      # no token: refused
