"""Command line: `python -m profiler {predict,table,calibrate-vidur,calibrate-serving,run,validate,
calibrate,convert,memory,device-plan}` (console script ``flowmaker-profiler``).

Profile configs (``run``) and measured tables (``--measured``, ``--reference``) may be given by
name (``configs/profile/NAME.yaml``, ``results/profiles/NAME.parquet``) or by path.

User errors (unknown model/GPU, bad numbers, missing data) print one line on stderr and
exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flowmaker.entry import OneLineParser as _Parser  # one-line usage errors, exit 2
from flowmaker.entry import UserError, command_name, doc
from profiler.analytic import AnalyticModel
from profiler.calibration import default_calibration_path, measured_calibration_path, save_calibration
from profiler.catalog import (CatalogError, load_deploy_configs, load_gpus, load_models, recorded_table_path,
                              shared_data_dir, shared_data_hint)
from profiler.engine import DEFAULT
from profiler.memory import TRTLLM_FREE_GPU_MEMORY_FRACTION

DEFAULT_BATCHES = [1, 2, 4, 8, 16, 32, 64]
DEFAULT_PROMPTS = [128, 512, 1024, 2048, 4096]
DEFAULT_OUTPUTS = [32, 128, 512]


try:  # the trtllm backend's "not installed" error, without importing the backend's library
    from profiler.trtllm_backend import BackendUnavailable as BackendMissing
except ImportError:  # pragma: no cover
    BackendMissing = RuntimeError  # type: ignore[misc, assignment]


#: the largest count an option takes: tokens, sequences and GPUs beyond it describe no real engine
#: (a batch of 1e12 sequences would print a KV cache of 1e9 GB)
MAX_COUNT = 2**31 - 1


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    if v > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, got {text[:40]}")
    return v


def _seqs(text: str) -> int:
    v = _positive(text)
    if v > 2**20:
        raise argparse.ArgumentTypeError(f"must be at most {2**20} sequences, got {v}")
    return v


_DEPLOY_HELP = {"--tp": "tensor-parallel GPUs (default 1)", "--pp": "pipeline-parallel stages (default 1)",
                "--batch": "sequences decoded together (default 1)"}


def _parser() -> argparse.ArgumentParser:
    from flowmaker.entry import add_version
    p = _Parser(prog=command_name("profiler"), description="flowmaker profiler: analytic predictions, measured "
                f"tables, calibration ({doc('profiler.md')}, {doc('profiler_measured.md')})")
    add_version(p)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="COMMAND")
    pr = sub.add_parser("predict", help="latency and memory of one deployment")
    pr.add_argument("--model", required=True, help="catalog model (configs/models.yaml), e.g. llama-2-7b")
    pr.add_argument("--gpu", required=True, help="catalog GPU (configs/gpus.yaml), e.g. a6000")
    for name in ("--tp", "--pp", "--batch"):
        pr.add_argument(name, type=_positive, default=1, help=_DEPLOY_HELP[name])
    pr.add_argument("--prompt-tokens", type=_positive, required=True, help="prompt length per sequence (tokens)")
    pr.add_argument("--output-tokens", type=_positive, required=True, help="generated tokens per sequence")
    pr.add_argument("--calibration", help="calibration name in configs/calibration or a YAML file "
                    "(default vidur)")
    pr.add_argument("--engine", choices=["vllm", "trtllm"], default="vllm",
                    help="whose weight layout the memory takes (trtllm: embedding on every TP rank)")
    pr.add_argument("--json", action="store_true", help="print the prediction as JSON (seconds, GB)")
    tb = sub.add_parser("table", help="write the analytic grid as parquet")
    tb.add_argument("--out", type=Path, required=True, help="parquet file to write (its folder must exist)")
    tb.add_argument("--models", nargs="+", help="catalog models (default all)")
    tb.add_argument("--gpus", nargs="+", help="catalog GPUs (default all)")
    tb.add_argument("--batches", nargs="+", type=_positive, default=DEFAULT_BATCHES, help="batch sizes of the grid")
    tb.add_argument("--prompt-tokens", nargs="+", type=_positive, default=DEFAULT_PROMPTS,
                    help="prompt lengths of the grid (tokens)")
    tb.add_argument("--output-tokens", nargs="+", type=_positive, default=DEFAULT_OUTPUTS,
                    help="output lengths of the grid (tokens)")
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
    rn = sub.add_parser("run", help="measure a profile config (configs/profile/NAME.yaml); resumable")
    rn.add_argument("config", help="profile config name in configs/profile or a YAML file")
    rn.add_argument("--out", type=Path, help="table path (default: the config's out)")
    rn.add_argument("--max-points", type=_positive, help="stop after this many new points")
    rn.add_argument("--no-progress", action="store_true", help="no progress bar (none is drawn off a terminal)")
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
    co = sub.add_parser("convert", help="table rows as JSON lines (GPU check output) -> parquet")
    co.add_argument("rows", type=Path, help="JSON lines, one table row each")
    co.add_argument("--out", type=Path, required=True, help="parquet file to write")
    me = sub.add_parser("memory", help="how vLLM / TensorRT-LLM split an instance's memory (KV cache)")
    me.add_argument("--model", required=True, help="catalog model, e.g. llama-2-7b")
    me.add_argument("--gpu", required=True, help="catalog GPU, e.g. a6000")
    for name in ("--tp", "--pp"):
        me.add_argument(name, type=_positive, default=1, help=_DEPLOY_HELP[name])
    me.add_argument("--engine", choices=["vllm", "trtllm"], default="vllm", help="whose memory rules (default vllm)")
    me.add_argument("--max-num-batched-tokens", type=_positive, default=DEFAULT.max_num_batched_tokens,
                    help="vLLM max_num_batched_tokens / TensorRT-LLM max_num_tokens "
                         f"(default {DEFAULT.max_num_batched_tokens}, profiler.engine.EngineConfig)")
    me.add_argument("--max-num-seqs", type=_seqs, default=DEFAULT.max_num_seqs,
                    help=f"vLLM max_num_seqs / TensorRT-LLM max_batch_size (default {DEFAULT.max_num_seqs})")
    me.add_argument("--fraction", type=float, default=None, help="vLLM gpu_memory_utilization (default "
                    f"{DEFAULT.gpu_memory_utilization}) / TensorRT-LLM kv_cache free_gpu_memory_fraction "
                    f"(default {TRTLLM_FREE_GPU_MEMORY_FRACTION})")
    me.add_argument("--json", action="store_true", help="print the split as JSON (GB)")
    dp = sub.add_parser("device-plan", help="write the GPU check's plan (archs, grid, predictions)")
    dp.add_argument("--out", type=Path, help="default experiments/scripts/device_check_plan.json")
    return p


def _pick(kind: str, names: list[str] | None, known: dict) -> list:
    for n in names or []:
        if n not in known:
            raise UserError(f"--{kind}: unknown {kind.rstrip('s')} '{n}'; known: {', '.join(sorted(known))}")
    return [known[n] for n in (names or known)]


def _am(path: str | None) -> AnalyticModel:
    if path is None:
        return AnalyticModel()
    from profiler.calibration import load_calibration
    from profiler.catalog import config_path
    return AnalyticModel(calibration=load_calibration(config_path(path, "calibration", "calibration")))


def _predict(a: argparse.Namespace) -> None:
    model = _pick("model", [a.model], load_models())[0]
    gpu = _pick("gpu", [a.gpu], load_gpus())[0]
    am = _am(a.calibration)
    try:
        p = am.predict(model, gpu, tp=a.tp, pp=a.pp, batch=a.batch, prompt_tokens=a.prompt_tokens,
                       output_tokens=a.output_tokens, engine=a.engine)
    except ValueError as exc:
        raise UserError(f"--tp/--pp: {exc}") from None
    out = {k: round(v, 6) for k, v in vars(p).items()}
    if a.json:
        print(json.dumps(out))
        return
    cap = gpu.mem_gb * a.tp * a.pp
    print(f"{model.name} on {a.tp}x{a.pp} (tp x pp) {gpu.name}, batch {a.batch}, "
          f"{a.prompt_tokens} prompt + {a.output_tokens} output tokens "
          f"[calibration: {am.calibration.for_gpu(gpu.name).source}]")
    for k, v in out.items():
        print(f"  {k:<14}{v:>12.4f}")
    print(f"  fits: {'yes' if p.mem_gb <= cap else 'NO'} ({p.mem_gb:.1f} of {cap:.0f} GB)")


def _check_out(path: Path) -> None:
    if not path.parent.is_dir():
        raise UserError(f"--out: folder {path.parent} does not exist")


def _table(a: argparse.Namespace) -> None:
    from profiler.table import build_analytic_table, write_table
    models = _pick("models", a.models, load_models())
    gpus = _pick("gpus", a.gpus, load_gpus())
    if not a.out.parent.is_dir():
        raise UserError(f"--out: folder {a.out.parent} does not exist")
    df = build_analytic_table(models, gpus, load_deploy_configs(), a.batches, a.prompt_tokens,
                              a.output_tokens)
    write_table(df, a.out)
    print(f"wrote {len(df)} rows to {a.out}")


def _calibrate(a: argparse.Namespace) -> None:
    from profiler.vidur_fit import fit_ops_file, fit_vidur, format_mape
    ops = [_gpu_csv(spec) for spec in a.ops]  # check the arguments before the ~3 s fit
    _check_out(a.out)
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


def _run(a: argparse.Namespace) -> None:
    from profiler.measured import load_profile_config, run_profile
    cfg = load_profile_config(a.config)
    from flowmaker.entry import show_progress
    s = run_profile(cfg, out=a.out, max_points=a.max_points, progress=show_progress(a.no_progress))
    state = "complete" if s.complete else "partial (run again to resume)"
    print(f"{cfg.name}: measured {s.measured} points, {s.skipped} already done; "
          f"wrote {s.rows} rows to {s.table} [{state}]")


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
        runs.append((f"with {a.calibration}", _am(a.calibration).calibration))
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
    _check_out(a.out)
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


def _convert(a: argparse.Namespace) -> None:
    import json
    from profiler.measured import rows_to_table
    from profiler.table import TableError, write_table
    from flowmaker.inputs import read_text
    if not a.rows.is_file():
        raise UserError(f"{a.rows}: no such file")
    if not a.out.parent.is_dir():
        raise UserError(f"--out: folder {a.out.parent} does not exist")
    rows = []
    for i, line in enumerate(read_text(a.rows).splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except (ValueError, RecursionError) as exc:
                raise UserError(f"{a.rows}: line {i}: not JSON ({type(exc).__name__}: {exc})") from None
    if not rows:
        raise UserError(f"{a.rows}: no rows")
    try:
        df = rows_to_table(rows)
        write_table(df, a.out)
    except (TableError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{a.rows}: not table rows ({type(exc).__name__}: {exc})") from None
    print(f"wrote {len(df)} rows to {a.out}")


def _memory(a: argparse.Namespace) -> None:
    from profiler.memory import plan_memory
    model = _pick("model", [a.model], load_models())[0]
    gpu = _pick("gpu", [a.gpu], load_gpus())[0]
    if a.fraction is not None and not 0 < a.fraction <= 1:
        raise UserError(f"--fraction: must be in (0, 1], got {a.fraction}")
    try:
        sm = AnalyticModel().step_model(model, gpu, a.tp, a.pp)
    except ValueError as exc:
        raise UserError(f"--tp/--pp: {exc}") from None
    plan = plan_memory(sm, a.engine, gpu_capacity_gb=gpu.capacity_gb,
                       max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
                       **({} if a.fraction is None else
                          {"gpu_memory_utilization": a.fraction, "free_gpu_memory_fraction": a.fraction}))
    out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in vars(plan).items()}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{model.name} on {a.tp}x{a.pp} (tp x pp) {gpu.name} ({gpu.capacity_gb:.1f} GB each), "
          f"{a.engine}: GB over all GPUs")
    for k, v in out.items():
        print(f"  {k:<14}{v:>12}")


def _device_plan(a: argparse.Namespace) -> None:
    from profiler.device_plan import PLAN_PATH, write_plan
    path = a.out or PLAN_PATH
    plan = write_plan(path)
    print(f"wrote {path} ({sum(len(m['predictions']) for m in plan['modes'].values())} predictions)")


def _calibrate_serving(a: argparse.Namespace) -> None:
    from profiler.calibration_serving import calibrate_serving
    try:
        cal = calibrate_serving(out=a.out)
    except FileNotFoundError as exc:
        raise UserError(f"shared data: {exc}") from None
    for src, metrics in cal.mape_pct.items():
        print(src, {m: (v["before"], v["after"]) for m, v in metrics.items()})
    print(cal.notes)


COMMANDS = {"predict": _predict, "table": _table, "calibrate-vidur": _calibrate,
            "calibrate-serving": _calibrate_serving, "run": _run,
            "validate": _validate, "calibrate": _calibrate_measured, "convert": _convert,
            "memory": _memory, "device-plan": _device_plan}


def main(argv: list[str] | None = None) -> int:
    """Run one command; user errors are one line on standard error and status 2."""
    from flowmaker.entry import one_line, setup_logging
    from flowmaker.inputs import InputError
    from profiler.table import TableError
    setup_logging()
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.cmd](args)
    except BackendMissing as exc:
        sys.stderr.write(f"python -m profiler {args.cmd}: {one_line(exc)}\n")
        return 2
    except (UserError, CatalogError, InputError, TableError) as exc:
        sys.stderr.write(f"python -m profiler {args.cmd}: error: {one_line(exc)}\n")
        return 2
    return 0


def console():
    """The ``flowmaker-profiler`` console script and ``python -m profiler``."""
    from flowmaker.entry import run
    run(main)
