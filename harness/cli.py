"""``python -m harness`` (console script ``flowmaker-harness``): what-if simulation, and real
servers, from the shell.

    python -m harness simulate ...        what-if: one deployment on one trace, simulated
    python -m harness export PLAN.json    a plan's servers as a launch script, compose file or manifests
    python -m harness launch PLAN.json    one server per planned instance; prints the endpoints
    python -m harness replay ...          the what-if's trace replayed on live endpoints (same JSON)

User errors (a bad option, an unknown model, a malformed trace line) print one line on
standard error and exit with status 2; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from flowmaker.entry import UserError, command_name, doc

#: engine-config field -> its flag (profiler.engine.EngineConfig; defaults live there)
ENGINE_FLAGS = {"scheduler": "--scheduler", "max_num_seqs": "--max-batch", "max_num_batched_tokens": "--max-batch-tokens",
                "chunk_size": "--chunk-size", "gpu_memory_utilization": "--gpu-mem-util",
                "kv_capacity_tokens": "--kv-tokens", "block_size": "--block-size", "watermark": "--watermark",
                "long_prefill_token_threshold": "--long-prefill-threshold", "async_scheduling": "--async-scheduling"}
OPTION = {"time_scale": "--time-scale", "max_requests": "--max-requests", "rate_rps": "--rate",
          "concurrency": "--concurrency", **ENGINE_FLAGS}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise UserError(message)

    def exit(self, status: int = 0, message: str | None = None):  # --help / --version only
        if message:
            sys.stderr.write(message)
        raise SystemExit(status)


def _option(field: str) -> str:
    return OPTION.get(field, "--" + field.replace("_", "-"))


def resolve_trace_path(text: str) -> Path:
    """A file path, or ``azure:code`` / ``azure:conv`` for the shared Azure 2023 traces."""
    from harness.trace import azure_trace_path
    from profiler.catalog import shared_data_hint
    if text.startswith("azure:"):
        try:
            path = azure_trace_path(text.split(":", 1)[1])
        except KeyError as exc:
            raise UserError(f"--trace: {exc.args[0]}") from None
        if not path.exists():
            raise UserError(f"--trace: {path} not found ({shared_data_hint()})")
        return path
    return Path(text)


def _simulate(args: argparse.Namespace) -> int:
    from harness.load import overload_warning
    from harness.simulate import OptionError, SimulateConfig, simulate
    from profiler.steps import UnknownName
    from harness.trace import TraceError, load_trace

    engine = {k: getattr(args, k) for k in ENGINE_FLAGS if getattr(args, k) is not None}
    fields = {k: getattr(args, k) for k in SimulateConfig.model_fields if k != "engine"}
    try:
        cfg = SimulateConfig(**fields, engine=engine)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(x) for x in err["loc"] if x != "engine"]
        msg = err["msg"].removeprefix("Value error, ")
        if not loc and ": " in msg:       # a cross-field rule of the engine config names its field
            head, msg = msg.split(": ", 1)
            loc = [head]
        got = f" (got {err.get('input')!r})" if loc and not isinstance(err.get("input"), dict) else ""
        raise UserError(f"{_option(loc[0] if loc else 'engine')}: {msg}{got}") from None
    try:
        trace = load_trace(resolve_trace_path(args.trace))
        result = simulate(trace, cfg)
    except TraceError as exc:
        raise UserError(f"--trace: {exc}") from None
    except OverflowError as exc:            # a token count or arrival time too large to simulate
        raise UserError(f"--trace: {args.trace}: a number too large to simulate ({exc})") from None
    except UnknownName as exc:
        raise UserError(f"{'--model' if 'model' in str(exc) else '--gpu'}: {exc}") from None
    except OptionError as exc:
        raise UserError(f"{_option(exc.option)}: {str(exc).split(': ', 1)[1]}") from None
    s = result.summary
    warning = overload_warning(s)
    if warning:
        print(warning, file=sys.stderr)
    print(json.dumps(s, indent=1) if args.json else format_summary(s))
    return 0


def format_summary(s: dict) -> str:
    from harness.metrics import fmt
    mode = " (async scheduling)" if s.get("async_scheduling") else ""
    head = (f"{s['model']} on {s['replicas']}x {s['gpu']} tp{s['tp']} pp{s['pp']}, {s['scheduler']}{mode}, "
            f"trace {s['trace']}")
    served = f", served {fmt(s['served_rps'])} req/s" if s.get("served_rps") is not None else ""
    load = f", {s['load']}" if s.get("load") else ""
    lines = [head + load + served,
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


def build_parser(*, servers: bool = True) -> argparse.ArgumentParser:
    """The command line; ``servers`` off: ``simulate`` only (it then imports nothing of the servers)."""
    from profiler.engine import SCHEDULERS, EngineConfig
    from flowmaker.entry import add_version
    ap = _Parser(prog=command_name("harness"), description="Simulate LLM serving deployments on request traces "
                 f"({doc('harness.md')}; output columns: {doc('metrics.md')})")
    add_version(ap)
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="COMMAND")
    sp = sub.add_parser("simulate", help="what-if: one deployment (R replicas) on one trace")
    sp.add_argument("--model", required=True, help="catalog model, e.g. llama-2-70b")
    sp.add_argument("--gpu", required=True, help="catalog GPU, e.g. a100-80gb")
    sp.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs per replica (default 1)")
    sp.add_argument("--pp", type=int, default=1, help="pipeline-parallel stages per replica (default 1)")
    sp.add_argument("--trace", required=True,
                    help="CSV (arrived_at_s,prompt_tokens,output_tokens | Azure 2023 | vidur processed), "
                         "or azure:code / azure:conv")
    d = EngineConfig()
    sp.add_argument("--scheduler", choices=SCHEDULERS, default=None,
                    help=f"admission policy (default {d.scheduler}; docs/harness.md)")
    sp.add_argument("--max-batch", dest="max_num_seqs", type=int, default=None,
                    help=f"sequences per iteration, vLLM max_num_seqs (default {d.max_num_seqs})")
    sp.add_argument("--max-batch-tokens", dest="max_num_batched_tokens", type=int, default=None,
                    help=f"tokens per step (vllm-v1; prefill tokens per pass for vllm/padded), vLLM "
                         f"max_num_batched_tokens (default {d.max_num_batched_tokens})")
    sp.add_argument("--long-prefill-threshold", dest="long_prefill_token_threshold", type=int, default=None,
                    help="vllm-v1: most prompt tokens a request prefills per step, vLLM "
                         f"long_prefill_token_threshold (default {d.long_prefill_token_threshold}: no cap)")
    sp.add_argument("--chunk-size", type=int, default=None, help=f"sarathi token budget (default {d.chunk_size})")
    sp.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                    help="vLLM async scheduling: the CPU step time overlaps the forward (vLLM's default from "
                         "0.14; default off: vLLM 0.10-0.13)")
    sp.add_argument("--time-scale", type=float, default=1.0, help="stretch inter-arrival times by X")
    sp.add_argument("--max-requests", type=int, default=None,
                    help="replay only the first N requests (with --concurrency: the request count)")
    sp.add_argument("--rate", dest="rate_rps", type=float, default=None,
                    help="Poisson arrivals at R requests/s instead of the trace's times (the trace's requests "
                         "in order)")
    sp.add_argument("--concurrency", type=int, default=None,
                    help="closed loop: N clients, each sending the trace's next request when its last returns")
    sp.add_argument("--seed", type=int, default=0, help="seed of the --rate arrivals (default 0)")
    sp.add_argument("--replicas", type=int, default=1, help="identical replicas behind the router (default 1)")
    sp.add_argument("--router", choices=("round-robin", "least-outstanding"), default="least-outstanding",
                    help="how requests are spread over replicas (default least-outstanding)")
    sp.add_argument("--gpu-mem-util", dest="gpu_memory_utilization", type=float, default=None,
                    help=f"usable share of each GPU's memory (default {d.gpu_memory_utilization})")
    sp.add_argument("--kv-tokens", dest="kv_capacity_tokens", type=int, default=None,
                    help="override the derived KV capacity per replica (tokens)")
    sp.add_argument("--block-size", type=int, default=None, help=f"KV block size in tokens (default {d.block_size})")
    sp.add_argument("--watermark", type=float, default=None,
                    help=f"share of KV blocks kept free at admission (default {d.watermark})")
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")
    sp.set_defaults(func=_simulate)
    if servers:
        from harness.servecli import add_export, add_launch, add_replay
        add_export(sub)
        add_launch(sub)
        add_replay(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one command; user errors are one line on standard error and status 2."""
    from flowmaker.entry import one_line, setup_logging
    from flowmaker.inputs import InputError
    from profiler.catalog import CatalogError
    setup_logging()
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(servers=argv[:1] != ["simulate"]).parse_args(argv)
        return args.func(args)
    except (UserError, InputError, CatalogError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2


def console():
    """The ``flowmaker-harness`` console script and ``python -m harness``."""
    from flowmaker.entry import run
    run(main)
