"""Where the tests find the project's shared folder (``profiler.catalog.shared_root``:
``<repository>/../shared``). The spec examples are part of the tests' input: a checkout without
them fails the tests that need them, it does not skip them."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.catalog import shared_root

EXAMPLES = shared_root() / "spec" / "examples"


def spec_example(name: str, suffix: str = ".yaml") -> Path:
    """``EXAMPLES/<name><suffix>``; fails the calling test when it is missing."""
    path = EXAMPLES / f"{name}{suffix}"
    if not path.is_file():
        pytest.fail(f"spec example {path} not found: the tests need ../shared/spec/examples next to the "
                    "repository (clone the shared folder beside it)", pytrace=False)
    return path


# the smallest valid problem file (one task, model, workflow, deployment and reusable instance): the
# bad-input tests and the fuzz corpus each change one leaf of it
SMALL_PROBLEM = {
    "task": {"name": "t", "accuracy_slo": 20.0, "latency_slo_s": 10.0, "arrival_rate_rps": 1.0},
    "models": [{"name": "a", "accuracy": 25.0, "active_params_b": 7.0}],
    "configs": [{"tp": 1, "pp": 1}, {"tp": 2, "pp": 1}],
    "workflows": [{"name": "w", "stages": [{"name": "s", "calls": 1}]}],
    "deployments": [{"model": "a", "tp": 1, "pp": 1, "mem_gb": 16.0}],
    "perf": [{"workflow": "w", "stage": "s", "model": "a", "tp": 1, "pp": 1, "latency_s": 1.0, "capacity_rps": 2.0}],
    "cluster": {"gpus": [{"id": 0, "mem_gb": 48.0, "used_gb": 8.0}, {"id": 1, "mem_gb": 48.0, "used_gb": 0.0}],
                "instances": [{"id": "i0", "model": "a", "tp": 1, "pp": 1, "gpus": [0], "utilization": 0.2}]},
}


def typed_stages(stages: list[dict]) -> list[dict]:
    """A plan's expected stages with spec section 10's ``gpu_type`` (``"gpu"`` where an expected
    file written before section 10 has none: an untyped problem's plan carries it per stage)."""
    return [{**s, "gpu_type": s.get("gpu_type", "gpu")} for s in stages]
