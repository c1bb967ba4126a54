"""The analytic model against measured tables: errors (MAPE) and per-GPU calibration.

`predict_like(measured)` evaluates the analytic model at every key of a measured table (dtype
from the table: bf16/fp16 -> 2 bytes, fp32 -> 4). `mape(measured, predicted)` gives the mean
absolute percentage error of ttft_s, tpot_s and mem_gb per (model, gpu, tp, pp) and overall.
`fit_gpu` fits one GPU's `GpuCalibration` to its measured rows: the time constants by
`scipy.optimize.least_squares` on log(predicted/measured) of TTFT and TPOT (relative error,
soft-L1 loss), the memory constants (`runtime_overhead_gb`, `activation_factor`) by bounded
linear least squares on relative memory error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analytic import AnalyticModel
from profiler.calibration import Calibration, GpuCalibration
from profiler.catalog import CatalogError, GpuSpec, ModelSpec
from profiler.table import KEY

ERROR_METRICS = ("ttft_s", "tpot_s", "mem_gb")
CONFIG = ["model", "gpu", "tp", "pp"]
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# (field, lower, upper) of the time constants fitted on end-to-end TTFT/TPOT
TIME_PARAMS = (("compute_eff", 0.01, 1.0), ("mem_eff", 0.01, 1.0), ("kernel_overhead_us", 0.0, 2000.0),
               ("elementwise_mem_eff", 0.01, 1.0), ("elementwise_overhead_us", 0.0, 2000.0),
               ("attn_prefill_eff", 0.002, 1.0), ("attn_decode_mem_eff", 0.01, 1.0),
               ("attn_overhead_us", 0.0, 2000.0), ("iteration_overhead_ms", 0.0, 100.0),
               ("overlap", 0.0, 1.0), ("spill_factor", 1.0, 5.0))

INTERIOR_START = {"overlap": 0.5, "spill_factor": 1.5}
DEFAULT = GpuCalibration()


def _specs(table: pd.DataFrame, models: dict[str, ModelSpec], gpus: dict[str, GpuSpec]) -> None:
    for col, known in (("model", models), ("gpu", gpus)):
        missing = sorted(set(table[col]) - set(known))
        if missing:
            raise CatalogError(f"measured table: unknown {col} {', '.join(missing)}; known: "
                               f"{', '.join(sorted(known))}")
    bad = sorted(set(table.dtype) - set(DTYPE_BYTES))
    if bad:
        raise CatalogError(f"measured table: column 'dtype': unknown {', '.join(bad)}")


def predict_like(measured: pd.DataFrame, models: dict[str, ModelSpec], gpus: dict[str, GpuSpec],
                 calibration: Calibration | None = None, engine: str = "vllm") -> pd.DataFrame:
    """Analytic predictions at the measured keys (same row order; KEY + metric columns); memory
    with `engine`'s weights ("trtllm": the embedding replicated on every TP rank)."""
    _specs(measured, models, gpus)
    ams = {db: AnalyticModel(calibration=calibration, dtype_bytes=db) for db in set(DTYPE_BYTES.values())}
    rows = []
    for r in measured.itertuples(index=False):
        p = ams[DTYPE_BYTES[r.dtype]].predict(models[r.model], gpus[r.gpu], tp=r.tp, pp=r.pp,
                                              batch=r.batch, prompt_tokens=r.prompt_tokens,
                                              output_tokens=r.output_tokens, engine=engine)
        rows.append({**{k: getattr(r, k) for k in KEY}, **vars(p)})
    return pd.DataFrame(rows)


def errors(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """Per row: |predicted - measured| / measured in percent for ERROR_METRICS, joined on KEY."""
    j = measured[KEY + list(ERROR_METRICS)].merge(predicted[KEY + list(ERROR_METRICS)], on=KEY,
                                                  suffixes=("", "_pred"))
    if len(j) != len(measured):
        raise CatalogError(f"reference table lacks {len(measured) - len(j)} of the measured keys")
    out = j[KEY].copy()
    for m in ERROR_METRICS:
        out[m] = 100.0 * (j[f"{m}_pred"] - j[m]).abs() / j[m]
    return out


def mape(err: pd.DataFrame) -> pd.DataFrame:
    """MAPE (%) per (model, gpu, tp, pp) plus an 'all' row; column n = rows."""
    per = err.groupby(CONFIG, sort=True)[list(ERROR_METRICS)].mean()
    per["n"] = err.groupby(CONFIG, sort=True).size()
    total = pd.DataFrame([[*err[list(ERROR_METRICS)].mean(), len(err)]], columns=[*ERROR_METRICS, "n"],
                         index=pd.MultiIndex.from_tuples([("all", "", "", "")], names=CONFIG))
    return pd.concat([per, total])


def format_mape(table: pd.DataFrame, title: str) -> str:
    lines = [title, f"{'model':<16}{'gpu':<10}{'tp':>3}{'pp':>3}{'ttft %':>9}{'tpot %':>9}{'mem %':>9}{'n':>5}"]
    for (model, gpu, tp, pp), r in table.iterrows():
        lines.append(f"{model:<16}{gpu:<10}{tp!s:>3}{pp!s:>3}{r.ttft_s:>9.1f}{r.tpot_s:>9.1f}"
                     f"{r.mem_gb:>9.1f}{int(r.n):>5}")
    return "\n".join(lines)


def _with(cal: Calibration, gpu: str, gc: GpuCalibration) -> Calibration:
    return cal.model_copy(update={"gpus": {**cal.gpus, gpu: gc}})


def fit_gpu(measured: pd.DataFrame, gpu: str, models: dict[str, ModelSpec], gpus: dict[str, GpuSpec],
            base: Calibration, params=TIME_PARAMS) -> GpuCalibration:
    """Fit `gpu`'s constants to its rows of `measured`, starting from `base`'s constants."""
    from scipy.optimize import least_squares, lsq_linear  # noqa: PLC0415
    rows = measured[measured.gpu == gpu].reset_index(drop=True)
    start = base.for_gpu(gpu)
    names = [n for n, _, _ in params]
    lo = np.array([lo for _, lo, _ in params])
    hi = np.array([hi for _, _, hi in params])
    # from a default at a bound (overlap 1, spill 1) the fit would start on a kink
    x0 = np.clip([INTERIOR_START.get(n, getattr(start, n)) if getattr(start, n) == getattr(
        DEFAULT, n) else getattr(start, n) for n in names], lo + 1e-9, hi - 1e-9)
    meas = np.log(np.concatenate([rows.ttft_s, rows.tpot_s]))

    def consts(x) -> GpuCalibration:
        return start.model_copy(update=dict(zip(names, map(float, x))))

    def resid(x):
        p = predict_like(rows, models, gpus, _with(base, gpu, consts(x)))
        return np.log(np.concatenate([p.ttft_s, p.tpot_s])) - meas

    fit = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, x_scale=x0 + 1e-3)
    timed = consts(fit.x)
    # memory: mem - (weights + kv + logits) = overhead * tp*pp + factor * modelled workspace
    zero = timed.model_copy(update={"runtime_overhead_gb": 0.0, "activation_factor": 1.0})
    p0 = predict_like(rows, models, gpus, _with(base, gpu, zero))
    no_ws = _with(base, gpu, zero.model_copy(update={"activation_factor": 1e-12}))
    p_nows = predict_like(rows, models, gpus, no_ws)
    workspace = (p0.mem_gb - p_nows.mem_gb).to_numpy()
    a = np.column_stack([(rows.tp * rows.pp).to_numpy(float), workspace]) / rows.mem_gb.to_numpy()[:, None]
    b = (rows.mem_gb - p_nows.mem_gb).to_numpy() / rows.mem_gb.to_numpy()
    overhead, factor = lsq_linear(a, b, bounds=([0.0, 1e-3], [np.inf, np.inf])).x
    return timed.model_copy(update={
        "runtime_overhead_gb": round(float(overhead), 6), "activation_factor": round(float(factor), 4),
        **{n: round(float(getattr(timed, n)), 6) for n in names},
        "source": f"fitted on measured tables ({len(rows)} rows)"})


def held_out_errors(measured: pd.DataFrame, gpu: str, models: dict[str, ModelSpec],
                    gpus: dict[str, GpuSpec], base: Calibration, by: str = "model") -> pd.DataFrame:
    """Out-of-sample errors: for each value of column `by` (default: leave one model out), fit
    `gpu` on the other rows and predict the left-out ones; per-row errors as `errors`."""
    rows = measured[measured.gpu == gpu]
    out = []
    for v in sorted(set(rows[by])):
        gc = fit_gpu(rows[rows[by] != v], gpu, models, gpus, base)
        held = rows[rows[by] == v]
        out.append(errors(held, predict_like(held, models, gpus, _with(base, gpu, gc))))
    return pd.concat(out, ignore_index=True)
