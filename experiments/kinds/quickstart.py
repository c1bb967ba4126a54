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

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from selector.deploy import deploy_task, with_cluster
from selector.errors import ProblemError
from selector.clusterfile import load_cluster_file
from selector.resolve import load_catalog, resolve_task
from selector.taskspec import TaskList


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList
    cluster: str = "a6000x8"
    selectors: NameList | None = None          # default: every registered selector
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
    for mode, (_, problems) in by_mode.items():
        for p in problems:
            tag = "" if mode == "memory" else f"-{mode}"
            atomic_write_text(ctx.file_path("problems", f"{p.task.name}{tag}.json"), json.dumps(p.to_dict()))
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
            atomic_write_text(ctx.file_path("plans", f"{name}{tag}.json"),
                              json.dumps({"plans": plans, "cluster": cluster.model_dump(mode="json")}, indent=1))
    bar.close()
    df = pd.DataFrame(rows)
    atomic_write_parquet(ctx.run_dir / "tasks.parquet", df)
    summary = summarise(df)
    atomic_write_parquet(ctx.run_dir / "summary.parquet", summary)
    atomic_write_text(ctx.run_dir / "summary.md", summary_md(summary, df, n_tasks, params.cluster))
    print(format_tasks(df))
    print()
    print(format_summary(summary))


#: the columns of the quickstart's tables (also in the README, "Output columns")
GLOSSARY = """\
- `status`: the plan's spec status (`optimal` proved, `feasible` found, `infeasible` with a reason,
  `unknown` when the time limit came first).
- `choice`: one entry per stage, `model@tp{T}pp{P} x{R}` = R new replicas of the model with T-way
  tensor and P-way pipeline parallelism, or `(reuse)` = served by an instance already deployed.
- `cost_gb_s`: the selection objective (spec section 4): new GPU memory (GB) x end-to-end
  latency of one request (s), in GB*s; 0 when every stage reuses a deployed instance. Only a
  plan that meets the SLOs has one.
- `usd_per_hour`: US dollars per hour of the GPUs the plan newly reserves (spec section 10): a
  whole GPU per shard at its type's price (configs/prices.yaml, on-demand); `-` without prices.
- `latency_s`: end-to-end latency of one request through the workflow at batch 1 (s).
- `select_s`: wall seconds to choose the plan and apply it to the cluster.
- `placed`: tasks whose plan deployed something (a baseline may deploy by its own rule while
  its plan misses an SLO); `spec_ok`: tasks whose plan meets the accuracy and latency SLOs.
- `total_cost_gb_s`, `total_usd_per_hour`, `mean_latency_s`: over the `spec_ok` tasks only; a `*`
  marks a row where not every task met the SLOs, so its total covers fewer tasks and looks
  cheaper than it is.
- `instances`, `reused_stages`, `new_gb`: what the selector deployed over all tasks.
"""


def _note(row) -> str:
    if row["status"] in ("optimal", "feasible"):
        return ""
    why = " ".join(str(row["reason"]).split())
    why = why if len(why) <= 90 else why[:87] + "..."
    return f"deployed anyway: {why}" if row["placed"] else why


def format_tasks(df: pd.DataFrame) -> str:
    """Per task and selector, one block per sharing mode; infeasible rows show their reason."""
    out = []
    for mode, g in df.groupby("sharing", sort=False):
        t = g.sort_values(["task", "selector"], kind="stable").assign(
            cost_gb_s=lambda d: d["cost_gb_s"].map(lambda v: "-" if pd.isna(v) else f"{v:.4g}"),
            usd_per_hour=lambda d: d["usd_per_hour"].map(lambda v: "-" if pd.isna(v) else f"{v:.4g}"),
            latency_s=lambda d: d["latency_s"].map(lambda v: "-" if pd.isna(v) else f"{v:.4g}"),
            select_s=lambda d: d["select_s"].map(lambda v: f"{v:.3g}"),
            note=lambda d: d.apply(_note, axis=1))
        out.append(f"sharing: {mode}")
        cols = ["task", "selector", "status", "workflow", "choice", "cost_gb_s", "usd_per_hour", "latency_s",
                "select_s", "note"]
        text = ["task", "selector", "status", "workflow", "choice", "note"]
        width = {c: max([len(c), *map(len, t[c].astype(str))]) for c in text}
        out.append(t[cols].to_string(index=False, justify="left",
                                     formatters={c: (lambda v, w=width[c]: str(v).ljust(w)) for c in text}).rstrip())
    return "\n".join(line.rstrip() for line in "\n".join(out).splitlines())


def _marked(summary: pd.DataFrame) -> pd.DataFrame:
    s = summary.copy()
    short = s["spec_ok"] < s["tasks"]
    s["total_cost_gb_s"] = [f"{v:.4g}{'*' if m else ''}" for v, m in zip(s["total_cost_gb_s"], short)]
    s["total_usd_per_hour"] = [f"{v:.4g}{'*' if m else ''}" if pd.notna(v) else "-"
                               for v, m in zip(s["total_usd_per_hour"], short)]
    s["mean_latency_s"] = [f"{v:.4g}" if pd.notna(v) else "-" for v in s["mean_latency_s"]]
    return s


def format_summary(summary: pd.DataFrame) -> str:
    text = _marked(summary).to_string(index=False, float_format=lambda v: f"{v:.4g}")
    if (summary["spec_ok"] < summary["tasks"]).any():
        text += ("\n* not every task met its SLOs: the total covers the spec_ok tasks only "
                 "(columns: the glossary of the run's summary.md)")
    return text


def summary_md(summary: pd.DataFrame, df: pd.DataFrame, n_tasks: int, cluster: str) -> str:
    m = _marked(summary)
    table = m.to_markdown(index=False, floatfmt=".4g") if _has_tabulate() else m.to_string(index=False)
    bad = df[~df["status"].isin(["optimal", "feasible"])]
    reasons = "".join(f"- {r.sharing} / {r.selector} / {r.task}: {r.status}"
                      f"{' (deployed anyway)' if r.placed else ''}: {r.reason}\n" for r in bad.itertuples())
    return (f"# Quickstart: {n_tasks} tasks on {cluster}\n\n{table}\n\n"
            + ("\\* not every task met its SLOs: the total covers the `spec_ok` tasks only.\n\n"
               if (summary["spec_ok"] < summary["tasks"]).any() else "")
            + f"## Columns\n\n{GLOSSARY}"
            + (f"\n## Tasks without a plan that meets the SLOs\n\n{reasons}" if reasons else ""))


def _row(selector: str, plan, elapsed: float) -> dict:
    """One task's row: the spec face (status, cost, latency, choice) and what it really deployed
    (``plan.deployment``: instances, GB, reused stages; a baseline may deploy while its spec
    face is infeasible, docs/baselines.md)."""
    d = plan.to_dict()
    dep = plan.deployment
    new_ids = {i.id for i in dep.instances} if dep is not None else set()
    return {"selector": selector, "task": plan.task, "status": plan.status, "workflow": plan.workflow or "",
            "cost_gb_s": plan.cost_gb_s if plan.solved else float("nan"),
            "usd_per_hour": plan.usd_per_hour if plan.solved and plan.usd_per_hour is not None else float("nan"),
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
    spec, total cost and mean latency of those (``all_spec_ok`` False: the totals cover fewer
    tasks), instances and GB deployed, time."""
    df = (df if "sharing" in df else df.assign(sharing="memory")).assign(
        spec_ok=lambda d: d["status"].isin(["optimal", "feasible"]).astype(int))
    out = df.groupby(["sharing", "selector"], sort=False).agg(
        placed=("placed", "sum"), spec_ok=("spec_ok", "sum"), tasks=("task", "size"),
        total_cost_gb_s=("cost_gb_s", "sum"), total_usd_per_hour=("usd_per_hour", lambda v: v.sum(min_count=1)),
        mean_latency_s=("latency_s", "mean"),
        instances=("new_instances", "sum"), reused_stages=("reused_stages", "sum"), new_gb=("new_mem_gb", "sum"),
        select_s_total=("select_s", "sum")).reset_index()
    out = out.astype({"placed": int, "spec_ok": int})
    # the totals cover the spec_ok tasks only: False marks a row not comparable with a complete one
    out["all_spec_ok"] = out["spec_ok"] == out["tasks"]
    return out


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False
