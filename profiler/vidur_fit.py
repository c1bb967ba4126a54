"""Fit `GpuCalibration` constants on vidur's measured operator timings (scipy least squares).

Data (MIT, github.com/microsoft/vidur @ 7d47513363ec447a741ac5e47241580b47724fbf, read-only
under <shared>/vidur): data/profiling/compute/<sku>/<org>/<model>/mlp.csv (GEMMs and
elementwise ops), legacy/e2d00e9/data/profiling/a100/attention.csv (A100 attention),
legacy/.../cpu_overheads.csv, data/profiling/network/<sku>/{all_reduce,send_recv}.csv.
Residuals are log(predicted / measured), so the fit minimises relative error.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from profiler import ops
from profiler.calibration import Calibration, GpuCalibration
from profiler.catalog import GpuSpec, load_gpus

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
LEGACY = "legacy/e2d00e9/data/profiling/a100"
COMPUTE_SKUS = {"a40": "a40", "a100-80gb": "a100", "h100-sxm": "h100"}
NETWORK_SKUS = {"a40": "a40_pairwise_nvlink", "a100-80gb": "a100_dgx", "h100-sxm": "h100_dgx"}
# nominal per-direction link bandwidth of the measured systems (GB/s). vidur's A40 pair peaks
# at ~4 GB/s send/recv, below even PCIe 4.0, so NVLink was evidently not used: PCIe is nominal.
NETWORK_LINK_GBPS = {"a40_pairwise_nvlink": 31.5, "a100_dgx": 300.0, "h100_dgx": 450.0}
TRANSFER = {"a6000": "a40", "l40s": "a40", "h200": "h100-sxm", "a100-40gb": "a100-80gb"}
CLASSES = ("linear", "elementwise", "attn_prefill", "attn_decode", "all_reduce", "send_recv")
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEM_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")


def load_ops(data_dir: Path, sku: str) -> pd.DataFrame:
    """Long table of one SKU's mlp.csv rows (`load_ops_files`)."""
    return load_ops_files(sorted((data_dir / "data/profiling/compute" / sku).glob("*/*/mlp.csv")))


def load_ops_files(files: list[Path]) -> pd.DataFrame:
    """Long table of vidur-format mlp.csv rows: op, tokens, shape, tp, time_s (median).

    op is one of GEMM_OPS, or "layer_elementwise" = the sum of the per-layer memory-bound
    kernels (ELEM_OPS), which is how the step model accounts for them (files lacking one of
    them, i.e. phi-2's parallel block, contribute GEMM rows only).
    """
    keys = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
            "num_tensor_parallel_workers"]
    frames = []
    for f in files:
        raw = pd.read_csv(f)
        for op in GEMM_OPS:
            d = raw[keys].copy()
            d["op"], d["time_s"], d["file"] = op, raw[f"time_stats.{op}.median"] / 1e3, f.parent.name
            frames.append(d)
        cols = [f"time_stats.{op}.median" for op in ELEM_OPS]
        if all(c in raw for c in cols):
            d = raw[keys].copy()
            d["op"], d["time_s"], d["file"] = "layer_elementwise", raw[cols].sum(axis=1) / 1e3, f.parent.name
            frames.append(d)
    df = pd.concat(frames, ignore_index=True).rename(
        columns={"num_tokens": "t", "num_tensor_parallel_workers": "tp", "n_embd": "h"})
    return df[df.time_s > 0].dropna().reset_index(drop=True)


def _op_time(gpu: GpuSpec, cal: GpuCalibration, df: pd.DataFrame) -> np.ndarray:
    t, tp, h = df.t.to_numpy(float), df.tp.to_numpy(), df.h.to_numpy(float)
    d = h / df.n_head.to_numpy()
    qh = df.n_head.to_numpy() / tp
    kvh = np.maximum(1, df.n_kv_head.to_numpy() // tp)
    gated = df.use_gated_mlp.to_numpy(bool)
    f = df.n_expanded_embd.to_numpy(float) / tp
    k_n = {"attn_pre_proj": (h, (qh + 2 * kvh) * d), "attn_post_proj": (qh * d, h),
           "mlp_up_proj": (h, np.where(gated, 2, 1) * f), "mlp_down_proj": (f, h)}
    # bytes per token: two norms (r+w), rope on q and k (r+w), activation, residual add (r2+w1)
    elem_per_tok = [2 * h, 2 * h, 2 * (qh + kvh) * d, np.where(gated, 3, 2) * f, 3 * h]
    out = np.zeros(len(df))
    op = df.op.to_numpy()
    for name, (k, n) in k_n.items():
        m = op == name
        out[m] = ops.gemm_s(gpu, cal, t[m], k[m], n[m])
    m = op == "layer_elementwise"
    out[m] = sum(ops.elementwise_s(gpu, cal, t[m] * b[m] * 2) for b in elem_per_tok)
    return out


def load_attention(data_dir: Path) -> pd.DataFrame:
    """A100 attention timings (Llama-2-70B shape, TP2): prefill and decode rows."""
    raw = pd.read_csv(data_dir / LEGACY / "attention.csv")
    tp = raw.num_tensor_parallel_workers
    df = pd.DataFrame({
        "prefill": raw.is_prefill.astype(bool), "b": raw.batch_size.astype(float),
        "c": raw.prefill_chunk_size.astype(float), "p": raw.kv_cache_size.astype(float),
        "qh": raw.n_q_head / tp, "kvh": (raw.n_kv_head // tp).clip(lower=1),
        "d": raw.n_embd / raw.n_q_head})
    df["time_s"] = np.where(df.prefill, raw["time_stats.attn_prefill.median"],
                            raw["time_stats.attn_decode.median"]) / 1e3
    return df[df.time_s > 0].dropna().reset_index(drop=True)


def _attn_time(gpu: GpuSpec, cal: GpuCalibration, df: pd.DataFrame) -> np.ndarray:
    pre = df.prefill.to_numpy()
    t2 = df.b * ((df.p + df.c) ** 2 - df.p ** 2)
    tp_ = ops.attn_prefill_s(gpu, cal, t2.to_numpy(), (df.b * df.c).to_numpy(), df.qh.to_numpy(),
                             df.kvh.to_numpy(), df.d.to_numpy())
    td = ops.attn_decode_s(gpu, cal, (df.b * df.p).to_numpy(), df.qh.to_numpy(), df.kvh.to_numpy(),
                           df.d.to_numpy())
    return np.where(pre, tp_, td)


def load_network(data_dir: Path, sku: str, collective: str) -> pd.DataFrame | None:
    """Intra-node rows (devices_per_node == num_workers) of one NCCL collective, or None."""
    return load_network_file(data_dir / "data/profiling/network" / sku / f"{collective}.csv", collective)


def load_network_file(f: Path, collective: str) -> pd.DataFrame | None:
    """Intra-node rows of one vidur-format collective CSV, or None when the file is absent."""
    if not f.is_file():
        return None
    raw = pd.read_csv(f)
    raw = raw[(raw.devices_per_node == raw.num_workers) & (raw.num_workers <= 8)]
    return pd.DataFrame({"n": raw.num_workers.to_numpy(), "bytes": raw["size"].to_numpy(float),
                         "time_s": raw[f"time_stats.{collective}.median"].to_numpy() / 1e3})


def _net_time(gpu: GpuSpec, cal: GpuCalibration, df: pd.DataFrame, collective: str, bw: float):
    if collective == "all_reduce":
        return ops.allreduce_s(gpu, cal, df.bytes.to_numpy(), df.n.to_numpy(), bw)
    return ops.sendrecv_s(gpu, cal, df.bytes.to_numpy(), bw)


def mape_pct(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - meas) / meas) * 100.0)


def _fit(base: GpuCalibration, names: list[str], lo: list[float], hi: list[float],
         predict: Callable[[GpuCalibration], np.ndarray], meas: np.ndarray,
         weights: np.ndarray | None = None) -> GpuCalibration:
    w = 1.0 if weights is None else weights

    def resid(x: np.ndarray) -> np.ndarray:
        return w * np.log(predict(base.model_copy(update=dict(zip(names, x)))) / meas)
    x0 = [min(max(getattr(base, n) or 1.0, l), u) for n, l, u in zip(names, lo, hi)]
    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2)
    return base.model_copy(update={n: round(float(v), 4) for n, v in zip(names, res.x)})


def token_bucket_weights(tokens: np.ndarray) -> np.ndarray:
    """Residual weights giving each power-of-two token bucket the same total weight.

    Operator grids hold most rows at prefill sizes (MaverIQ's: 74% at 512-4,096 tokens, 1.5% at
    1-8); unweighted, a fit serves prefill and misses decode-size GEMMs (A6000: by ~17%)."""
    bucket = np.floor(np.log2(tokens)).astype(int)
    _, inverse, counts = np.unique(bucket, return_inverse=True, return_counts=True)
    return np.sqrt(len(tokens) / (counts[inverse] * len(counts)))


def fit_operators(gpu: GpuSpec, start: GpuCalibration, opsdf: pd.DataFrame) -> GpuCalibration:
    """GEMM constants (compute_eff, mem_eff, kernel_overhead_us, overlap) on the GEMM rows with
    token-bucket weights, then the memory-bound kernels' on theirs: the operator fit of GPUs
    measured after vidur (a6000 from MaverIQ, GPUs measured by the GPU check's --ops stage);
    vidur's own GPUs keep `fit_vidur`'s unweighted roofline fit (overlap 1)."""
    gemm, elem = opsdf[opsdf.op.isin(GEMM_OPS)], opsdf[opsdf.op == "layer_elementwise"]
    cal = _fit(start, ["compute_eff", "mem_eff", "kernel_overhead_us", "overlap"], [0.05, 0.05, 0, 0],
               [1, 1, 100, 1], lambda c: _op_time(gpu, c, gemm), gemm.time_s.to_numpy(),
               weights=token_bucket_weights(gemm.t.to_numpy()))
    if elem.empty:
        return cal
    return _fit(cal, ["elementwise_mem_eff", "elementwise_overhead_us"], [0.05, 0], [1, 100],
                lambda c: _op_time(gpu, c, elem), elem.time_s.to_numpy())


def fit_ops_file(path: Path, gpu: GpuSpec, base: Calibration) -> Calibration:
    """`base` with `gpu`'s operator constants fitted on one vidur-format mlp.csv (e.g. the GPU
    check's ops_mlp.csv); its attention, collectives and CPU overhead are kept, and
    mape_pct[gpu] gets linear/elementwise before (defaults) / transferred (`base`) / after."""
    opsdf = load_ops_files([Path(path)])
    prev = base.for_gpu(gpu.name)
    cal = fit_operators(gpu, prev, opsdf)
    cal = cal.model_copy(update={"source": f"{prev.source.split('; operators')[0]}; operators "
                                           f"fitted on {Path(path).name} ({len(opsdf)} rows)"})
    row: dict[str, dict[str, float | None]] = {}
    for cls, names in (("linear", GEMM_OPS), ("elementwise", ("layer_elementwise",))):
        sub = opsdf[opsdf.op.isin(names)]
        if sub.empty:
            continue
        meas = sub.time_s.to_numpy()
        row[cls] = {k: round(mape_pct(_op_time(gpu, c, sub), meas), 2) for k, c in
                    (("before", GpuCalibration()), ("transferred", prev), ("after", cal))}
        row[cls]["n"] = float(len(sub))
    files = [f for f in base.files if not f.endswith(Path(path).name)] + [str(path)]
    return base.model_copy(update={"gpus": {**base.gpus, gpu.name: cal},
                                   "mape_pct": {**base.mape_pct, gpu.name: row}, "files": files})


def _cpu_overhead_ms(data_dir: Path) -> tuple[float, float]:
    raw = pd.read_csv(data_dir / LEGACY / "cpu_overheads.csv")
    total = raw[["SCHEDULE_MEDIAN", "SAMPLER_E2E_MEDIAN", "PREPARE_INPUTS_E2E_MEDIAN",
                 "PROCESS_MODEL_OUTPUTS_MEDIAN"]].sum(axis=1)
    slope, intercept = np.polyfit(raw.batch_size.to_numpy(float), total.to_numpy(), 1)
    return max(0.0, float(intercept)), float(slope)


MapeTable = dict[str, dict[str, dict[str, float | None]]]


def fit_vidur(data_dir: Path, gpus: dict[str, GpuSpec] | None = None) -> Calibration:
    """Fit constants per measured GPU, transfer to unmeasured ones; MAPE before/after inside."""
    gpus = gpus or load_gpus()
    default = GpuCalibration()
    cpu_ms, cpu_slope = _cpu_overhead_ms(data_dir)
    attn = load_attention(data_dir)
    fitted: dict[str, GpuCalibration] = {}
    mape: MapeTable = {}
    for name in ("a100-80gb", "a40", "h100-sxm"):  # a100 first: its attention fit is shared
        gpu, cal = gpus[name], default.model_copy(update={"iteration_overhead_ms": round(cpu_ms, 4)})
        opsdf = load_ops(data_dir, COMPUTE_SKUS[name])
        cal = _fit(cal, ["compute_eff", "mem_eff", "kernel_overhead_us", "elementwise_mem_eff",
                         "elementwise_overhead_us"], [0.05, 0.05, 0, 0.05, 0], [1, 1, 100, 1, 100],
                   lambda c: _op_time(gpu, c, opsdf), opsdf.time_s.to_numpy())
        if name == "a100-80gb":
            cal = _fit(cal, ["attn_prefill_eff", "attn_decode_mem_eff", "attn_overhead_us"],
                       [0.05, 0.05, 0], [1, 1, 100], lambda c: _attn_time(gpu, c, attn),
                       attn.time_s.to_numpy())
        else:
            a100 = fitted["a100-80gb"]
            cal = cal.model_copy(update={k: getattr(a100, k) for k in
                                         ("attn_prefill_eff", "attn_decode_mem_eff", "attn_overhead_us")})
        cal = _fit_network(data_dir, gpu, cal, fitted.get("a100-80gb"))
        src = f"vidur {COMPUTE_SKUS[name]} mlp.csv + {NETWORK_SKUS[name]}"
        if name != "a100-80gb":
            src += "; attention from a100" + (
                "; all-reduce: send/recv bandwidth, a100 latency" if name == "a40" else "")
        fitted[name] = cal.model_copy(update={"source": src})
        mape[name] = _mape(data_dir, gpu, default, fitted[name], opsdf,
                           attn if name == "a100-80gb" else None, name)
    for name, src in TRANSFER.items():
        fitted[name] = fitted[src].model_copy(update={"source": f"transferred from {src} (no measurements)"})
    return Calibration(
        source="github.com/microsoft/vidur", commit=VIDUR_COMMIT, fit_date=dt.date.today().isoformat(),
        files=["data/profiling/compute/{a40,a100,h100}/*/*/mlp.csv", f"{LEGACY}/attention.csv",
               f"{LEGACY}/cpu_overheads.csv",
               "data/profiling/network/{a100_dgx,h100_dgx,a40_pairwise_nvlink}/{all_reduce,send_recv}.csv"],
        notes=(f"iteration_overhead_ms = intercept of a linear fit of vidur's per-step CPU time "
               f"(schedule+sampler+prepare+process outputs) vs batch on A100; the slope "
               f"({cpu_slope:.4f} ms/seq, 2024 vLLM fork) is not applied. Attention measured on "
               f"A100 only; a40/h100 reuse its attention constants."),
        gpus={k: fitted[k] for k in sorted(fitted)}, mape_pct=mape)


def _fit_network(data_dir: Path, gpu: GpuSpec, cal: GpuCalibration,
                 a100: GpuCalibration | None) -> GpuCalibration:
    sku = NETWORK_SKUS[gpu.name]
    bw = NETWORK_LINK_GBPS[sku]
    for coll, lat, eff in (("all_reduce", "allreduce_latency_us", "allreduce_bw_eff"),
                           ("send_recv", "sendrecv_latency_us", "sendrecv_bw_eff")):
        df = load_network(data_dir, sku, coll)
        if df is None or df.empty:
            continue  # filled below from send/recv (same link) and the A100 collective latency
        cal = cal.model_copy(update={lat: gpu.link_latency_us})
        cal = _fit(cal, [lat, eff], [0, 0.01], [500, 1],
                   lambda c, df=df, coll=coll: _net_time(gpu, c, df, coll, bw), df.time_s.to_numpy())
    if load_network(data_dir, sku, "all_reduce") is None and a100 is not None:
        cal = cal.model_copy(update={"allreduce_latency_us": a100.allreduce_latency_us,
                                     "allreduce_bw_eff": cal.sendrecv_bw_eff})
    return cal


def _mape(data_dir: Path, gpu: GpuSpec, before: GpuCalibration, after: GpuCalibration,
          opsdf: pd.DataFrame, attn: pd.DataFrame | None, name: str) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}

    def add(cls: str, f: Callable[[GpuCalibration], np.ndarray], meas: np.ndarray) -> None:
        out[cls] = {"before": round(mape_pct(f(before), meas), 2),
                    "after": round(mape_pct(f(after), meas), 2), "n": float(len(meas))}

    for cls, names in (("linear", GEMM_OPS), ("elementwise", ("layer_elementwise",))):
        sub = opsdf[opsdf.op.isin(names)]
        add(cls, lambda c, sub=sub: _op_time(gpu, c, sub), sub.time_s.to_numpy())
    for cls, pre in (("attn_prefill", True), ("attn_decode", False)):
        if attn is not None:
            sub = attn[attn.prefill == pre]
            add(cls, lambda c, sub=sub: _attn_time(gpu, c, sub), sub.time_s.to_numpy())
    sku = NETWORK_SKUS[name]
    for coll in ("all_reduce", "send_recv"):
        df = load_network(data_dir, sku, coll)
        if df is not None and not df.empty:
            add(coll, lambda c, df=df, coll=coll: _net_time(gpu, c, df, coll, NETWORK_LINK_GBPS[sku]),
                df.time_s.to_numpy())
    return out


def evaluate_mape(data_dir: Path, cal: Calibration, gpus: dict[str, GpuSpec] | None = None) -> MapeTable:
    """MAPE (%) of `cal` vs. the defaults on the vidur data, per measured GPU and class."""
    gpus = gpus or load_gpus()
    attn = load_attention(data_dir)
    return {name: _mape(data_dir, gpus[name], GpuCalibration(), cal.for_gpu(name),
                        load_ops(data_dir, sku), attn if name == "a100-80gb" else None, name)
            for name, sku in COMPUTE_SKUS.items()}


def format_mape(mape: MapeTable) -> str:
    """Markdown table: GPU x class, 'before -> after' MAPE in %, with the a40 transfer's and the
    alpha-beta collectives' MAPE in brackets where stored (a6000)."""
    def cell(r: dict[str, float | None]) -> str:
        extra = [f"{k.replace('_', '-')} {r[k]:.1f}" for k in ("transferred", "alpha_beta") if k in r]
        return f"{r['before']:.1f} -> {r['after']:.1f}" + (f" [{'; '.join(extra)}]" if extra else "")

    lines = ["| GPU | " + " | ".join(CLASSES) + " |", "|---" * (len(CLASSES) + 1) + "|"]
    for gpu, row in mape.items():
        cells = [cell(row[c]) if c in row else "n/a" for c in CLASSES]
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
