"""The main job: resolve the seven tasks on 8x A6000 and deploy them one after another with
every registered selector, in each cluster sharing mode of ``sharing`` (spec section 9: ``memory``,
the paper's LeastLoaded; ``compute``, GPUs also limited by their summed utilisation); print and
store a comparison (cost, latency, instances, GB, time) with a ``sharing`` column. Plans go to
``plans/<selector>.json`` (memory) and ``plans/<selector>-compute.json``."""
from __future__ import annotations

import json
import time

import pandas as pd
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, UserError, atomic_write_parquet, atomic_write_text
from selector.deploy import deploy_task, with_cluster
from selector.errors import ProblemError
from selector.resolve import load_catalog, load_cluster_file, resolve_task


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: list[str] = Field(min_length=1)
    cluster: str = "a6000x8"
    selectors: list[str] | None = None          # default: every registered selector
    time_limit_s: float = Field(default=30.0, gt=0)
    # cluster sharing modes (spec section 9); None: the cluster file's own (`sharing:`, else memory)
    sharing: list[Literal["memory", "compute"]] | None = Field(default=None, min_length=1)


def run(params: Params, ctx: RunContext) -> None:
    from solvers.registry import get_solver, names

    selectors = params.selectors or names()
    for s in selectors:
        if s not in names():
            raise UserError(f"field 'params.selectors': unknown solver '{s}'; known: {', '.join(names())}")
    try:
        catalog = load_catalog()
        by_mode = {}
        for mode in params.sharing or [None]:
            cluster0, gpu = load_cluster_file(params.cluster, sharing=mode)   # a name or a path
            by_mode[cluster0.sharing] = (cluster0, [resolve_task(t, catalog=catalog, cluster=cluster0, gpu=gpu)
                                                    for t in params.tasks])
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    (ctx.run_dir / "problems").mkdir(exist_ok=True)
    for mode, (_, problems) in by_mode.items():
        for p in problems:
            tag = "" if mode == "memory" else f"-{mode}"
            atomic_write_text(ctx.run_dir / "problems" / f"{p.task.name}{tag}.json", json.dumps(p.to_dict()))
    rows = []
    n_tasks = len(params.tasks)
    bar = tqdm(total=len(selectors) * n_tasks * len(by_mode), disable=not ctx.progress, desc="deploying", unit="task")
    for mode, (cluster0, problems) in by_mode.items():
        for name in selectors:
            solver, cluster, plans = get_solver(name), cluster0, []
            for p in problems:
                bar.set_postfix_str(f"{name} ({mode}): {p.task.name}")
                t0 = time.perf_counter()
                plan, cluster = deploy_task(with_cluster(p, cluster), solver, time_limit_s=params.time_limit_s)
                rows.append({"sharing": mode, **_row(name, plan, time.perf_counter() - t0)})
                plans.append(plan.to_dict())
                bar.update()
            tag = "" if mode == "memory" else f"-{mode}"
            atomic_write_text(ctx.run_dir / "plans" / f"{name}{tag}.json",
                              json.dumps({"plans": plans, "cluster": cluster.model_dump(mode="json")}, indent=1))
    bar.close()
    df = pd.DataFrame(rows)
    atomic_write_parquet(ctx.run_dir / "tasks.parquet", df)
    summary = summarise(df)
    atomic_write_parquet(ctx.run_dir / "summary.parquet", summary)
    table = summary.to_markdown(index=False, floatfmt=".4g") if _has_tabulate() else summary.to_string(index=False)
    atomic_write_text(ctx.run_dir / "summary.md", f"# Quickstart: {n_tasks} tasks on {params.cluster}\n\n{table}\n")
    detail = df[["sharing", "task", "selector", "status", "workflow", "choice", "cost_gb_s", "latency_s", "select_s"]]
    print(detail.sort_values(["sharing", "task", "selector"], kind="stable").to_string(
        index=False, float_format=lambda v: f"{v:.4g}"))
    print()
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def _row(selector: str, plan, elapsed: float) -> dict:
    """One task's row: the spec face (status, cost, latency, choice) and what it really deployed
    (``plan.deployment``: instances, GB, reused stages; a baseline may deploy while its spec
    face is infeasible, docs/baselines.md)."""
    d = plan.to_dict()
    dep = plan.deployment
    new_ids = {i.id for i in dep.instances} if dep is not None else set()
    return {"selector": selector, "task": plan.task, "status": plan.status, "workflow": plan.workflow or "",
            "cost_gb_s": plan.cost_gb_s if plan.solved else float("nan"),
            "latency_s": plan.latency_s if plan.solved else float("nan"),
            "placed": dep is not None,
            "new_mem_gb": dep.mem_gb if dep is not None else 0.0,
            "new_instances": len(new_ids),
            "reused_stages": sum(1 for st in dep.stages if set(st.instance_ids) - new_ids) if dep else 0,
            "choice": _choice(d.get("stages", [])), "select_s": elapsed, "reason": plan.reason or ""}


def _choice(stages: list[dict]) -> str:
    return " > ".join(f"{s['model']}@tp{s['tp']}pp{s['pp']}" + (" (reuse)" if s["reuse"] else f" x{s['replicas']}")
                      for s in stages)


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """One row per sharing mode and selector: tasks placed (deployed), tasks whose plan meets the
    spec, total cost and mean latency of those, instances and GB deployed, time."""
    df = (df if "sharing" in df else df.assign(sharing="memory")).assign(
        spec_ok=lambda d: d["status"].isin(["optimal", "feasible"]).astype(int))
    out = df.groupby(["sharing", "selector"], sort=False).agg(
        placed=("placed", "sum"), spec_ok=("spec_ok", "sum"), tasks=("task", "size"),
        total_cost_gb_s=("cost_gb_s", "sum"), mean_latency_s=("latency_s", "mean"),
        instances=("new_instances", "sum"), reused_stages=("reused_stages", "sum"), new_gb=("new_mem_gb", "sum"),
        select_s_total=("select_s", "sum")).reset_index()
    return out.astype({"placed": int, "spec_ok": int})


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False
