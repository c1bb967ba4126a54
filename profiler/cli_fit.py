"""The profiler commands that fit and score the analytic model on measurements:
``calibrate-vidur``, ``calibrate-serving``, ``calibrate`` (per-GPU constants from measured tables)
and ``validate`` (the model, or a reference table, against a measured table). ``profiler.cli``
adds their parsers (:func:`add_parsers`) and runs them (:data:`COMMANDS`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowmaker.entry import UserError
from profiler.analytic import AnalyticModel
from profiler.calibration import default_calibration_path, measured_calibration_path, save_calibration
from profiler.catalog import recorded_table_path, shared_data_dir, shared_data_hint


def add_parsers(sub: "argparse._SubParsersAction") -> None:
    """The fitting commands' subparsers, on ``sub`` (``add_subparsers``' result)."""
    cv = sub.add_parser("calibrate-vidur", help="fit configs/calibration/vidur.yaml on vidur's data")
    cv.add_argument("--data", type=Path, help="vidur data dir (default <shared>/vidur)")
    cv.add_argument("--maveriq", type=Path, help="MaverIQ A6000 data dir for the a6000 fit "
                    "(default <shared>/maveriq-a6000; absent: a6000 keeps the a40 transfer)")
    cv.add_argument("--ops", action="append", default=[], metavar="GPU=CSV",
                    help="also fit GPU's operator constants on a vidur-format mlp.csv (the GPU "
                    "check's OUT/ops_mlp.csv); repeatable")
    cv.add_argument("--out", type=Path, default=default_calibration_path(),
                    help="calibration YAML to write (default configs/calibration/vidur.yaml)")
    cs = sub.add_parser("calibrate-serving", help="fit configs/calibration/serving.yaml on public real "
                        "serving measurements (configs/calibration/public_serving.yaml)")
    cs.add_argument("--out", type=Path, help="calibration YAML to write (default configs/calibration/serving.yaml)")
    va = sub.add_parser("validate", help="analytic model (or --reference table) vs a measured table")
    va.add_argument("--measured", required=True, help="measured table: a name in results/profiles or a parquet file")
    va.add_argument("--reference", help="compare with this measured table instead "
                    "(e.g. fingerprint vs full depth: error of --measured relative to it)")
    va.add_argument("--engine", choices=["vllm", "trtllm"], default="vllm",
                    help="the engine that was measured: whose weight layout the memory prediction "
                         "takes (trtllm: input embedding on every TP rank; default vllm)")
    va.add_argument("--calibration", help="also score this calibration (a name in configs/calibration "
                    "or a YAML file, e.g. a candidate a6000 overlay)")
    ca = sub.add_parser("calibrate", help="fit per-GPU analytic constants to measured tables")
    ca.add_argument("--measured", nargs="+", required=True,
                    help="measured tables: names in results/profiles or parquet files")
    ca.add_argument("--out", type=Path, default=measured_calibration_path(),
                    help="calibration YAML to write (default configs/calibration/measured.yaml)")


def analytic_model(calibration: str | None) -> AnalyticModel:
    """The analytic model with ``calibration`` (a name in configs/calibration or a YAML file;
    None: the default calibration)."""
    if calibration is None:
        return AnalyticModel()
    from profiler.calibration import load_calibration
    from profiler.catalog import config_path
    return AnalyticModel(calibration=load_calibration(config_path(calibration, "calibration", "calibration")))


def check_out(path: Path) -> None:
    """``--out``'s folder exists (checked before the work, not after it)."""
    if not path.parent.is_dir():
        raise UserError(f"--out: folder {path.parent} does not exist")


def _calibrate_vidur(a: argparse.Namespace) -> None:
    from profiler.vidur_fit import fit_ops_file, fit_vidur, format_mape
    ops = [_gpu_csv(spec) for spec in a.ops]  # check the arguments before the ~3 s fit
    check_out(a.out)
    data = a.data
    if data is None:
        shared = shared_data_dir()
        if shared is None or not (shared / "vidur").is_dir():
            raise UserError(f"--data: vidur data not found (set --data; {shared_data_hint()})")
        data = shared / "vidur"
    if not (data / "data" / "profiling").is_dir():
        raise UserError(f"--data: {data} has no data/profiling folder")
    cal = fit_vidur(data)
    cal = _with_a6000(cal, a.maveriq)
    for gpu, path in ops:
        cal = fit_ops_file(path, gpu, cal)
    save_calibration(cal, a.out, header=(
        "Analytic-model calibration fitted on vidur's operator measurements\n"
        "(github.com/microsoft/vidur, MIT) and, for a6000, on MaverIQ's A6000 measurements\n"
        "(github.com/UT-SysML/MaverIQ @ 067d7a1). Regenerate: python -m profiler calibrate-vidur\n"
        "mape_pct: gpu -> operator class -> MAPE (%) before (defaults) / after (fitted), n rows;\n"
        "a6000 also: transferred (the a40 constants it had before), alpha_beta (collectives\n"
        "without the measured curves). Method and caveats: docs/profiler.md"))
    print(format_mape(cal.mape_pct))
    print(f"wrote {a.out}")


def _gpu_csv(spec: str):
    from profiler.measured import all_gpus
    name, sep, path = spec.partition("=")
    gpus = all_gpus()
    if not sep or name not in gpus:
        raise UserError(f"--ops: expected GPU=CSV with GPU one of {', '.join(sorted(gpus))}, got {spec!r}")
    if not Path(path).is_file():
        raise UserError(f"--ops: {path}: no such file")
    return gpus[name], Path(path)


def _with_a6000(cal, maveriq: Path | None):
    from profiler.maveriq_fit import DATA_NAME, fit_a6000, has_data
    if maveriq is None:
        shared = shared_data_dir()
        maveriq = shared / DATA_NAME if shared is not None else None
        if not has_data(maveriq):
            sys.stderr.write(f"calibrate-vidur: MaverIQ A6000 data not found ({maveriq or '<shared>/' + DATA_NAME}); "
                             "a6000 keeps the constants transferred from a40 (set --maveriq or "
                             "FLOWMAKER_SHARED_DATA)\n")
            return cal
    elif not has_data(maveriq):
        raise UserError(f"--maveriq: {maveriq} holds no MaverIQ A6000 mlp.csv / all_reduce.csv")
    return fit_a6000(maveriq, cal)


def _read(name_or_path: str | Path):
    """A measured table by name (results/profiles) or path; an empty one is an error (nothing to
    validate or fit)."""
    from profiler.catalog import profile_table_path
    from profiler.table import TableError, read_table
    path = profile_table_path(name_or_path)
    if not path.is_file():
        raise UserError(f"{path}: no such table")
    try:
        df = read_table(path)
    except TableError as exc:
        raise UserError(f"{path}: {exc}") from None
    if df.empty:
        raise UserError(f"{path}: the table has no rows")
    return df


def _validate(a: argparse.Namespace) -> None:
    from profiler.calibration import Calibration, load_calibration, load_default_calibration
    from profiler.measured import all_gpus, all_models
    from profiler.validate import errors, format_mape, mape, predict_like
    measured = _read(a.measured)
    if a.reference is not None:
        from profiler.table import KEY
        ref = _read(a.reference).merge(measured[KEY], on=KEY)  # the keys both tables hold
        if ref.empty:
            raise UserError(f"--reference: {a.reference} shares no key with {a.measured}")
        measured = measured.merge(ref[KEY], on=KEY)
        print(format_mape(mape(errors(ref, measured)), f"{a.measured} vs reference {a.reference} (MAPE %)"))
        return
    models, gpus = all_models(), all_gpus()
    vidur = default_calibration_path()
    before = load_calibration(vidur) if vidur.is_file() else Calibration()
    after = load_default_calibration() or Calibration()
    changed = any(after.gpus.get(g) != before.gpus.get(g) for g in set(measured.gpu))
    runs = [("uncalibrated (vidur constants or defaults)", before)]
    if changed:
        runs.append((f"calibrated ({measured_calibration_path().name} overlay)", after))
    if a.calibration is not None:
        runs.append((f"with {a.calibration}", analytic_model(a.calibration).calibration))
    for label, cal in runs:
        pred = predict_like(measured, models, gpus, cal, engine=a.engine)
        print(format_mape(mape(errors(measured, pred)), f"analytic {label}, {a.engine} memory, "
                          f"vs {a.measured} (MAPE %)"))
    if not changed:
        print(f"(no measured calibration for {', '.join(sorted(set(measured.gpu)))}: "
              "run python -m profiler calibrate --measured TABLE)")


def _calibrate_measured(a: argparse.Namespace) -> None:
    import datetime as dt
    import pandas as pd
    from profiler.calibration import Calibration, load_calibration
    from profiler.measured import all_gpus, all_models
    from profiler.validate import ERROR_METRICS, errors, fit_gpu, held_out_errors, predict_like
    check_out(a.out)
    measured = pd.concat([_read(p) for p in a.measured], ignore_index=True)
    models, gpus = all_models(), all_gpus()
    vidur = default_calibration_path()
    base = load_calibration(vidur) if vidur.is_file() else Calibration()
    prev = load_calibration(a.out) if a.out.is_file() else Calibration(source="measured profile tables")
    fitted, report = dict(prev.gpus), dict(prev.mape_pct)
    for gpu in sorted(set(measured.gpu)):
        rows = measured[measured.gpu == gpu]
        gc = fit_gpu(measured, gpu, models, gpus, base)
        fitted[gpu] = gc
        e0 = errors(rows, predict_like(rows, models, gpus, base))
        e1 = errors(rows, predict_like(rows, models, gpus, base.model_copy(update={"gpus": {**base.gpus, gpu: gc}})))
        # out of sample: each model predicted by constants fitted on the other models only
        e2 = held_out_errors(rows, gpu, models, gpus, base) if rows.model.nunique() > 1 else None
        report[gpu] = {m: {"before": round(float(e0[m].mean()), 2), "after": round(float(e1[m].mean()), 2),
                           "held_out": None if e2 is None else round(float(e2[m].mean()), 2),
                           "n": float(len(rows))} for m in ERROR_METRICS}
        print(f"{gpu}: " + ", ".join(f"{m} {report[gpu][m]['before']:.1f}% -> {report[gpu][m]['after']:.1f}%"
                                     for m in ERROR_METRICS) + f" MAPE over {len(rows)} rows")
        if e2 is not None:
            print(f"{gpu} leave-one-model-out: " + ", ".join(
                f"{m} {report[gpu][m]['held_out']:.1f}%" for m in ERROR_METRICS))
    files = sorted(set(prev.files) | {recorded_table_path(p) for p in a.measured})
    cal = Calibration(source="measured profile tables", files=files,
                      fit_date=dt.date.today().isoformat(), gpus=fitted, mape_pct=report,
                      notes="python -m profiler calibrate: time constants (incl. overlap, "
                            "spill_factor) by least squares on log(pred/measured) TTFT+TPOT, memory by linear least squares; starts "
                            "from vidur.yaml (or defaults). Overlays vidur.yaml per GPU.")
    save_calibration(cal, a.out, header=(
        "Analytic-model constants fitted on measured profile tables (python -m profiler calibrate).\n"
        "Loaded on top of vidur.yaml: a GPU listed here takes these constants.\n"
        "mape_pct: gpu -> metric -> MAPE (%) before (vidur/defaults) / after (fitted, in sample) /\n"
        "held_out (each model predicted by constants fitted on the other models), n rows."))
    print(f"wrote {a.out}")


def _calibrate_serving(a: argparse.Namespace) -> None:
    from profiler.calibration_serving import calibrate_serving
    try:
        cal = calibrate_serving(out=a.out)
    except FileNotFoundError as exc:
        raise UserError(f"shared data: {exc}") from None
    for src, metrics in cal.mape_pct.items():
        print(src, {m: (v["before"], v["after"]) for m, v in metrics.items()})
    print(cal.notes)


COMMANDS = {"calibrate-vidur": _calibrate_vidur, "calibrate-serving": _calibrate_serving,
            "validate": _validate, "calibrate": _calibrate_measured}
