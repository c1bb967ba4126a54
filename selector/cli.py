"""``python -m selector`` (console script ``flowmaker-select``): resolve, solve, deploy and bundle
from the shell (a plan's servers are exported by ``python -m harness export``).

    resolve TASK [--cluster C]         catalog + task + cluster + profile -> a resolved problem
    solve PROBLEM                       the variant of one resolved problem (spec section 6)
    deploy TASK... [--cluster C]        several tasks one after another (spec section 8); or a bundle;
                                        ``--joint``: all at once (spec section 11)
    bundle TASK... [--cluster C]        write the bundle file ``deploy`` reads (``--joint``: a task set)
    joint TASKSET --solver NAME         the joint answer of a task set (spec section 11)

Tasks, clusters and profile tables are given by name (``configs/tasks``, ``configs/clusters``,
``results/profiles``) or by path. User errors print one line on standard error and exit with
status 2; an infeasible problem is an answer (exit 0, ``status: infeasible`` with a reason).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from flowmaker.entry import OneLineParser, add_version, command_name, doc, one_line, run, setup_logging
from selector.errors import ProblemError

DEFAULT_CLUSTER = "a6000x8"


def _solver(name: str):
    """The registered selector ``name``; an unknown one is a ProblemError naming ``--solver``."""
    from solvers.registry import get_solver
    try:
        return get_solver(name)
    except KeyError as exc:
        raise ProblemError("--solver", str(exc.args[0])) from None


def _file_kind(data: dict) -> str:
    """What a mapping looks like: ``problem``, ``task``, ``cluster``, ``bundle`` or ``unknown``."""
    if "task" in data and isinstance(data.get("task"), dict):
        return "problem"
    if "workflows" in data and ("accuracy_slo" in data or "trace" in data):
        return "task"
    if "nodes" in data:
        return "cluster"
    if "tasks" in data:
        return "bundle"
    return "unknown"


def _read_problem(path: Path):
    """A resolved problem file; a task, cluster or bundle file given instead is named as such, with
    the command that takes it."""
    from selector.problem import parse_problem
    from selector.yamlio import load_mapping
    data = load_mapping(path)
    kind = _file_kind(data)
    hints = {"task": f"a task file, not a resolved problem: resolve it first (python -m selector resolve {path} "
                     f"--out problem.yaml), or deploy it directly (python -m selector deploy {path})",
             "cluster": "a cluster file, not a resolved problem: give it to resolve/deploy as --cluster",
             "bundle": f"a deploy bundle, not a resolved problem: python -m selector deploy {path}"}
    if kind in hints:
        raise ProblemError(str(path), hints[kind])
    return parse_problem(data)


def _check_out(path: Path | None) -> None:
    if path is not None and not path.parent.is_dir():
        raise ProblemError("--out", f"folder {path.parent} does not exist")


def _write(text: str, out: Path | None) -> None:
    if out is None:
        print(text)
        return
    try:
        out.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as exc:
        raise ProblemError("--out", f"{out}: cannot write ({exc.strerror})") from None
    print(f"wrote {out}", file=sys.stderr)


def _solve(args: argparse.Namespace) -> int:
    from selector.sanity import warn_problem
    problem = _read_problem(args.problem)
    warn_problem(problem)
    solver = _solver(args.solver)
    solver.prepare()                   # the backend's import is not part of the time limit
    plan = solver.select(problem, time_limit_s=args.time_limit)
    print(plan.to_json() if args.json else format_plan(plan.to_dict()))
    return 0


# -- resolve, bundle, deploy ------------------------------------------------------------------
def _env(args: argparse.Namespace):
    """(catalog, cluster, gpu, perf, objective) from the options shared by resolve, bundle and deploy."""
    from profiler.catalog import CatalogError
    from selector.clusterfile import load_cluster_file
    from selector.resolve import AnalyticPerf, TablePerf, load_catalog
    try:
        catalog = load_catalog(models=getattr(args, "models", None), accuracy=getattr(args, "accuracy", None))
        cluster, gpu = load_cluster_file(args.cluster, sharing=args.sharing)
    except CatalogError as exc:
        raise ProblemError("", str(exc)) from None
    except ProblemError as exc:
        if exc.field != "cluster":
            raise
        raise ProblemError("--cluster", str(exc).split(": ", 1)[1]) from None
    perf = TablePerf(args.profile) if args.profile else AnalyticPerf()
    return catalog, cluster, gpu, perf, args.objective or "gb_s"


def _resolve_one(spec: str, env) -> Any:
    from selector.resolve import resolve_task
    catalog, cluster, gpu, perf, objective = env
    return resolve_task(spec, catalog=catalog, cluster=cluster, gpu=gpu, perf=perf, objective=objective)


def _resolve(args: argparse.Namespace) -> int:
    from selector.sanity import warn_problem
    _check_out(args.out)
    problem = _resolve_one(args.task, _env(args))
    warn_problem(problem)
    _write(_dump(problem.to_dict(), args.json), args.out)
    return 0


def _dump(data: dict, as_json: bool) -> str:
    import yaml
    if as_json:
        return json.dumps(data, indent=1)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)


def _tasks_and_problems(inputs: list[str], env) -> list:
    """Each input resolved: a task name or file (resolved on the cluster) or a resolved problem
    file (placed on the cluster)."""
    from selector.deploy import with_cluster
    from selector.yamlio import load_mapping
    out = []
    for spec in inputs:
        p = Path(spec)
        if p.is_file() and p.suffix in (".yaml", ".yml", ".json"):
            kind = _file_kind(load_mapping(p))
            if kind == "problem":
                data = {k: v for k, v in load_mapping(p).items() if k != "cluster"}
                out.append(with_cluster(data, env[1]))
                continue
            if kind == "bundle":
                raise ProblemError(spec, "a bundle deploys alone: python -m selector deploy BUNDLE (no other inputs)")
            if kind == "cluster":
                raise ProblemError(spec, "a cluster file: pass it as --cluster")
        out.append(_resolve_one(spec, env))
    return out


def _bundle(args: argparse.Namespace) -> int:
    from selector.deploy import check_distinct_names
    _check_out(args.out)
    env = _env(args)
    problems = _tasks_and_problems(args.tasks, env)
    from selector.cli_joint import bundle_data
    check_distinct_names([p.task.name for p in problems])
    _write(_dump(bundle_data(env[1], problems, args.objective, args.joint), args.json), args.out)
    return 0


def _is_bundle(spec: str) -> bool:
    from selector.yamlio import load_mapping
    p = Path(spec)
    return p.is_file() and p.suffix in (".yaml", ".yml", ".json") and _file_kind(load_mapping(p)) == "bundle"


def _deploy(args: argparse.Namespace) -> int:
    from selector.deploy import deploy_bundle, load_bundle
    from selector.sanity import warn_problem
    if args.joint:
        return _deploy_joint(args)
    solver = _solver(args.solver or "flowmaker")
    if len(args.inputs) == 1 and _is_bundle(args.inputs[0]):
        for opt in ("cluster", "sharing", "profile", "objective"):
            if getattr(args, opt) is not None:
                raise ProblemError(f"--{opt}", "a bundle carries its own cluster and resolved tasks; "
                                               "drop the option or deploy task names instead")
        bundle = load_bundle(args.inputs[0])
    else:
        args.cluster = args.cluster or DEFAULT_CLUSTER
        env = _env(args)
        bundle = {"cluster": env[1], "tasks": _tasks_and_problems(args.inputs, env)}
    for p in bundle["tasks"]:
        warn_problem(p)
    result = deploy_bundle(bundle, solver, time_limit_s=args.time_limit)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for plan in result["plans"]:
        print(format_plan(plan))
        print()
    inst = result["cluster"]["instances"]
    solved = sum(p["status"] in ("optimal", "feasible") for p in result["plans"])
    usd = [p["usd_per_hour"] for p in result["plans"] if p.get("usd_per_hour") is not None]
    print(f"final cluster: {len(inst)} instances, {sum(g['used_gb'] for g in result['cluster']['gpus']):.4g} GB "
          f"used of {sum(g['mem_gb'] for g in result['cluster']['gpus']):.4g} GB; "
          f"{solved} of {len(result['plans'])} tasks placed" + (f"; ${sum(usd):.4g}/h of new GPUs" if usd else ""))
    return 0


def _deploy_joint(args: argparse.Namespace) -> int:
    """``deploy --joint``: the same task list (names, problem files, a bundle or a task set file)
    solved jointly (spec section 11) by a joint selector."""
    from selector.cli_joint import solve_joint, task_set_of
    from selector.deploy import load_bundle
    from selector.joint import load_task_set
    from selector.yamlio import load_mapping
    if len(args.inputs) == 1 and _is_bundle(args.inputs[0]):
        for opt in ("cluster", "sharing", "profile", "objective"):
            if getattr(args, opt) is not None:
                raise ProblemError(f"--{opt}", "a bundle carries its own cluster and resolved tasks; "
                                               "drop the option or deploy task names instead")
        if "objective" in load_mapping(args.inputs[0]):
            task_set = load_task_set(args.inputs[0])
        else:
            task_set = task_set_of(load_bundle(args.inputs[0]))
    else:
        args.cluster = args.cluster or DEFAULT_CLUSTER
        env = _env(args)
        task_set = task_set_of({"cluster": env[1], "tasks": _tasks_and_problems(args.inputs, env)}, args.objective)
    return solve_joint(task_set, args.solver, args.time_limit, args.json)


def format_plan(d: dict) -> str:
    """A readable rendering of a plan dict (units: README "Output columns")."""
    head = f"{d['task']}: {d['status']} ({d['solver']}, {d['elapsed_s']:.4f} s, space {d['variant_space']} variants)"
    if d["status"] not in ("optimal", "feasible"):
        dep = d.get("deployment")
        deployed = "" if dep is None else (f"\n  deploys anyway ({dep['rule']}): {len(dep['instances'])} instances, "
                                           f"{sum(i['mem_gb'] for i in dep['instances']):.4g} GB")
        return f"{head}\n  reason: {d['reason']}{deployed}"
    lines = [head, f"  workflow {d['workflow']}: cost {d['cost_gb_s']:.4g} GB*s (new GB x latency), "
                   f"latency {d['latency_s']:.4g} s, new {d['new_mem_gb']:.4g} GB on {d['new_gpus']} GPU slots, "
                   f"accuracy {d['accuracy']:.2f}"
                   + (f", ${d['usd_per_hour']:.4g}/h of new GPUs" if d.get("usd_per_hour") is not None else "")]
    for s in d["stages"]:
        where = f"reuse {s['reuse']}" if s["reuse"] else f"{s['replicas']}x new on GPUs {s['gpus']}"
        kind = "" if s.get("gpu_type", "gpu") == "gpu" else f" on {s['gpu_type']}"   # spec section 10
        lines.append(f"  - {s['stage']}: {s['model']} tp{s['tp']} pp{s['pp']}{kind} {where}")
    return "\n".join(lines)


# -- the parser ---------------------------------------------------------------------------------
def _time_limit(p: argparse.ArgumentParser, *, what: str = "per task") -> None:
    from solvers.base import time_limit_arg
    p.add_argument("--time-limit", type=time_limit_arg, default=60.0, metavar="S",
                   help=f"wall seconds {what}, a finite number > 0 (default 60)")


def _cluster_opts(p: argparse.ArgumentParser, *, default: str | None) -> None:
    p.add_argument("--cluster", default=default, metavar="NAME|FILE",
                   help=f"cluster name in configs/clusters or a cluster file (default {DEFAULT_CLUSTER})")
    p.add_argument("--sharing", default=None, choices=("memory", "compute", "fair-share"),   # problem.SHARING_MODES
                   help="how GPUs are shared (spec section 9; fair-share: docs/selection.md); default: the cluster "
                        "file's `sharing`, else memory")
    p.add_argument("--profile", default=None, metavar="NAME|FILE",
                   help="profile table (parquet; a name in results/profiles); default: the analytic model")
    p.add_argument("--objective", default=None, choices=("gb_s", "usd_per_hour"),
                   help="what the plan minimises (spec section 10): gb_s = new GB x latency (default), "
                        "usd_per_hour = dollars per hour of the GPUs it newly reserves (prices from "
                        "configs/prices.yaml or the cluster file's `prices`)")


def build_parser() -> argparse.ArgumentParser:
    from selector.cli_joint import add_joint_parser
    from solvers.joint_registry import names as joint_names
    from solvers.registry import names

    ap = OneLineParser(prog=command_name("selector"), description="FlowMaker workflow-variant selection "
                       f"({doc('your-own-task.md')} walks through every command)")
    add_version(ap)
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser, metavar="COMMAND")
    solvers = ", ".join(names())

    rp = sub.add_parser("resolve", help="turn catalog + task + cluster + profile into a resolved problem")
    rp.add_argument("task", help="task name in configs/tasks or a task file")
    _cluster_opts(rp, default=DEFAULT_CLUSTER)
    rp.add_argument("--models", type=Path, default=None, help="model catalog YAML (default configs/models.yaml)")
    rp.add_argument("--accuracy", type=Path, default=None,
                    help="accuracy table YAML (default configs/accuracy/open_llm_leaderboard_v2.yaml, 0-100)")
    rp.add_argument("--out", type=Path, default=None, help="write the problem here instead of standard output")
    rp.add_argument("--json", action="store_true", help="JSON instead of YAML")
    rp.set_defaults(func=_resolve)

    sp = sub.add_parser("solve", help="choose the variant of one resolved problem (spec section 6)")
    sp.add_argument("problem", type=Path, help="resolved problem file (YAML or JSON; `resolve` writes one)")
    sp.add_argument("--solver", default="exhaustive", help=f"one of: {solvers} (default exhaustive)")
    _time_limit(sp)
    sp.add_argument("--json", action="store_true", help="print the plan JSON of spec section 6")
    sp.set_defaults(func=_solve)

    dp = sub.add_parser("deploy", help="deploy several tasks one after another (spec section 8)")
    dp.add_argument("inputs", nargs="+", metavar="TASK|PROBLEM|BUNDLE",
                    help="task names or files (resolved on --cluster), resolved problem files, or one bundle "
                         "file (`cluster:` and `tasks:`, as `bundle` writes)")
    _cluster_opts(dp, default=None)
    dp.add_argument("--solver", default=None, help=f"one of: {solvers} (default flowmaker); with --joint one of: "
                                                   f"{', '.join(joint_names())} (default milp)")
    _time_limit(dp, what="per task (with --joint: the whole set)")
    dp.add_argument("--json", action="store_true", help="print the plans and the final cluster as JSON")
    dp.add_argument("--joint", action="store_true",
                    help="solve the task list jointly (spec section 11): the best choice for all tasks at once")
    dp.set_defaults(func=_deploy)

    bp = sub.add_parser("bundle", help="resolve tasks on a cluster and write the bundle `deploy` reads")
    bp.add_argument("tasks", nargs="+", metavar="TASK|PROBLEM", help="task names or files, or resolved problem files")
    _cluster_opts(bp, default=DEFAULT_CLUSTER)
    bp.add_argument("--out", type=Path, default=None, help="write the bundle here instead of standard output")
    bp.add_argument("--json", action="store_true", help="JSON instead of YAML")
    bp.add_argument("--joint", action="store_true",
                    help="check the tasks as a task set (spec section 11) and write one, as `joint` reads")
    bp.set_defaults(func=_bundle)

    add_joint_parser(sub, _time_limit)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one command; user errors are one line on standard error and status 2."""
    from flowmaker.inputs import InputError
    from profiler.catalog import CatalogError
    setup_logging()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ProblemError, CatalogError, InputError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2


def console() -> NoReturn:
    """The ``flowmaker-select`` console script and ``python -m selector``."""
    run(main)
