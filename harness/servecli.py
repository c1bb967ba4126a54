"""``python -m harness export``, ``launch`` and ``replay``: a plan's servers as files or processes,
and the what-if replay on live endpoints (the subcommands of ``harness.cli``).

    python -m harness export PLAN.json --format sh|compose|k8s --gpu a6000 [--backend B]
        [--model-path MODEL=DIR ...] [--base-port 8100] [--dtype auto] [--image I] [--namespace N] [--out F]

    python -m harness launch PLAN.json --backend vllm --gpu a6000 [--model-path MODEL=DIR ...]
        [--stand-in DIR] [--base-port 8100] [--args 'ID=--flag value' ...] [engine flags]
        [--host 127.0.0.1] [--api-key-env VAR | --allow-unauthenticated-remote]
        [--endpoints-out FILE] [--dry-run] [--check]
    python -m harness replay --endpoints URL[,URL...] | --endpoints-file FILE --trace T
        [--backend B] [--tokenizer DIR] [--chat] [--api-key-env VAR] [--max-concurrency N]
        [--timeout S] [--time-scale X] [--max-requests N] [--json]

``launch`` starts one server per instance of the plan (``python -m selector solve --json``,
``deploy --json``), each with its TP/PP, GPUs, engine flags and planned memory share, waits until
all are healthy, prints ``{instance id: URL}`` (one JSON line) and keeps them up until Ctrl-C
or SIGTERM (``--check``: stop at once; ``--dry-run``: print the command lines only). A ``--host``
other than loopback needs ``--api-key-env`` or ``--allow-unauthenticated-remote`` (exit 2 otherwise). ``replay``
sends each trace row as one streamed call to the endpoints (replicas, least outstanding calls)
and prints the same summary as ``simulate`` (``queue_s`` is not observable on a server: null).
"""
from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from flowmaker.entry import UserError, command_name

ENGINE_DESTS = ("scheduler", "max_num_seqs", "max_num_batched_tokens", "chunk_size", "gpu_memory_utilization",
                "kv_capacity_tokens", "block_size", "prefix_caching")


def _user_error(msg: str) -> UserError:
    return UserError(msg)


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for v in values or ():
        key, sep, val = v.partition("=")
        if not sep or not key:
            raise _user_error(f"{flag}: expected KEY=VALUE, got {v!r}")
        out[key] = val
    return out


def _engine(args: argparse.Namespace):
    from profiler.engine import EngineConfig
    given = {k: getattr(args, k) for k in ENGINE_DESTS if getattr(args, k, None) is not None}
    if not given:
        return None
    try:
        return EngineConfig(**given)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "engine"
        raise _user_error(f"engine setting {loc}: {err['msg'].removeprefix('Value error, ')}") from None


def _specs(args: argparse.Namespace):
    from harness.servers.deploy import instance_gpu, specs_for_instances
    from harness.servers.export import load_deployments
    from harness.servers.export_rules import apply_rules
    from profiler.steps import UnknownName
    try:
        deps = load_deployments(args.plan, skip_infeasible=args.skip_infeasible)
    except ValueError as exc:
        raise _user_error(f"{args.plan}: {exc}") from None
    instances = [i for d in deps for i in d.instances]
    if not instances:
        raise _user_error(f"{args.plan}: the plan deploys no instance")
    if args.backend in ("vllm", "trtllm") and args.gpu is None and args.stand_in is None and \
            any(i.gpus for i in instances):
        raise _user_error("--gpu: name the catalog GPU the plan is for (e.g. a6000), so each instance gets "
                          "its planned share of GPU memory")
    iargs = _instance_args(args)
    try:
        specs = specs_for_instances(instances, model_paths=_pairs(args.model_path, "--model-path"),
                                   stand_in=args.stand_in, backend=args.backend, base_port=args.base_port,
                                   engine=_engine(args), gpu=None if args.stand_in else args.gpu,
                                   instance_args=iargs, dtype=args.dtype, host=args.host,
                                   startup_timeout_s=args.startup_timeout, api_key_env=args.api_key_env,
                                   env=_pairs(args.env, "--env"))
        if args.stand_in is None:
            types = {i.id: g for i in instances if (g := instance_gpu(i, args.gpu)) is not None}
            specs = apply_rules(specs, instances, deps, types)
        return specs
    except UnknownName as exc:
        raise _user_error(f"{'--gpu' if 'GPU' in str(exc) else args.plan}: {exc}") from None
    except (KeyError, ValueError) as exc:
        raise _user_error(str(exc.args[0]) if exc.args else str(exc)) from None


def _instance_args(args: argparse.Namespace) -> dict[str, list[str]]:
    try:
        return {k: shlex.split(v) for k, v in _pairs(args.args, "--args").items()}
    except ValueError as exc:       # an unclosed quote
        raise _user_error(f"--args: {exc}") from None


def _export(args: argparse.Namespace) -> int:
    """The plan's servers as a launch script, a docker-compose file or Kubernetes manifests
    (``harness.servers.export``)."""
    from harness.servers.export import export_plan
    from profiler.steps import UnknownName
    if args.out is not None and not args.out.parent.is_dir():
        raise _user_error(f"--out: folder {args.out.parent} does not exist")
    try:
        text = export_plan(args.plan, args.format, backend=args.backend, gpu=args.gpu,
                           model_paths=_pairs(args.model_path, "--model-path"), base_port=args.base_port,
                           image=args.image, namespace=args.namespace, dtype=args.dtype, engine=_engine(args),
                           instance_args=_instance_args(args), skip_infeasible=args.skip_infeasible)
    except UnknownName as exc:
        raise _user_error(f"--gpu: {exc}") from None
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        msg = str(exc.args[0] if exc.args else exc)
        raise _user_error(msg if msg.startswith(str(args.plan)) else f"{args.plan}: {msg}") from None
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    import ipaddress
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_exposure(args: argparse.Namespace) -> None:
    """Servers reachable from other machines need a key, or the user's word that they need none."""
    if is_loopback(args.host) or args.api_key_env or args.allow_unauthenticated_remote:
        return
    raise _user_error(f"--host {args.host}: servers reachable from other machines need --api-key-env VAR "
                      "(or --allow-unauthenticated-remote)")


def _launch(args: argparse.Namespace) -> int:
    from harness.servers.export import comment_line
    from harness.servers.launcher import Fleet, ServerStartError, build_command
    _check_exposure(args)
    specs = _specs(args)
    if args.dry_run:
        for iid, s in specs.items():
            env = f"CUDA_VISIBLE_DEVICES={','.join(map(str, s.gpus))}"
            print(f"{comment_line(iid)}\n{env} {shlex.join(build_command(s, config_dir=args.log_dir))}")
        return 0
    endpoints = {iid: s.base_url for iid, s in specs.items()}
    fleet = Fleet(list(specs.values()), log_dir=args.log_dir)
    stop = {"sig": False}

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        stop["sig"] = True
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            fleet.start()
        except ServerStartError as exc:
            raise _user_error(f"{str(exc).splitlines()[0]} (logs: {args.log_dir})") from None
        line = json.dumps(endpoints)
        print(line, flush=True)
        if args.endpoints_out:
            Path(args.endpoints_out).write_text(line + "\n", encoding="utf-8")
        if not args.check:
            print(f"{len(specs)} servers up; Ctrl-C stops them", file=sys.stderr, flush=True)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()
        signal.signal(signal.SIGTERM, old)
    return 0


def _replay(args: argparse.Namespace) -> int:
    import os

    from harness.cli import resolve_trace_path
    from harness.live import LiveSettings, replay_trace
    from harness.servers.deploy import endpoints_from_urls
    from harness.trace import TraceError, load_trace
    if bool(args.endpoints) == bool(args.endpoints_file):
        raise _user_error("--endpoints: give --endpoints URL[,URL...] or --endpoints-file FILE (one of them)")
    if args.endpoints:
        urls = {f"replica{k}": u for k, u in enumerate(u for u in args.endpoints.split(",") if u)}
    else:
        from flowmaker.inputs import InputError, parse_text, read_text
        try:
            urls = parse_text(read_text(args.endpoints_file), json_syntax=True, where=str(args.endpoints_file))
        except InputError as exc:
            raise _user_error(f"--endpoints-file: {exc}") from None
        if not isinstance(urls, dict) or not urls:
            raise _user_error("--endpoints-file: expected a JSON object {instance id: URL}")
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise _user_error(f"--api-key-env: {args.api_key_env} is not set")
    try:
        trace = load_trace(resolve_trace_path(args.trace))
    except TraceError as exc:
        raise _user_error(f"--trace: {exc}") from None
    if args.max_requests is not None:
        trace = trace.head(args.max_requests)
    try:
        eps = endpoints_from_urls(urls, timeout_s=args.timeout, retries=args.retries, backend=args.backend,
                                  tokenizers={k: args.tokenizer for k in urls} if args.tokenizer else None,
                                  api_key=key, chat=args.chat, max_connections=args.max_concurrency)
    except Exception as exc:  # noqa: BLE001 - an unreachable endpoint is a user error here
        raise _user_error(f"--endpoints: {type(exc).__name__}: {exc}") from None
    settings = LiveSettings(time_scale=args.time_scale, max_concurrency=args.max_concurrency, seed=args.seed,
                            max_prompt_tokens=args.max_prompt_tokens, max_output_tokens=args.max_output_tokens)
    try:
        res = replay_trace(trace, eps, settings=settings)
    finally:
        for ep in eps.values():
            ep.client.close()
    s = res.summary
    out = {"model": ",".join(sorted({ep.client.model for ep in eps.values()})), "gpu": None, "tp": None, "pp": None,
           "replicas": len(eps), "scheduler": None, "trace": trace.name, "backend": "servers",
           "requests": s["requests"], "completed": s["completed"], "failed": s["failed"],
           "simulated_s": s["residency_s"], "wall_s": s["wall_s"],
           "requests_per_wall_s": s["requests"] / s["wall_s"] if s["wall_s"] > 0 else None,
           "kv_capacity_tokens": None, "preemptions": None, "iterations": None, "events": None,
           **{k: s[k] for k in ("e2e_s", "ttft_s", "tpot_s", "queue_s")},
           "calls_failed": s["calls_failed"], "call_faults": s["call_faults"], "dead_instances": s["dead_instances"],
           "dispatch_lag_max_s": s["dispatch_lag_max_s"], "endpoints": urls}
    print(json.dumps(out, indent=1) if args.json else format_live(out))
    return 0


def format_live(s: dict) -> str:
    from harness.metrics import fmt
    lines = [f"{s['model']} on {s['replicas']} live endpoint(s), trace {s['trace']}",
             f"  requests {s['requests']} (completed {s['completed']}, failed {s['failed']}; faults "
             f"{s['call_faults'] or 'none'}), replayed {fmt(s['simulated_s'])} s",
             f"  {'metric':<8}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}"]
    for k in ("e2e_s", "ttft_s", "tpot_s"):
        lines.append(f"  {k:<8}" + "".join(f"{fmt(s[k][q]):>12}" for q in ("mean", "p50", "p90", "p99")))
    return "\n".join(lines)


def _engine_flags(p: argparse.ArgumentParser) -> None:
    from profiler.engine import SCHEDULERS
    g = p.add_argument_group("engine (profiler.engine.EngineConfig; default: the backend's)")
    g.add_argument("--scheduler", choices=SCHEDULERS, default=None, help="admission policy (docs/harness.md)")
    g.add_argument("--max-batch", dest="max_num_seqs", type=int, default=None, help="max_num_seqs")
    g.add_argument("--max-batch-tokens", dest="max_num_batched_tokens", type=int, default=None,
                   help="prefill tokens per pass (vLLM max_num_batched_tokens)")
    g.add_argument("--chunk-size", type=int, default=None, help="sarathi token budget per pass")
    g.add_argument("--gpu-mem-util", dest="gpu_memory_utilization", type=float, default=None,
                   help="vLLM share of GPU memory for instances without a planned share")
    g.add_argument("--kv-tokens", dest="kv_capacity_tokens", type=int, default=None,
                   help="KV-cache capacity per instance in tokens (default: derived from memory)")
    g.add_argument("--block-size", type=int, default=None, help="KV block size in tokens")
    g.add_argument("--prefix-caching", action="store_true", default=None, help="on (default off: load runs)")


def add_export(sub) -> None:
    ep = sub.add_parser("export", help="a plan's servers as a launch script, docker-compose or Kubernetes")
    ep.add_argument("plan", type=Path, help=f"plan JSON ({command_name('selector')} solve|deploy --json)")
    ep.add_argument("--format", choices=("sh", "compose", "k8s"), required=True,
                    help="sh: a launch script; compose: a docker-compose file; k8s: Kubernetes Deployments")
    ep.add_argument("--backend", choices=("vllm", "trtllm", "transformers"), default="vllm",
                    help="serving engine whose command lines are rendered (default vllm)")
    ep.add_argument("--gpu", default=None, help="catalog GPU of the instances whose plan names no gpu_type "
                    "(memory shares, node selector), e.g. a6000; a typed plan's instances keep their own")
    ep.add_argument("--model-path", action="append", metavar="MODEL=DIR",
                    help="checkpoint of a catalog model (default: its hf_id); repeatable")
    ep.add_argument("--base-port", type=int, default=8100, help="port of the first server; the next ones count up")
    ep.add_argument("--dtype", default="auto", help="weights' dtype flag passed to the engine (default auto)")
    ep.add_argument("--image", default=None, help="container image (compose, k8s; default per backend)")
    ep.add_argument("--namespace", default="default", help="Kubernetes namespace (default default)")
    ep.add_argument("--out", type=Path, default=None, help="write here instead of standard output")
    _plan_flags(ep)
    _engine_flags(ep)
    ep.set_defaults(func=_export)


def _plan_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--args", action="append", metavar="ID=ARGS",
                   help="extra arguments for one instance id ('*': all), shell-quoted, e.g. "
                   "'chat/respond/0=--max-model-len 8192'; repeatable")
    p.add_argument("--skip-infeasible", action="store_true",
                   help="serve the deployed tasks of a plan set in which some task has no deployment "
                   "(default: refuse, exit 2)")


def add_launch(sub) -> None:
    lp = sub.add_parser("launch", help="start one server per instance of a plan; print the endpoints")
    lp.add_argument("plan", type=Path, help=f"plan JSON ({command_name('selector')} solve|deploy --json)")
    lp.add_argument("--backend", choices=("vllm", "trtllm", "transformers"), default="vllm",
                    help="serving engine to start (default vllm)")
    lp.add_argument("--gpu", default=None, help="catalog GPU the plan is for (memory shares), e.g. a6000")
    lp.add_argument("--model-path", action="append", metavar="MODEL=DIR",
                    help="local checkpoint of a catalog model (default: its hf_id)")
    lp.add_argument("--stand-in", default=None, help="one local checkpoint for every instance, on CPU")
    lp.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment of every server")
    lp.add_argument("--base-port", type=int, default=8100, help="port of the first server; the next count up")
    lp.add_argument("--host", default="127.0.0.1", help="address the servers bind (default loopback)")
    lp.add_argument("--dtype", default="auto", help="weights' dtype flag passed to the engine (default auto)")
    lp.add_argument("--api-key-env", default=None, help="servers require the key in this variable")
    lp.add_argument("--allow-unauthenticated-remote", action="store_true",
                    help="let --host be a non-loopback address without --api-key-env (anyone who reaches it can use it)")
    lp.add_argument("--startup-timeout", type=float, default=900.0,
                    help="seconds to wait for every server to become healthy (default 900)")
    lp.add_argument("--log-dir", default="logs/servers", help="one log file per server here (default logs/servers)")
    lp.add_argument("--endpoints-out", default=None, help="also write the endpoints JSON here")
    lp.add_argument("--dry-run", action="store_true", help="print the command lines; start nothing")
    lp.add_argument("--check", action="store_true", help="stop the servers once all are healthy")
    _plan_flags(lp)
    _engine_flags(lp)
    lp.set_defaults(func=_launch)


def add_replay(sub) -> None:
    rp = sub.add_parser("replay", help="replay a trace on live endpoints (the simulate summary)")
    rp.add_argument("--endpoints", default=None, help="base URLs, comma-separated (replicas)")
    rp.add_argument("--endpoints-file", default=None, help="JSON {instance id: URL} (launch prints it)")
    rp.add_argument("--trace", required=True, help="CSV or azure:code / azure:conv (as simulate)")
    rp.add_argument("--backend", choices=("vllm", "trtllm", "transformers"), default=None,
                    help="ask for exact output lengths the way this backend takes them")
    rp.add_argument("--tokenizer", default=None, help="local tokenizer: exact-length random-token prompts")
    rp.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    rp.add_argument("--api-key-env", default=None, help="send the key held in this variable")
    rp.add_argument("--max-concurrency", type=int, default=64, help="calls in flight at most (default 64)")
    rp.add_argument("--timeout", type=float, default=300.0, help="deadline per call, retries included (s)")
    rp.add_argument("--retries", type=int, default=1, help="resends of a call that failed before streaming (default 1)")
    rp.add_argument("--time-scale", type=float, default=1.0, help="stretch inter-arrival times by X (default 1)")
    rp.add_argument("--max-requests", type=int, default=None, help="replay only the first N requests")
    rp.add_argument("--max-prompt-tokens", type=int, default=None, help="cut longer prompts to N tokens")
    rp.add_argument("--max-output-tokens", type=int, default=None, help="cut longer outputs to N tokens")
    rp.add_argument("--seed", type=int, default=0, help="seed of the random-token prompts (default 0)")
    rp.add_argument("--json", action="store_true", help="print the summary as JSON")
    rp.set_defaults(func=_replay)
