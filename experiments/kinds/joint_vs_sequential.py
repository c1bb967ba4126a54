"""Joint deployment of a task set (spec section 11) against section 8's greedy, one task at a time.

Task sets: the seven tasks in the order given (``tasks``), and random sets of ``sizes`` tasks drawn
with replacement from them (renamed ``<task>-<k>``, each arrival rate scaled by a seeded factor in
[0.5, 1.5]). Each set is deployed on every cluster of ``clusters``: a cluster file (``a6000x8``,
priced at ``a6000_usd_per_hour``) or ``mixed``, the 8 GPUs spread over three priced types by
``selector.typed.spread_over_types`` (economy, standard, fast), under each objective and at each load
(every arrival rate times ``load``).

Per cell: the joint ``milp`` (``time_limit_s``), the greedy ``sequential`` (``exhaustive`` per task) in
the order given, and the greedy in ``orders`` random orders (best and worst of them: most served, then
least total cost). Rows: ``cluster, objective, load, set, n_tasks, solver (joint | given | best_order |
worst_order), served, total_cost, status, elapsed_s, gap`` (milp's gap at the limit) and
``saving_pct`` (``100 * (greedy total - joint total) / greedy total`` where both serve as many, else
NaN). Outputs: ``joint.parquet``, ``summary.md``, ``time_vs_tasks.png``; copied to
``results/<experiment>/`` when ``publish`` is set. Cells are stored as they finish, so a run resumes.
"""
from __future__ import annotations

import math
import shutil
import time
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError

Objective = Literal["gb_s", "usd_per_hour"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: list[str] = Field(min_length=2)
    clusters: list[str] = Field(default_factory=lambda: ["a6000x8", "mixed"], min_length=1)
    objectives: list[Objective] = Field(default_factory=lambda: ["gb_s", "usd_per_hour"], min_length=1)
    loads: list[Annotated[float, Field(gt=0)]] = Field(default_factory=lambda: [1.0, 2.0, 4.0], min_length=1)
    random_loads: list[Annotated[float, Field(gt=0)]] | None = None   # loads of the random sets (default: loads)
    sizes: list[Annotated[int, Field(ge=2, le=12)]] = Field(default_factory=lambda: [2, 4, 6, 8, 10, 12])
    sets_per_size: int = Field(default=1, ge=0)
    orders: int = Field(default=5, ge=0)        # random orders of the greedy (best and worst reported)
    time_limit_s: float = Field(default=30.0, gt=0)
    a6000_usd_per_hour: float = Field(default=1.09, gt=0)   # configs/prices.yaml (fleet): Lambda on-demand
    publish: bool = True


def _base(params: Params, cluster: str):
    """(cluster, resolved problems of ``params.tasks``) for a cluster name: the untyped file's, or the
    ``mixed`` fleet's (types and prices from ``selector.typed``)."""
    from selector.errors import ProblemError
    from selector.problem import parse_problem
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.typed import spread_over_types
    try:
        c, gpu = load_cluster_file("a6000x8" if cluster == "mixed" else cluster)
        catalog = load_catalog()
        problems = [resolve_task(t, catalog=catalog, cluster=c, gpu=gpu) for t in params.tasks]
    except ProblemError as exc:
        raise UserError(f"field 'params.clusters': {exc}") from None
    if cluster == "mixed":
        problems = [spread_over_types(p, seed=0, n_types=3, objective="gb_s") for p in problems]
    else:
        problems = [parse_problem({**p.to_dict(), "cluster": {**p.cluster.model_dump(mode="json"),
                                                             "prices": {"gpu": params.a6000_usd_per_hour}}})
                    for p in problems]
    return problems[0].cluster, problems


def _scaled(p, name: str, factor: float) -> dict:
    d = {k: v for k, v in p.to_dict().items() if k not in ("cluster", "objective")}
    d["task"] = {**d["task"], "name": name, "arrival_rate_rps": d["task"]["arrival_rate_rps"] * factor}
    return d


def task_sets(params: Params, problems: list, seed: int) -> list[tuple[str, list[tuple[int, float]]]]:
    """``(set name, [(task index, rate factor)])``: the seven as given, then the random sets."""
    out = [("given", [(k, 1.0) for k in range(len(problems))])]
    rng = np.random.default_rng([seed, 29])
    for n in params.sizes:
        for s in range(params.sets_per_size):
            picks = rng.integers(0, len(problems), size=n)
            out.append((f"random-{n}-{s}", [(int(k), float(rng.uniform(0.5, 1.5))) for k in picks]))
    return out


def build_set(cluster, problems: list, members: list[tuple[int, float]], load: float, objective: str):
    from selector.joint import make_task_set
    count: dict[int, int] = {}
    tasks = []
    for k, factor in members:
        count[k] = count.get(k, 0) + 1
        name = problems[k].task.name if count[k] == 1 else f"{problems[k].task.name}-{count[k]}"
        tasks.append(_scaled(problems[k], name, factor * load))
    return make_task_set(cluster, tasks, objective)


def _greedy(ts, order: list[int], time_limit_s: float):
    """The sequential greedy with the tasks in ``order`` (totals do not depend on the order's listing)."""
    from selector.joint import make_task_set
    from solvers.joint_registry import get_joint_solver
    permuted = make_task_set(ts.cluster, [ts.tasks[k] for k in order], ts.objective)
    return get_joint_solver("sequential").select(permuted, time_limit_s=time_limit_s)


def solve_cell(ts, params: Params, seed: int) -> list[dict]:
    from solvers.joint_registry import get_joint_solver
    n = len(ts.tasks)
    joint = get_joint_solver("milp").select(ts, time_limit_s=params.time_limit_s)
    rows = [_row("joint", joint)]
    given = _greedy(ts, list(range(n)), params.time_limit_s)
    rows.append(_row("given", given))
    rng = np.random.default_rng([seed, n, 7])
    runs = [_greedy(ts, list(rng.permutation(n)), params.time_limit_s) for _ in range(params.orders)]
    if runs:
        rank = sorted(runs, key=lambda r: (-r.served, r.total_cost))
        rows += [_row("best_order", rank[0]), _row("worst_order", rank[-1])]
    for r in rows:
        same = r["served"] == joint.served
        r["saving_pct"] = (100 * (r["total_cost"] - joint.total_cost) / r["total_cost"]
                           if same and r["total_cost"] > 0 else (0.0 if same else math.nan))
        r["n_tasks"] = n
    return rows


def _row(solver: str, plan) -> dict:
    return {"solver": solver, "served": plan.served, "total_cost": plan.total_cost, "status": plan.status,
            "elapsed_s": plan.elapsed_s, "gap": plan.extra.get("gap")}


def run(params: Params, ctx: RunContext) -> None:
    from experiments.kinds._joint_report import plot_time, summary_md
    bases = {c: _base(params, c) for c in params.clusters}
    frames = []
    cells = [(c, obj, load, name, members) for c in params.clusters for obj in params.objectives
             for name, members in task_sets(params, bases[c][1], ctx.seed)
             for load in (params.loads if name == "given" else params.random_loads or params.loads)]
    bar = tqdm(total=len(cells), disable=not ctx.progress, desc="task sets", unit="set")
    for c, obj, load, name, members in cells:
        path = ctx.cell_path(f"{c}-{obj}-{load:g}-{name}")
        if not path.exists():
            bar.set_postfix_str(f"{c} {obj} x{load:g} {name}")
            ts = build_set(*bases[c], members, load, obj)
            t0 = time.perf_counter()
            rows = solve_cell(ts, params, ctx.seed)
            df = pd.DataFrame(rows).assign(cluster=c, objective=obj, load=load, set=name,
                                           cell_wall_s=time.perf_counter() - t0)
            atomic_write_parquet(path, df)
        frames.append(pd.read_parquet(path))
        bar.update()
    bar.close()
    df = pd.concat(frames, ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "joint.parquet", df)
    png = plot_time(df, ctx.run_dir / "time_vs_tasks.png", params.time_limit_s)
    md = summary_md(df, params)
    atomic_write_text(ctx.run_dir / "summary.md", md)
    print(md)
    if params.publish:        # results/<experiment>/ holds the latest published run
        for p in (png, ctx.run_dir / "summary.md", ctx.run_dir / "joint.parquet"):
            shutil.copy(p, ctx.run_dir.parent / p.name)
