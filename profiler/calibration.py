"""Per-GPU efficiency constants of the analytic model, and the file that stores them.

A `GpuCalibration` holds fractions of the datasheet peaks actually reached and fixed
per-kernel costs; `Calibration` maps GPU names to them plus provenance. Defaults
(uncalibrated) are round textbook figures; configs/calibration/vidur.yaml holds values
fitted on vidur's operator measurements (see profiler/vidur_fit.py, docs/profiler.md).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from profiler.catalog import CatalogError, configs_dir
from profiler.collectives import CollectiveCurve


class GpuCalibration(BaseModel):
    """Efficiency constants for one GPU type (dimensionless fractions of peak, times in us/ms)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_eff: float = Field(default=0.7, gt=0, le=1, description="GEMM FLOP/s / peak")
    mem_eff: float = Field(default=0.8, gt=0, le=1, description="GEMM weight streaming / DRAM peak")
    kernel_overhead_us: float = Field(default=4.0, ge=0, description="fixed time per GEMM kernel")
    elementwise_mem_eff: float = Field(default=0.8, gt=0, le=1)
    elementwise_overhead_us: float = Field(default=4.0, ge=0, description="per norm/rope/act/add kernel")
    attn_prefill_eff: float = Field(default=0.5, gt=0, le=1, description="flash-attention FLOP/s / peak")
    attn_decode_mem_eff: float = Field(default=0.7, gt=0, le=1, description="paged KV read / DRAM peak")
    attn_overhead_us: float = Field(default=8.0, ge=0, description="per attention kernel")
    allreduce_latency_us: float | None = Field(default=None, ge=0, description="None: GPU link latency")
    allreduce_bw_eff: float = Field(default=0.8, gt=0, le=1, description="ring bus bandwidth / link peak")
    sendrecv_latency_us: float | None = Field(default=None, ge=0, description="None: GPU link latency")
    sendrecv_bw_eff: float = Field(default=0.8, gt=0, le=1)
    allreduce_curves: dict[int, CollectiveCurve] = Field(
        default_factory=dict, description="GPU count -> measured all-reduce time vs message size; "
        "replaces the latency/bandwidth pair above for that count (PCIe boxes, docs/profiler.md)")
    sendrecv_curve: CollectiveCurve | None = Field(default=None, description="measured send/recv "
                                                   "time vs size (pipeline hops); None: alpha-beta")
    iteration_overhead_ms: float = Field(default=0.0, ge=0, description="CPU time per engine step")
    spill_factor: float = Field(default=1.0, ge=1, description="weight-streaming time multiplier "
                                "of a multi-row GEMM whose weights exceed the device's cache_mb "
                                "(CPU BLAS; 1 = none)")
    overlap: float = Field(default=1.0, ge=0, le=1, description="how far a kernel's compute and "
                           "memory time overlap: t = max(c, m) + (1 - overlap) * min(c, m); 1 = "
                           "roofline (GPUs), 0 = serial sum")
    runtime_overhead_gb: float = Field(default=1.0, ge=0, description="memory per GPU outside "
                                       "weights, KV and activations (context, workspaces)")
    activation_factor: float = Field(default=1.0, gt=0, description="measured / modelled "
                                     "activation workspace per batched token")
    source: str = "default (uncalibrated)"


class Calibration(BaseModel):
    """Calibration constants per GPU name, with provenance; unknown GPUs get defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = "defaults"
    commit: str = ""
    files: list[str] = Field(default_factory=list)
    fit_date: str = ""
    notes: str = ""
    gpus: dict[str, GpuCalibration] = Field(default_factory=dict)
    mape_pct: dict[str, dict[str, dict[str, float | None]]] = Field(
        default_factory=dict, description="gpu -> operator class -> {before, after, n}"
    )

    def for_gpu(self, gpu_name: str) -> GpuCalibration:
        """Constants for `gpu_name`; the uncalibrated defaults when it is not listed."""
        return self.gpus.get(gpu_name, DEFAULT_GPU_CALIBRATION)


DEFAULT_GPU_CALIBRATION = GpuCalibration()


def default_calibration_path() -> Path:
    return configs_dir() / "calibration" / "vidur.yaml"


def load_calibration(path: Path | str | None = None) -> Calibration:
    """Read a calibration YAML (default configs/calibration/vidur.yaml)."""
    from profiler.catalog import read_yaml_file
    path = Path(path) if path else default_calibration_path()
    raw = read_yaml_file(path)
    try:
        return Calibration.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise CatalogError(f"{path}: field '{field}': {err['msg']}") from None


def measured_calibration_path() -> Path:
    return configs_dir() / "calibration" / "measured.yaml"


def serving_calibration_path() -> Path:
    return configs_dir() / "calibration" / "serving.yaml"


def overlay(cal: Calibration | None, over: Calibration) -> Calibration:
    """`cal` with every GPU that `over` lists taking `over`'s constants."""
    if cal is None:
        return over
    return cal.model_copy(update={"gpus": {**cal.gpus, **over.gpus},
                                  "source": f"{cal.source} + {over.source}",
                                  "files": cal.files + over.files})


def load_default_calibration(*, serving: bool = True) -> Calibration | None:
    """configs/calibration/vidur.yaml (operator fits), overlaid with configs/calibration/serving.yaml
    (fits on public real serving measurements of current engines, `python -m profiler
    calibrate-serving`; skipped with ``serving=False``, the pre-issue-23 model), then with
    configs/calibration/measured.yaml (fits on measured profile tables, `python -m profiler
    calibrate`): a GPU listed in a later file takes its constants from there. None when none
    exists (the model then uses defaults)."""
    cal = None
    paths = (default_calibration_path(), serving_calibration_path() if serving else None,
             measured_calibration_path())
    for path in paths:
        if path is not None and path.is_file():
            cal = overlay(cal, load_calibration(path))
    return cal


def save_calibration(cal: Calibration, path: Path | str, header: str = "") -> None:
    """Write `cal` as YAML with an optional comment header."""
    raw = cal.model_dump(mode="json")
    for gc in raw["gpus"].values():  # GPUs without measured collective curves: leave them out
        if not gc.get("allreduce_curves"):
            gc.pop("allreduce_curves", None)
        if gc.get("sendrecv_curve") is None:
            gc.pop("sendrecv_curve", None)
    body = yaml.safe_dump(raw, sort_keys=False, width=100, default_flow_style=None)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    Path(path).write_text(comment + body, encoding="utf-8")
