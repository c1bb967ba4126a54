"""Profiler: model/GPU catalog, analytic step-time/memory model, latency tables, measured backends.

Public API (see docs/profiler.md): catalog loaders in profiler.catalog, the analytic
model in profiler.analytic, the table schema in profiler.table (imports pandas/pyarrow),
the measured backends in profiler.torch_bench / profiler.fingerprint / profiler.trtllm_backend.

Names below are resolved lazily (PEP 562), so `import profiler.torch_bench` needs only torch
and the standard library (the GPU check runs where pydantic, yaml and pandas are absent).
"""

from __future__ import annotations

from flowmaker.lazy import lazy_exports

_EXPORTS = {
    "AnalyticModel": "analytic", "Prediction": "analytic", "StepModel": "analytic",
    "attn_tokens2": "analytic", "unsupported_reason": "analytic",
    "Calibration": "calibration", "GpuCalibration": "calibration", "load_calibration": "calibration",
    "CatalogError": "catalog", "ClusterSpec": "catalog", "GpuSpec": "catalog", "ModelSpec": "catalog",
    "load_accuracy": "catalog", "load_cluster": "catalog", "load_deploy_configs": "catalog",
    "load_gpus": "catalog", "load_models": "catalog", "load_prices": "catalog", "repo_root": "catalog",
    "shared_data_dir": "catalog",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
