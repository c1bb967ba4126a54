"""Fit the `a6000` calibration on MaverIQ's RTX A6000 measurements (vidur's profiler format).

Data: <shared>/maveriq-a6000 = github.com/UT-SysML/MaverIQ @ 067d7a1,
baselines/Vidur/profiling_outputs/ (no licence declared: read in place as calibration and
reference data, never copied into the project; only the fitted constants below live in
configs/calibration/vidur.yaml, with this citation). Per-operator times of one Llama-2-7B and one
Llama-2-70B layer at TP 1/2/4/8 for 1-4,096 tokens, NCCL all-reduce over 2/4/8 GPUs and
send/recv between 2 GPUs (2 KiB-64 MiB), measured on the authors' 8x A6000 PCIe testbed.

The operator constants go through the same fit as vidur's GPUs (`vidur_fit._fit` on
`load_ops_files` rows) through `vidur_fit.fit_operators` (each power-of-two token bucket weighs the
same in the GEMM fit, and the compute/memory `overlap` is fitted: ~0.5, a GEMM near the ridge
point is slower than the plain roofline). The collectives get an alpha-beta fit (kept as the fallback for GPU
counts without a curve) and one measured curve per GPU count (`profiler.collectives`), because
PCIe all-reduce is not alpha-beta (docs/profiler.md). There are no A6000 attention timings in
the source: attention reuses vidur's A100 fit (fractions of the A6000's own peaks), as a40/h100 do.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.calibration import Calibration, GpuCalibration
from profiler.catalog import GpuSpec, load_gpus
from profiler.collectives import fit_curve
from profiler.vidur_fit import (GEMM_OPS, _fit, _net_time, _op_time, fit_operators,
                                load_network_file, load_ops_files, mape_pct)

MAVERIQ = "github.com/UT-SysML/MaverIQ @ 067d7a1"
ROOT = "baselines/Vidur/profiling_outputs"
DATA_NAME = "maveriq-a6000"  # folder under the shared data dir
GPU = "a6000"
ATTN_KEYS = ("attn_prefill_eff", "attn_decode_mem_eff", "attn_overhead_us")


def mlp_files(data_dir: Path) -> list[Path]:
    """The per-operator CSVs (one per model) under `data_dir`."""
    return sorted((data_dir / ROOT).glob("*/mlp/*/*/*/mlp.csv"))


def collective(data_dir: Path, name: str) -> pd.DataFrame | None:
    """Rows (n GPUs, bytes, time_s) of one collective ('all_reduce' or 'send_recv'), or None."""
    files = sorted((data_dir / ROOT / "a6000" / "collective").glob(f"*/{name}.csv"))
    return load_network_file(files[-1], name) if files else None


def has_data(data_dir: Path | None) -> bool:
    return data_dir is not None and bool(mlp_files(data_dir)) and collective(data_dir, "all_reduce") is not None


def fit_a6000(data_dir: Path, base: Calibration, gpus: dict[str, GpuSpec] | None = None) -> Calibration:
    """`base` (vidur's fit) with its `a6000` entry fitted on the MaverIQ data and MAPE inside:
    before = uncalibrated defaults, transferred = `base`'s a6000 (the a40 transfer), after."""
    gpu = (gpus or load_gpus())[GPU]
    a100 = base.for_gpu("a100-80gb")
    start = GpuCalibration(iteration_overhead_ms=a100.iteration_overhead_ms,
                           **{k: getattr(a100, k) for k in ATTN_KEYS})
    cal = fit_operators(gpu, start, load_ops_files(mlp_files(data_dir)))
    cal = _fit_collectives(data_dir, gpu, cal)
    cal = cal.model_copy(update={"source": (
        f"MaverIQ A6000 (UT-SysML, {MAVERIQ}): Llama-2-7B/70B mlp.csv TP1-8 + NCCL all-reduce "
        "2/4/8 GPUs and send/recv curves over PCIe; attention from a100")})
    mape = dict(base.mape_pct)
    mape[GPU] = evaluate(data_dir, gpu, GpuCalibration(), cal, transferred=base.gpus.get(GPU))
    files = [f for f in base.files if "maveriq" not in f] + [
        f"maveriq-a6000/{ROOT}/{{Llama-2-7B,Llama-2-70B}}/mlp/*/meta-llama/*/mlp.csv",
        f"maveriq-a6000/{ROOT}/a6000/collective/*/{{all_reduce,send_recv}}.csv"]
    notes = base.notes.split(" a6000:")[0] + (
        f" a6000: fitted on MaverIQ's A6000 measurements ({MAVERIQ}, read in place from "
        "<shared>/maveriq-a6000; see profiler/maveriq_fit.py).")
    return base.model_copy(update={"gpus": {**base.gpus, GPU: cal}, "mape_pct": mape,
                                   "files": files, "notes": notes})


def _fit_collectives(data_dir: Path, gpu: GpuSpec, cal: GpuCalibration) -> GpuCalibration:
    bw = gpu.link_bw_gbps  # nominal PCIe 4.0 x16 per direction (configs/gpus.yaml)
    curves = {}
    for coll, lat, eff in (("all_reduce", "allreduce_latency_us", "allreduce_bw_eff"),
                           ("send_recv", "sendrecv_latency_us", "sendrecv_bw_eff")):
        df = collective(data_dir, coll)
        if df is None or df.empty:
            continue
        cal = cal.model_copy(update={lat: gpu.link_latency_us})
        cal = _fit(cal, [lat, eff], [0, 0.01], [500, 1],
                   lambda c, df=df, coll=coll: _net_time(gpu, c, df, coll, bw), df.time_s.to_numpy())
        for n, g in df.groupby("n"):
            curves[(coll, int(n))] = fit_curve(g.bytes.to_numpy(), g.time_s.to_numpy())
    return cal.model_copy(update={
        "allreduce_curves": {n: c for (coll, n), c in sorted(curves.items()) if coll == "all_reduce"},
        "sendrecv_curve": curves.get(("send_recv", 2))})


def evaluate(data_dir: Path, gpu: GpuSpec, before: GpuCalibration, after: GpuCalibration,
             transferred: GpuCalibration | None = None) -> dict[str, dict[str, float | None]]:
    """MAPE (%) per operator class of `before`/`after` (and `transferred`) on the MaverIQ data;
    for the collectives also `alpha_beta` = `after` without its curves."""
    opsdf = load_ops_files(mlp_files(data_dir))
    bw = gpu.link_bw_gbps
    ab = after.model_copy(update={"allreduce_curves": {}, "sendrecv_curve": None})
    out: dict[str, dict[str, float | None]] = {}

    def add(cls: str, f, meas: np.ndarray, network: bool = False) -> None:
        row: dict[str, float | None] = {"before": round(mape_pct(f(before), meas), 2)}
        if transferred is not None:
            row["transferred"] = round(mape_pct(f(transferred), meas), 2)
        if network:
            row["alpha_beta"] = round(mape_pct(f(ab), meas), 2)
        row["after"], row["n"] = round(mape_pct(f(after), meas), 2), float(len(meas))
        out[cls] = row

    for cls, names in (("linear", GEMM_OPS), ("elementwise", ("layer_elementwise",))):
        sub = opsdf[opsdf.op.isin(names)]
        add(cls, lambda c, sub=sub: _op_time(gpu, c, sub), sub.time_s.to_numpy())
    for coll in ("all_reduce", "send_recv"):
        df = collective(data_dir, coll)
        if df is not None and not df.empty:
            add(coll, lambda c, df=df, coll=coll: _net_time(gpu, c, df, coll, bw), df.time_s.to_numpy(),
                network=True)
    return out


def evaluate_a6000(data_dir: Path, cal: Calibration, gpus: dict[str, GpuSpec] | None = None):
    """MAPE table of `cal`'s a6000 constants vs the defaults on the MaverIQ data (the test's check)."""
    gpu = (gpus or load_gpus())[GPU]
    return evaluate(data_dir, gpu, GpuCalibration(), cal.for_gpu(GPU))


MODEL_FILES = {"llama-2-7b": "Llama-2-7b-hf", "llama-2-70b": "Llama-2-70b-hf"}


def reference_decode_s(data_dir: Path, model, gpu: GpuSpec, cal: GpuCalibration, *, tp: int,
                       pp: int, batch: int, context_tokens: float) -> float:
    """One decode iteration of `batch` sequences (s) composed from the *measured* medians where
    MaverIQ has them: per layer the four GEMMs and the memory-bound kernels at `batch` tokens and
    two all-reduces of `batch` hidden states (nearest measured sizes); `pp - 1` send/recv hops.
    Decode attention, LM head, embedding/final norm and the CPU step overhead are not measured
    there and come from the analytic model (`cal`). It checks the step model's composition on
    the measured data (docs/profiler.md); it is not an engine measurement."""
    from profiler import ops
    from profiler.analytic import AnalyticModel
    from profiler.calibration import Calibration
    opsdf, allreduce, sendrecv = _cached(str(data_dir))
    rows = opsdf[(opsdf.file == MODEL_FILES[model.name]) & (opsdf.tp == tp) & (opsdf.t == batch)]
    if rows.empty:
        raise KeyError(f"no MaverIQ rows for {model.name} tp={tp} at {batch} tokens")
    layer = rows.groupby("op").time_s.mean().sum()
    h, db = model.hidden, 2
    if tp > 1:
        layer += 2 * _measured(allreduce, tp, batch * h * db)
    qh, kvh = model.heads // tp, max(1, model.kv_heads // tp)
    layer += float(ops.attn_decode_s(gpu, cal, batch * context_tokens, qh, kvh, model.head_dim))
    sm = AnalyticModel(calibration=Calibration(gpus={gpu.name: cal})).step_model(model, gpu, tp, pp)
    rest = (sm.head_gemm.time(batch) + sm.outer_fixed_s + batch * sm.outer_s_per_token
            + sm.iteration_overhead_s)
    hops = (pp - 1) * _measured(sendrecv, 2, batch * h * db) if pp > 1 else 0.0
    return model.layers * layer + rest + hops


@lru_cache(maxsize=2)
def _cached(data_dir: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    d = Path(data_dir)
    return load_ops_files(mlp_files(d)), collective(d, "all_reduce"), collective(d, "send_recv")


def _measured(df: pd.DataFrame, n: int, nbytes: float) -> float:
    """Median of the measured medians at the 5 sizes nearest `nbytes` among `n`-GPU rows."""
    g = df[df.n == n]
    near = (g.bytes - nbytes).abs().nsmallest(5).index
    return float(g.loc[near, "time_s"].median())


DECODE_CONFIGS = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2), (1, 4), (2, 4), (1, 8))


def held_out(data_dir: Path, base: Calibration, gpus: dict[str, GpuSpec] | None = None,
             models: dict | None = None) -> dict[str, dict[str, float]]:
    """Cross-model hold-out of the operator fit: for each model (llama-2-7b, llama-2-70b) fit the
    a6000 GEMM and memory-bound constants on the *other* model's rows only (collectives, attention
    and CPU overhead as in `base`), then score the held-out model: per-operator MAPE (%) of its
    GEMM and memory-bound rows, and the decode-step MAPE of `decode_step_s` against
    `reference_decode_s` over every TP x PP of configs/deploy_configs.yaml at batch 1/8/32
    (context 1,024). Beside each, `in_sample` = the same score of `base`'s (all-rows) fit."""
    from profiler.analytic import AnalyticModel
    from profiler.catalog import load_models
    gpu = (gpus or load_gpus())[GPU]
    models = models or load_models()
    opsdf = load_ops_files(mlp_files(data_dir))
    full = base.for_gpu(GPU)
    out: dict[str, dict[str, float]] = {}
    for name, file in MODEL_FILES.items():
        train, test = opsdf[opsdf.file != file], opsdf[opsdf.file == file]
        fitted = fit_operators(gpu, full, train)
        row: dict[str, float] = {}
        for tag, cal in (("held_out", fitted), ("in_sample", full)):
            for cls, names in (("linear", GEMM_OPS), ("elementwise", ("layer_elementwise",))):
                sub = test[test.op.isin(names)]
                row[f"{cls}_{tag}"] = round(mape_pct(_op_time(gpu, cal, sub), sub.time_s.to_numpy()), 2)
            am = AnalyticModel(calibration=base.model_copy(update={"gpus": {**base.gpus, GPU: cal}}))
            errs = [am.step_model(models[name], gpu, tp, pp).decode_step_s(b, 1024)
                    / reference_decode_s(data_dir, models[name], gpu, cal, tp=tp, pp=pp, batch=b,
                                         context_tokens=1024) - 1
                    for tp, pp in DECODE_CONFIGS for b in (1, 8, 32)]
            row[f"decode_{tag}"] = round(100.0 * float(np.mean(np.abs(errs))), 2)
            row[f"decode_max_{tag}"] = round(100.0 * float(np.max(np.abs(errs))), 2)
        row["n_ops"] = float(len(test))
        out[name] = row
    return out
