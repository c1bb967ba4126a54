"""``python -m harness``: what-if simulation from the shell.

User errors (a bad option, an unknown model, a malformed trace line) print one line on
standard error and exit with status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

OPTION = {"max_batch": "--max-batch", "max_batch_tokens": "--max-batch-tokens", "chunk_size": "--chunk-size",
          "time_scale": "--time-scale", "max_requests": "--max-requests", "gpu_mem_util": "--gpu-mem-util",
          "kv_tokens": "--kv-tokens", "block_size": "--block-size"}


class UserError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise UserError(message)


def _option(field: str) -> str:
    return OPTION.get(field, "--" + field.replace("_", "-"))


def resolve_trace_path(text: str) -> Path:
    """A file path, or ``azure:code`` / ``azure:conv`` for the shared Azure 2023 traces."""
    from harness.trace import azure_trace_path
    if text.startswith("azure:"):
        try:
            path = azure_trace_path(text.split(":", 1)[1])
        except KeyError as exc:
            raise UserError(f"--trace: {exc.args[0]}") from None
        if not path.exists():
            raise UserError(f"--trace: {path} not found (set FLOWMAKER_SHARED_DATA to the shared data folder)")
        return path
    return Path(text)


def _simulate(args: argparse.Namespace) -> int:
    from harness.simulate import OptionError, SimulateConfig, simulate
    from harness.steps import UnknownName
    from harness.trace import TraceError, load_trace

    fields = {k: getattr(args, k) for k in SimulateConfig.model_fields}
    try:
        cfg = SimulateConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserError(f"{_option(str(err['loc'][0]))}: {err['msg']} (got {err.get('input')!r})") from None
    try:
        trace = load_trace(resolve_trace_path(args.trace))
        result = simulate(trace, cfg)
    except TraceError as exc:
        raise UserError(f"--trace: {exc}") from None
    except UnknownName as exc:
        raise UserError(f"{'--model' if 'model' in str(exc) else '--gpu'}: {exc}") from None
    except OptionError as exc:
        raise UserError(f"{_option(exc.option)}: {str(exc).split(': ', 1)[1]}") from None
    s = result.summary
    print(json.dumps(s, indent=1) if args.json else format_summary(s))
    return 0


def format_summary(s: dict) -> str:
    from harness.metrics import fmt
    head = (f"{s['model']} on {s['replicas']}x {s['gpu']} tp{s['tp']} pp{s['pp']}, {s['scheduler']}, "
            f"trace {s['trace']}")
    lines = [head,
             f"  requests {s['requests']} (completed {s['completed']}, failed {s['failed']}), "
             f"simulated {fmt(s['simulated_s'])} s in {s['wall_s']:.2f} s wall "
             f"({fmt(s['requests_per_wall_s'])} req/s)",
             f"  KV capacity {s['kv_capacity_tokens']} tokens per replica, preemptions {s['preemptions']}, "
             f"iterations {s['iterations']}",
             f"  {'metric':<8}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}"]
    for k in ("e2e_s", "ttft_s", "tpot_s", "queue_s"):
        v = s[k]
        lines.append(f"  {k:<8}" + "".join(f"{fmt(v[q]):>12}" for q in ("mean", "p50", "p90", "p99")))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m harness", description="Simulate LLM serving deployments on request traces")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    sp = sub.add_parser("simulate", help="what-if: one deployment (R replicas) on one trace")
    sp.add_argument("--model", required=True, help="catalog model, e.g. llama-2-70b")
    sp.add_argument("--gpu", required=True, help="catalog GPU, e.g. a100-80gb")
    sp.add_argument("--tp", type=int, default=1)
    sp.add_argument("--pp", type=int, default=1)
    sp.add_argument("--trace", required=True,
                    help="CSV (arrived_at_s,prompt_tokens,output_tokens | Azure 2023 | vidur processed), "
                         "or azure:code / azure:conv")
    sp.add_argument("--scheduler", choices=("vllm", "sarathi"), default="vllm")
    sp.add_argument("--max-batch", type=int, default=128, help="sequences per iteration (default 128)")
    sp.add_argument("--max-batch-tokens", type=int, default=4096, help="tokens per iteration (default 4096)")
    sp.add_argument("--chunk-size", type=int, default=512, help="sarathi token budget (default 512)")
    sp.add_argument("--time-scale", type=float, default=1.0, help="stretch inter-arrival times by X")
    sp.add_argument("--max-requests", type=int, default=None, help="replay only the first N requests")
    sp.add_argument("--replicas", type=int, default=1)
    sp.add_argument("--router", choices=("round-robin", "least-outstanding"), default="least-outstanding")
    sp.add_argument("--gpu-mem-util", type=float, default=0.9, help="usable share of GPU memory (default 0.9)")
    sp.add_argument("--kv-tokens", type=int, default=None, help="override the derived KV capacity per replica")
    sp.add_argument("--block-size", type=int, default=16, help="KV block size in tokens (default 16)")
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")
    sp.set_defaults(func=_simulate)
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
