"""The step model's constants for current serving engines, fitted on public REAL measurements.

vidur's operator data (configs/calibration/vidur.yaml) times each kernel alone, launched eagerly
on 2024 software. Current engines differ in three ways this fit corrects (issue 23 item 2):
- CUDA graphs: vLLM V1 replays decode (and every batch up to 512 tokens) as a CUDA graph, and
  TensorRT-LLM fuses its kernels, so the fixed cost per kernel is a few microseconds, not
  vidur's 8-16 us launch + sync per kernel (estimate, `GRAPH_ESTIMATES`);
- FlashAttention-2/3 prefill kernels and fused norm/activation kernels (estimates, same place);
- per-step scheduling overhead (CPU) and the GEMM / weight-streaming / KV-read efficiencies of
  current kernels: fitted, by least squares on log(predicted / measured), on the sources of
  configs/calibration/public_serving.yaml marked ``fit: true``. Each source is timed under its
  engine's scheduling mode (``profiler.engine.async_scheduling_default``: vLLM >= 0.14 overlaps
  the CPU step time with the forward, ``StepModel.with_scheduling``), so the CPU step time is
  pinned down by the synchronous sources and hidden in the asynchronous ones.

`python -m profiler calibrate-serving` writes configs/calibration/serving.yaml, which
`load_default_calibration` lays over vidur.yaml for the GPUs it lists (one step model for the
selector and the simulator). Sources, per-source error before / after: docs/profiler.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profiler.analytic import AnalyticModel, StepModel
from profiler.calibration import (Calibration, GpuCalibration, load_calibration, save_calibration,
                                  serving_calibration_path)
from profiler.catalog import configs_dir, load_gpus, load_models, read_yaml_file, shared_data_path

#: GPUs fitted here (measurements exist) -> GPUs that take their constants (same chip family)
FITTED = {"h100-sxm": ("h200",), "a100-40gb": ("a100-80gb",)}
#: not measured by any source: per-kernel fixed costs under CUDA-graph replay, fused elementwise
#: kernels' DRAM efficiency
GRAPH_ESTIMATES = {"kernel_overhead_us": 2.0, "elementwise_overhead_us": 1.0, "attn_overhead_us": 6.0,
                   "elementwise_mem_eff": 0.8}
#: FlashAttention prefill efficiency (causal FLOPs / dense bf16 peak), not fitted (no serving source
#: separates it from compute_eff). h100-sxm: inside the range of FlashAttention-3's causal head-dim-128
#: forward on H100 SXM5 (arXiv:2407.08608, "Attention forward speed, head dim 128", causal: 423 / 521
#: / 579 TFLOPS at 1k / 2k / 4k tokens = 0.43 / 0.53 / 0.59 of 989.4), the kernel vLLM runs on Hopper
#: (vllm/attention/utils/fa_utils.py: FA3 on compute capability 9); a100-40gb: an estimate (FA2).
ATTN_PREFILL_ESTIMATE = {"h100-sxm": 0.5, "a100-40gb": 0.55}
#: fitted per GPU, with bounds
GPU_PARAMS = {"compute_eff": (0.4, 0.95), "mem_eff": (0.5, 0.98), "attn_decode_mem_eff": (0.4, 0.98),
              "allreduce_latency_us": (2.0, 80.0)}
#: bounds of the fitted CPU step time (ms): one for every engine; the synchronous sources expose it
#: whole, the asynchronous ones (vLLM >= 0.14) hide it behind the forward
OVERHEAD_MS = (0.0, 5.0)


def sources_path() -> Path:
    return configs_dir() / "calibration" / "public_serving.yaml"


@dataclass(frozen=True)
class Point:
    """One measurement: a whole offline batch (`latency_s`), or TPOT / TTFT at a concurrency."""

    source: str
    engine: str
    model: str
    gpu: str
    tp: int
    batch: int
    prompt_tokens: int
    output_tokens: int
    metric: str  # batch_latency | tpot | ttft
    measured_s: float
    fit: bool

    @property
    def async_scheduling(self) -> bool:
        return self.engine == "async"


def engine_of(text: str) -> str:
    """The scheduling mode of an engine description: "async" for vLLM >= 0.14, else "sync"
    (``profiler.engine.async_scheduling_default``)."""
    from profiler.engine import async_scheduling_default
    return "async" if async_scheduling_default(text) else "sync"


def _table_points(name: str, src: dict[str, Any], data: Path) -> list[Point]:
    import pandas as pd
    path = data / src["path"]
    if not path.is_file():
        return []
    d = pd.read_csv(path)
    d.columns = [c.strip() for c in d.columns]
    for col, val in src["rows"].items():
        d = d[d[col].isin(val if isinstance(val, list) else [val])]
    d = d[d.Hardware.isin(src["hardware_map"]) & d.Model.isin(src["model_map"])]
    models, gpus = load_models(), load_gpus()
    ttft = "TTFT Latency" in d.columns
    out = []
    for r in d.to_dict("records"):
        model, gpu = src["model_map"][r["Model"]], src["hardware_map"][r["Hardware"]]
        tp, batch = int(r["Num of Hardware"]), int(r["Batch Size"])
        prompt = int(r["Input Length"] if ttft else r["Input Output Length"])
        output = 1 if ttft else prompt
        try:
            sm = AnalyticModel().step_model(models[model], gpus[gpu], tp, 1)
        except ValueError:
            continue
        kv = batch * (prompt + output) * sm.kv_gb_per_token
        if kv > 0.85 * (tp * gpus[gpu].capacity_gb - sm.weights_gb):
            continue  # the engine would run the batch in waves
        meas = float(r["TTFT Latency"] if ttft else r["Latency"])
        if meas < (output - 1) * sm.weights_gb / (tp * gpus[gpu].mem_bw_gbps):
            continue  # faster than streaming the weights once per token at full bandwidth: not a valid row
        out.append(Point(name, engine_of(src["engine"]), model, gpu, tp, batch, prompt, output,
                         "ttft" if ttft else "batch_latency", meas, bool(src["fit"])))
    return out


def load_points(path: Path | None = None, data: Path | None = None) -> tuple[list[Point], list[str]]:
    """Every measurement of the sources file, and one line per source whose data is missing."""
    raw = read_yaml_file(path or sources_path())
    data = data or shared_data_path()
    points: list[Point] = []
    missing: list[str] = []
    for name, src in raw["sources"].items():
        if src["kind"] == "table":
            got = _table_points(name, src, data)
            if not got:
                missing.append(f"{name}: source missing ({data / src['path']} not found)")
            points += got
            continue
        for p in src["points"]:
            for metric in ("tpot", "ttft"):
                if f"{metric}_s" in p:
                    points.append(Point(name, engine_of(src["engine"]), p["model"], p["gpu"], p["tp"],
                                        p["concurrency"] if metric == "tpot" else 1, p["prompt_tokens"], p["output_tokens"], metric,
                                        float(p[f"{metric}_s"]), bool(src["fit"]) and metric == "tpot"))
    return points, missing


def predict(sm: StepModel, p: Point) -> float:
    """The step model's figure for one measurement (seconds)."""
    if p.metric == "batch_latency":  # prefill the batch, then output-1 decode steps at mid context
        return sm.prefill_s(p.prompt_tokens, p.batch) + (p.output_tokens - 1) * sm.decode_step_s(
            p.batch, p.prompt_tokens + p.output_tokens / 2)
    if p.metric == "ttft":  # `batch` prompts prefilled together (offline batches; 1 for servers)
        return sm.prefill_s(p.prompt_tokens, p.batch)
    ctx = p.prompt_tokens + p.output_tokens / 2
    tpot = sm.decode_step_s(p.batch, ctx)
    if p.batch > 1:  # each of the other clients' prefills joins one of this request's steps
        others = p.batch - 1
        mixed = sm.step_s(p.prompt_tokens, float(p.prompt_tokens) ** 2, others, others * ctx)
        tpot += others * (mixed - sm.decode_step_s(others, ctx)) / max(p.output_tokens - 1, 1)
    return tpot


def errors(cal: Calibration, points: list[Point]) -> np.ndarray:
    """predicted / measured - 1 per point, each under its engine's scheduling mode."""
    models, gpus = load_models(), load_gpus()
    am = AnalyticModel(calibration=cal)
    return np.array([predict(am.step_model(models[p.model], gpus[p.gpu], p.tp, 1).with_scheduling(p.async_scheduling), p)
                     / p.measured_s - 1 for p in points])


def _calibration(base: Calibration, x: np.ndarray) -> Calibration:
    gpus = dict(base.gpus)
    k = len(GPU_PARAMS)
    for i, gpu in enumerate(FITTED):
        vals = dict(zip(GPU_PARAMS, x[i * k:(i + 1) * k]))
        gpus[gpu] = base.for_gpu(gpu).model_copy(update={
            **GRAPH_ESTIMATES, "attn_prefill_eff": ATTN_PREFILL_ESTIMATE[gpu], **vals,
            "iteration_overhead_ms": float(x[-1])})
    return base.model_copy(update={"gpus": gpus})


def fit(base: Calibration, points: list[Point]) -> Calibration:
    """Least squares on log(pred/meas) over the `fit` points of the GPUs in `FITTED`."""
    from scipy.optimize import least_squares
    pts = [p for p in points if p.fit and p.gpu in FITTED]
    lo = [b[0] for _ in FITTED for b in GPU_PARAMS.values()] + [OVERHEAD_MS[0]]
    hi = [b[1] for _ in FITTED for b in GPU_PARAMS.values()] + [OVERHEAD_MS[1]]
    x0 = [base.for_gpu(g).model_dump()[k] for g in FITTED for k in GPU_PARAMS] + [1.0]
    x0 = np.clip(x0, np.array(lo) + 1e-6, np.array(hi) - 1e-6)

    counts: dict[str, int] = {}
    for p in pts:
        counts[p.source] = counts.get(p.source, 0) + 1
    weight = np.array([counts[p.source] ** -0.5 for p in pts])  # every source weighs the same

    def residual(x: np.ndarray) -> np.ndarray:
        return weight * np.log1p(errors(_calibration(base, x), pts))

    res = least_squares(residual, x0, bounds=(lo, hi), x_scale="jac")
    return _calibration(base, res.x)


def per_source(cal: Calibration, points: list[Point]) -> dict[str, dict[str, float]]:
    """Source -> {metric: MAPE (%)}, plus n."""
    err = errors(cal, points)
    out: dict[str, dict[str, float]] = {}
    for src in dict.fromkeys(p.source for p in points):
        for metric in ("batch_latency", "tpot", "ttft"):
            e = [abs(v) for v, p in zip(err, points) if p.source == src and p.metric == metric]
            if e:
                out.setdefault(src, {})[metric] = round(100 * float(np.mean(e)), 2)
                out[src][f"{metric}_n"] = len(e)
    return out


def calibrate_serving(vidur: Calibration | None = None, points: list[Point] | None = None,
                      out: Path | None = None) -> Calibration:
    """Fit, write configs/calibration/serving.yaml (or `out`), return the overlay calibration."""
    from profiler.calibration import default_calibration_path
    vidur = vidur or load_calibration(default_calibration_path())
    if points is None:
        points, missing = load_points()
        if missing:
            raise FileNotFoundError("; ".join(missing))
    cal = fit(vidur, points)
    before, after = per_source(vidur, points), per_source(cal, points)
    gpus: dict[str, GpuCalibration] = {}
    for gpu, copies in FITTED.items():
        fitted = {k: round(float(v), 4) for k, v in cal.gpus[gpu].model_dump().items()
                  if k in (*GPU_PARAMS, "iteration_overhead_ms")}
        gc = cal.gpus[gpu].model_copy(update={**fitted, "source": f"serving fit ({gpu} measurements)"})
        gpus[gpu] = gc
        for other in copies:
            gpus[other] = gc.model_copy(update={"source": f"transferred from {gpu} (no measurements)"})
    srcs = read_yaml_file(sources_path())["sources"]
    overlay = Calibration(
        source="public real serving measurements (configs/calibration/public_serving.yaml)",
        files=[f"{n}: {s.get('repo') or s['url']}" for n, s in srcs.items()],
        fit_date=__import__("datetime").date.today().isoformat(),
        notes=(f"fitted CPU step time {cal.gpus['h100-sxm'].iteration_overhead_ms:.3f} ms: exposed whole by "
               f"synchronous engines (TensorRT-LLM rows; vLLM <= 0.13, the default engine), hidden behind the "
               f"forward by asynchronous ones (vLLM >= 0.14 rows: step = max(forward, CPU), "
               f"EngineConfig.async_scheduling); estimates (not measured): "
               f"{GRAPH_ESTIMATES}, attn_prefill_eff {ATTN_PREFILL_ESTIMATE} (h100-sxm: within "
               f"FlashAttention-3's causal head-dim-128 range on H100, 0.43-0.59 at 1k-4k tokens)"),
        gpus=gpus,
        mape_pct={src: {m: {"before": before[src].get(m), "after": after[src].get(m),
                            "n": float(after[src][f"{m}_n"])}
                        for m in ("batch_latency", "tpot", "ttft") if m in after[src]} for src in after})
    save_calibration(overlay, out or serving_calibration_path(), header=_HEADER)
    return overlay


_HEADER = """Step-model constants for current serving engines (vLLM V1, TensorRT-LLM), fitted on public
REAL measurements: configs/calibration/public_serving.yaml (sources, provenance, numbers).
Regenerate: python -m profiler calibrate-serving (profiler/calibration_serving.py).
Laid over vidur.yaml for the GPUs listed here (load_default_calibration).
kernel/elementwise/attention overheads, elementwise_mem_eff and attn_prefill_eff are ESTIMATES
(CUDA-graph replay, fused kernels, FlashAttention), not fitted (h100-sxm's attn_prefill_eff lies in
FlashAttention-3's published causal range, profiler/calibration_serving.py); compute_eff, mem_eff,
attn_decode_mem_eff and iteration_overhead_ms (the per-step CPU time: exposed whole under synchronous
scheduling, hidden behind the forward under vLLM >= 0.14's async scheduling) are fitted.
mape_pct: source -> metric -> MAPE (%) before (vidur.yaml) / after (this fit), n points.
The held-back vLLM 0.11 measurements of issue 23 were not used."""
