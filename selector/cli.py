"""``python -m selector``: resolve, solve and deploy from the shell.

User errors print one line on standard error and exit with status 2; an infeasible
problem is an answer (exit 0, ``status: infeasible`` with a reason).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from selector.errors import ProblemError


def _solver(name: str):
    """The registered selector ``name``; an unknown one is a ProblemError naming ``--solver``."""
    from solvers.registry import get_solver
    try:
        return get_solver(name)
    except KeyError as exc:
        raise ProblemError("--solver", str(exc.args[0])) from None


def _solve(args: argparse.Namespace) -> int:
    from selector.problem import load_problem

    problem = load_problem(args.problem)
    solver = _solver(args.solver)
    plan = solver.select(problem, time_limit_s=args.time_limit)
    print(plan.to_json() if args.json else format_plan(plan.to_dict()))
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from selector.deploy import deploy_bundle, load_bundle

    bundle = load_bundle(args.bundle)
    solver = _solver(args.solver)
    result = deploy_bundle(bundle, solver, time_limit_s=args.time_limit)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for plan in result["plans"]:
            print(format_plan(plan))
            print()
        print(f"final cluster: {len(result['cluster']['instances'])} instances")
    return 0


def _resolve(args: argparse.Namespace) -> int:
    from selector.resolve import resolve_cli

    return resolve_cli(args)


def _export(args: argparse.Namespace) -> int:
    """The plan's servers as a launch script, a docker-compose file or Kubernetes manifests. The
    rendering lives with the launchers (``harness.servers.export``): this command-line face
    reaches it as it reaches the solver registry; selector's core never imports it."""
    from harness.servers.export import export_plan
    from profiler.steps import UnknownName
    paths = {}
    for v in args.model_path or ():
        name, sep, path = v.partition("=")
        if not sep:
            raise ProblemError("--model-path", f"expected MODEL=DIR, got {v!r}")
        paths[name] = path
    try:
        text = export_plan(args.plan, args.format, backend=args.backend, gpu=args.gpu, model_paths=paths,
                           base_port=args.base_port, image=args.image, namespace=args.namespace,
                           dtype=args.dtype)
    except UnknownName as exc:
        raise ProblemError("--gpu", str(exc)) from None
    except (KeyError, ValueError) as exc:
        raise ProblemError(str(args.plan), str(exc.args[0]) if exc.args else str(exc)) from None
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0


def format_plan(d: dict) -> str:
    """A readable rendering of a plan dict."""
    head = f"{d['task']}: {d['status']} ({d['solver']}, {d['elapsed_s']:.4f} s, space {d['variant_space']})"
    if d["status"] not in ("optimal", "feasible"):
        dep = d.get("deployment")
        deployed = "" if dep is None else (f"\n  deploys anyway ({dep['rule']}): {len(dep['instances'])} instances, "
                                           f"{sum(i['mem_gb'] for i in dep['instances']):.4g} GB")
        return f"{head}\n  reason: {d['reason']}{deployed}"
    lines = [head, f"  workflow {d['workflow']}: cost {d['cost_gb_s']:.4g} GB*s, latency {d['latency_s']:.4g} s, "
                   f"new {d['new_mem_gb']:.4g} GB on {d['new_gpus']} GPU slots, accuracy {d['accuracy']:.2f}"]
    for s in d["stages"]:
        where = f"reuse {s['reuse']}" if s["reuse"] else f"{s['replicas']}x new on {s['gpus']}"
        lines.append(f"  - {s['stage']}: {s['model']} tp{s['tp']} pp{s['pp']} {where}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from solvers.registry import names

    ap = argparse.ArgumentParser(prog="python -m selector", description="FlowMaker workflow-variant selection")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("solve", help="choose the variant of one resolved problem")
    sp.add_argument("problem", type=Path)
    sp.add_argument("--solver", default="exhaustive", help=f"one of: {', '.join(names())}")
    sp.add_argument("--time-limit", type=float, default=60.0, help="wall seconds (default 60)")
    sp.add_argument("--json", action="store_true", help="print the plan JSON of spec section 6")
    sp.set_defaults(func=_solve)
    dp = sub.add_parser("deploy", help="deploy several tasks in sequence (spec section 8)")
    dp.add_argument("bundle", type=Path, help="YAML with `cluster:` and `tasks:` (problems without cluster)")
    dp.add_argument("--solver", default="flowmaker")
    dp.add_argument("--time-limit", type=float, default=60.0)
    dp.add_argument("--json", action="store_true")
    dp.set_defaults(func=_deploy)
    ep = sub.add_parser("export", help="a plan's servers as a launch script, docker-compose or Kubernetes")
    ep.add_argument("plan", type=Path, help="plan JSON (solve --json / deploy --json)")
    ep.add_argument("--format", choices=("sh", "compose", "k8s"), required=True)
    ep.add_argument("--backend", choices=("vllm", "trtllm", "transformers"), default="vllm")
    ep.add_argument("--gpu", required=True, help="catalog GPU the plan is for (memory shares), e.g. a6000")
    ep.add_argument("--model-path", action="append", metavar="MODEL=DIR",
                    help="checkpoint of a catalog model (default: its hf_id)")
    ep.add_argument("--base-port", type=int, default=8100)
    ep.add_argument("--dtype", default="auto")
    ep.add_argument("--image", default=None, help="container image (compose, k8s; default per backend)")
    ep.add_argument("--namespace", default="default", help="Kubernetes namespace")
    ep.add_argument("--out", type=Path, default=None, help="write here instead of standard output")
    ep.set_defaults(func=_export)
    rp = sub.add_parser("resolve", help="turn catalog + task + cluster + profile into a resolved problem")
    from selector.resolve import add_resolve_args
    add_resolve_args(rp)
    rp.set_defaults(func=_resolve)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "time_limit", 1.0) is not None and getattr(args, "time_limit", 1.0) <= 0:
        print("error: --time-limit: must be > 0", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
