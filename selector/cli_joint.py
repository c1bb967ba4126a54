"""``python -m selector joint`` and the ``--joint`` face of ``deploy`` and ``bundle`` (spec
section 11): a task set solved jointly by a selector of the joint registry
(``solvers/joint_registry.py``; ``sequential``, ``exhaustive``, ``milp``, ``local``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from selector.errors import ProblemError

DEFAULT_JOINT_SOLVER = "milp"


def joint_solver(name: str):
    """The registered joint selector ``name``; an unknown one is a ProblemError naming ``--solver``."""
    from solvers.joint_registry import get_joint_solver
    try:
        return get_joint_solver(name)
    except KeyError as exc:
        raise ProblemError("--solver", str(exc.args[0])) from None


def task_set_of(bundle: dict[str, Any], objective: str | None = None):
    """A bundle (``selector.deploy.load_bundle``: a cluster and resolved problems) as a task set,
    checked by section 11's rules."""
    from selector.joint import make_task_set
    tasks = list(bundle["tasks"])
    if objective is None:       # the tasks' own (resolve --objective), when they agree
        seen = sorted({p.objective for p in tasks})
        if len(seen) > 1:
            raise ProblemError("tasks", f"the tasks ask for different objectives {seen}; pass --objective")
        objective = seen[0] if seen else "gb_s"
    return make_task_set(bundle["cluster"], tasks, objective)


def solve_joint(task_set, solver: str | None, time_limit_s: float, as_json: bool) -> int:
    from selector.sanity import warn_problem
    for p in task_set.tasks:
        warn_problem(p)
    plan = joint_solver(solver or DEFAULT_JOINT_SOLVER).select(task_set, time_limit_s=time_limit_s)
    print(plan.to_json() if as_json else format_joint(plan.to_dict()))
    return 0


def run_joint(args: argparse.Namespace) -> int:
    from selector.joint import load_task_set
    return solve_joint(load_task_set(args.task_set), args.solver, args.time_limit, args.json)


def format_joint(d: dict) -> str:
    """A readable rendering of a joint answer (section 11)."""
    from selector.cli import format_plan
    unit = "$/h" if d["objective"] == "usd_per_hour" else "GB*s"
    lines = [f"task set: {d['status']} ({d['solver']}, {d['elapsed_s']:.4f} s): {d['served']} of {len(d['plans'])} "
             f"tasks served, total cost {d['total_cost']:.6g} {unit} ({d['objective']}), total latency "
             f"{d['total_latency_s']:.4g} s"]
    for p in d["plans"]:
        if p["status"] == "skipped":
            lines.append(f"{p['task']}: skipped ({p['reason']})")
        else:
            lines.append(format_plan(p))
    inst = d["cluster"]["instances"]
    lines.append(f"final cluster: {len(inst)} instances, {sum(g['used_gb'] for g in d['cluster']['gpus']):.4g} GB used")
    return "\n".join(lines)


def add_joint_parser(sub, time_limit) -> None:
    from solvers.joint_registry import names
    jp = sub.add_parser("joint", help="deploy a task set jointly: the best choice for all tasks at once (spec section 11)")
    jp.add_argument("task_set", type=Path, metavar="FILE",
                    help="task set (YAML or JSON): `cluster`, optional `objective`, `tasks` (resolved problems "
                         "without cluster); `bundle --joint` writes one")
    jp.add_argument("--solver", default=DEFAULT_JOINT_SOLVER,
                    help=f"one of: {', '.join(names())} (default {DEFAULT_JOINT_SOLVER})")
    time_limit(jp, what="the whole set")
    jp.add_argument("--json", action="store_true", help="print the answer JSON of spec section 11")
    jp.set_defaults(func=run_joint)


def bundle_data(cluster, problems: list, objective: str | None, joint: bool) -> dict:
    """What ``bundle`` writes (each task keeps its own objective); with ``joint``, checked as a task
    set (section 11) carrying one ``objective`` (``objective``, else the tasks'), as ``joint`` reads."""
    if joint:
        return task_set_of({"cluster": cluster, "tasks": problems}, objective).to_dict()
    return {"cluster": cluster.model_dump(mode="json"),
            "tasks": [{k: v for k, v in p.to_dict().items() if k != "cluster"} for p in problems]}

