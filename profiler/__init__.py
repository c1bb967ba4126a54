"""Profiler: model/GPU catalog, analytic step-time/memory model, latency tables.

Public API (see docs/profiler.md): catalog loaders in profiler.catalog, the analytic
model in profiler.analytic, the table schema in profiler.table (imports pandas/pyarrow).
"""

from profiler.analytic import AnalyticModel, Prediction, StepModel, attn_tokens2, unsupported_reason
from profiler.calibration import Calibration, GpuCalibration, load_calibration
from profiler.catalog import (
    CatalogError,
    ClusterSpec,
    GpuSpec,
    ModelSpec,
    load_accuracy,
    load_cluster,
    load_deploy_configs,
    load_gpus,
    load_models,
    repo_root,
    shared_data_dir,
)

__all__ = [
    "AnalyticModel", "Calibration", "CatalogError", "ClusterSpec", "GpuCalibration", "GpuSpec",
    "ModelSpec", "Prediction", "StepModel", "attn_tokens2", "load_accuracy", "load_calibration",
    "load_cluster", "load_deploy_configs", "load_gpus", "load_models", "repo_root",
    "shared_data_dir", "unsupported_reason",
]
