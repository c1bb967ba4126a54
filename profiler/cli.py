"""Command line: `python -m profiler {predict,table,calibrate-vidur}`.

User errors (unknown model/GPU, bad numbers, missing data) print one line on stderr and
exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from profiler.analytic import AnalyticModel
from profiler.calibration import default_calibration_path, save_calibration
from profiler.catalog import CatalogError, load_deploy_configs, load_gpus, load_models, shared_data_dir

DEFAULT_BATCHES = [1, 2, 4, 8, 16, 32, 64]
DEFAULT_PROMPTS = [128, 512, 1024, 2048, 4096]
DEFAULT_OUTPUTS = [32, 128, 512]


class UsageError(Exception):
    pass


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m profiler", description="flowmaker analytic profiler")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    pr = sub.add_parser("predict", help="latency and memory of one deployment")
    pr.add_argument("--model", required=True)
    pr.add_argument("--gpu", required=True)
    for name in ("--tp", "--pp", "--batch"):
        pr.add_argument(name, type=_positive, default=1)
    pr.add_argument("--prompt-tokens", type=_positive, required=True)
    pr.add_argument("--output-tokens", type=_positive, required=True)
    pr.add_argument("--calibration", type=Path, help="calibration YAML (default configs/calibration/vidur.yaml)")
    pr.add_argument("--json", action="store_true")
    tb = sub.add_parser("table", help="write the analytic grid as parquet")
    tb.add_argument("--out", type=Path, required=True)
    tb.add_argument("--models", nargs="+")
    tb.add_argument("--gpus", nargs="+")
    tb.add_argument("--batches", nargs="+", type=_positive, default=DEFAULT_BATCHES)
    tb.add_argument("--prompt-tokens", nargs="+", type=_positive, default=DEFAULT_PROMPTS)
    tb.add_argument("--output-tokens", nargs="+", type=_positive, default=DEFAULT_OUTPUTS)
    cv = sub.add_parser("calibrate-vidur", help="fit configs/calibration/vidur.yaml on vidur's data")
    cv.add_argument("--data", type=Path, help="vidur data dir (default <shared>/vidur)")
    cv.add_argument("--out", type=Path, default=default_calibration_path())
    return p


def _pick(kind: str, names: list[str] | None, known: dict) -> list:
    for n in names or []:
        if n not in known:
            raise UsageError(f"--{kind}: unknown {kind.rstrip('s')} '{n}'; known: {', '.join(sorted(known))}")
    return [known[n] for n in (names or known)]


def _am(path: Path | None) -> AnalyticModel:
    if path is None:
        return AnalyticModel()
    from profiler.calibration import load_calibration
    return AnalyticModel(calibration=load_calibration(path))


def _predict(a: argparse.Namespace) -> None:
    model = _pick("model", [a.model], load_models())[0]
    gpu = _pick("gpu", [a.gpu], load_gpus())[0]
    am = _am(a.calibration)
    try:
        p = am.predict(model, gpu, tp=a.tp, pp=a.pp, batch=a.batch, prompt_tokens=a.prompt_tokens,
                       output_tokens=a.output_tokens)
    except ValueError as exc:
        raise UsageError(f"--tp/--pp: {exc}") from None
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


def _table(a: argparse.Namespace) -> None:
    from profiler.table import build_analytic_table, write_table
    models = _pick("models", a.models, load_models())
    gpus = _pick("gpus", a.gpus, load_gpus())
    if not a.out.parent.is_dir():
        raise UsageError(f"--out: folder {a.out.parent} does not exist")
    df = build_analytic_table(models, gpus, load_deploy_configs(), a.batches, a.prompt_tokens,
                              a.output_tokens)
    write_table(df, a.out)
    print(f"wrote {len(df)} rows to {a.out}")


def _calibrate(a: argparse.Namespace) -> None:
    from profiler.vidur_fit import fit_vidur, format_mape
    data = a.data
    if data is None:
        shared = shared_data_dir()
        if shared is None or not (shared / "vidur").is_dir():
            raise UsageError("--data: vidur data not found (set --data or FLOWMAKER_SHARED_DATA)")
        data = shared / "vidur"
    if not (data / "data" / "profiling").is_dir():
        raise UsageError(f"--data: {data} has no data/profiling folder")
    cal = fit_vidur(data)
    save_calibration(cal, a.out, header=(
        "Analytic-model calibration fitted on vidur's operator measurements\n"
        "(github.com/microsoft/vidur, MIT). Regenerate: python -m profiler calibrate-vidur\n"
        "mape_pct: gpu -> operator class -> MAPE (%) before (defaults) / after (fitted), n rows.\n"
        "Method and caveats: docs/profiler.md"))
    print(format_mape(cal.mape_pct))
    print(f"wrote {a.out}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        {"predict": _predict, "table": _table, "calibrate-vidur": _calibrate}[args.cmd](args)
    except (UsageError, CatalogError) as exc:
        sys.stderr.write(f"python -m profiler {args.cmd}: error: {exc}\n")
        return 2
    return 0
