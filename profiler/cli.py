"""Command line: `python -m profiler {predict,table,calibrate-vidur,calibrate-serving,validate,
calibrate,run,convert,memory,device-plan}` (console script ``flowmaker-profiler``); the commands
that fit and score the analytic model (calibrate-*, calibrate, validate) are ``profiler.cli_fit``'s.

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
from profiler.catalog import CatalogError, load_deploy_configs, load_gpus, load_models
from profiler.cli_fit import COMMANDS as FIT_COMMANDS
from profiler.cli_fit import add_parsers as add_fit_parsers
from profiler.cli_fit import analytic_model, check_out
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
    add_fit_parsers(sub)
    rn = sub.add_parser("run", help="measure a profile config (configs/profile/NAME.yaml); resumable")
    rn.add_argument("config", help="profile config name in configs/profile or a YAML file")
    rn.add_argument("--out", type=Path, help="table path (default: the config's out)")
    rn.add_argument("--max-points", type=_positive, help="stop after this many new points")
    rn.add_argument("--no-progress", action="store_true", help="no progress bar (none is drawn off a terminal)")
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


def _predict(a: argparse.Namespace) -> None:
    model = _pick("model", [a.model], load_models())[0]
    gpu = _pick("gpu", [a.gpu], load_gpus())[0]
    am = analytic_model(a.calibration)
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


def _table(a: argparse.Namespace) -> None:
    from profiler.table import build_analytic_table, write_table
    models = _pick("models", a.models, load_models())
    gpus = _pick("gpus", a.gpus, load_gpus())
    check_out(a.out)
    df = build_analytic_table(models, gpus, load_deploy_configs(), a.batches, a.prompt_tokens,
                              a.output_tokens)
    write_table(df, a.out)
    print(f"wrote {len(df)} rows to {a.out}")


def _run(a: argparse.Namespace) -> None:
    from profiler.measured import load_profile_config, run_profile
    cfg = load_profile_config(a.config)
    from flowmaker.entry import show_progress
    s = run_profile(cfg, out=a.out, max_points=a.max_points, progress=show_progress(a.no_progress))
    state = "complete" if s.complete else "partial (run again to resume)"
    print(f"{cfg.name}: measured {s.measured} points, {s.skipped} already done; "
          f"wrote {s.rows} rows to {s.table} [{state}]")


def _convert(a: argparse.Namespace) -> None:
    from profiler.measured import rows_to_table
    from profiler.table import TableError, write_table
    from flowmaker.inputs import read_text
    if not a.rows.is_file():
        raise UserError(f"{a.rows}: no such file")
    check_out(a.out)
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


COMMANDS = {"predict": _predict, "table": _table, "run": _run, "convert": _convert, "memory": _memory,
            "device-plan": _device_plan, **FIT_COMMANDS}


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
