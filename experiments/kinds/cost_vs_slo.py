"""The cost of each selector's plan as the latency SLO tightens.

Each task is resolved once on the cluster (catalog, analytic profile) and solved by ``milp``
under its own SLOs; ``L0`` is the latency of that optimum. The cheapest plan is usually also a
fast one (cost = memory x latency), so the SLO binds the optimum only near ``L0``: the latency SLO
takes ``points`` values spaced geometrically from the task's own SLO down to ``tightest x L0``,
and at each every selector chooses a plan on the empty cluster. ``milp`` proves the optimum, so its curve is the
cheapest any plan can be at that SLO; a heuristic's curve on or above it shows what it gives up,
a baseline's shows the cost of its fixed rules. A missing point: no plan of that selector meets
the SLO (the reason is in the table).

Rows (``cost_vs_slo.parquet``): ``task, sharing, scale (SLO / L0), latency_slo_s, ref_latency_s, selector, status,
cost_gb_s, usd_per_hour, latency_s, new_mem_gb, workflow, choice, reason``; ``cost_gb_s`` is the selection
objective: new GPU memory (GB) x end-to-end latency of one request (s); ``usd_per_hour`` the
dollars per hour of the GPUs the plan reserves (spec section 10; NaN without prices). Outputs also
``summary.md`` (cost per selector and SLO, the optimum's first) and ``cost_vs_slo.png``, copied to
``results/<experiment>/`` when ``publish`` is set. One cell per task (``experiments.executor``:
local processes or Ray; resumable with ``--run-id``).
"""
from __future__ import annotations

import math
import shutil
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from selector.taskspec import TaskList
from experiments.executor import Cell, run_cells

DEFAULT_SELECTORS = ["milp", "flowmaker", "flowmaker-plus", "bayesian", "langchain", "routellm", "murakkab"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList = Field(default_factory=lambda: ["rag-qa", "code-review"])   # names or files
    cluster: str = "a6000x8"
    sharing: Literal["memory", "compute"] | None = None          # default: the cluster file's
    selectors: NameList = Field(default_factory=lambda: list(DEFAULT_SELECTORS))
    points: int = Field(default=16, ge=2, le=200)          # SLO values per task
    tightest: float = Field(default=0.6, gt=0, lt=1)        # the last SLO: this x the optimum's latency L0
    time_limit_s: float = Field(default=30.0, gt=0)
    publish: bool = True


def run(params: Params, ctx: RunContext) -> None:
    from selector.errors import ProblemError
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from solvers.registry import names

    for s in params.selectors:
        if s not in names():
            raise UserError(f"field 'params.selectors': unknown solver '{s}'; known: {', '.join(names())}")
    try:
        catalog = load_catalog()
        cluster, gpu = load_cluster_file(params.cluster, sharing=params.sharing)
        problems = [resolve_task(t, catalog=catalog, cluster=cluster, gpu=gpu) for t in params.tasks]
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    cells = [Cell(f"{k:03d}-{p.task.name}", task_frame, (p, params), label=p.task.name)   # cell_path makes it a
             for k, p in enumerate(problems)]                                              # safe file name
    df = pd.concat(run_cells(ctx, cells, desc="cost vs SLO"), ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "cost_vs_slo.parquet", df)
    text = summary_md(df, params)
    atomic_write_text(ctx.run_dir / "summary.md", text)
    png = plot(df, ctx.run_dir / "cost_vs_slo.png")
    if params.publish:
        dest = ctx.run_dir.parent
        for f in (png, ctx.run_dir / "summary.md", ctx.run_dir / "cost_vs_slo.parquet"):
            shutil.copyfile(f, dest / f.name)
    print(pivot(df).to_string(float_format=lambda v: f"{v:.4g}", na_rep="-"))
    print("\ncost_gb_s: new GPU memory (GB) x end-to-end latency (s); '-': no plan of that selector meets the SLO")


def task_frame(p, params: Params) -> pd.DataFrame:
    """One task's cell: ``milp``'s optimum under its own SLOs, then every selector at each SLO."""
    from experiments.kinds.quickstart import _choice
    from selector.deploy import deploy_task
    from solvers.registry import get_solver
    ref = get_solver("milp").select(p, time_limit_s=params.time_limit_s)
    if not ref.solved:
        raise UserError(f"task {p.task.name}: no plan meets its own SLOs ({ref.reason}); nothing to tighten")
    rows = []
    for slo in np.geomspace(p.task.latency_slo_s, params.tightest * ref.latency_s, params.points):
        slo, scale = float(slo), float(slo / ref.latency_s)
        q = p.model_copy(update={"task": p.task.model_copy(update={"latency_slo_s": slo})})
        for name in params.selectors:
            plan, _ = deploy_task(q, get_solver(name), time_limit_s=params.time_limit_s)
            d = plan.to_dict()
            rows.append({"task": p.task.name, "sharing": p.cluster.sharing, "scale": scale, "latency_slo_s": slo,
                         "ref_latency_s": ref.latency_s,
                         "selector": name, "status": plan.status,
                         "cost_gb_s": plan.cost_gb_s if plan.solved else math.nan,
                         "usd_per_hour": plan.usd_per_hour if plan.solved and plan.usd_per_hour is not None
                         else math.nan,
                         "latency_s": plan.latency_s if plan.solved else math.nan,
                         "new_mem_gb": plan.new_mem_gb if plan.solved else math.nan,
                         "workflow": plan.workflow or "", "choice": _choice(d.get("stages", [])),
                         "reason": plan.reason or ""})
    return pd.DataFrame(rows)


def pivot(df: pd.DataFrame) -> pd.DataFrame:
    """Cost per (task, SLO) and selector: tasks and SLOs in the order they ran (loosest first),
    selectors too."""
    order = list(dict.fromkeys(df["selector"]))
    t = df.set_index(["task", "latency_slo_s", "selector"])["cost_gb_s"].unstack("selector")
    rows = list(dict.fromkeys(zip(df["task"], df["latency_slo_s"])))
    return t.reindex(index=pd.MultiIndex.from_tuples(rows, names=["task", "latency_slo_s"]),
                     columns=order).rename_axis(columns=None)


def summary_md(df: pd.DataFrame, params: Params) -> str:
    t = pivot(df).reset_index()
    table = t.to_markdown(index=False, floatfmt=".4g") if _has_tabulate() else t.to_string(index=False)
    table = table.replace(" nan ", " -   ")
    worst = []
    for name, g in df.groupby("selector", sort=False):
        opt = df[(df["selector"] == "milp")].set_index(["task", "latency_slo_s"])["cost_gb_s"]
        mine = g.set_index(["task", "latency_slo_s"])["cost_gb_s"]
        both = pd.concat([opt, mine], axis=1, keys=["opt", "mine"]).dropna()
        both = both[both["opt"] > 0]
        gap = float(((both["mine"] - both["opt"]) / both["opt"] * 100).max()) if len(both) else math.nan
        worst.append(f"- `{name}`: a plan at {int(g['status'].isin(['optimal', 'feasible']).sum())} of {len(g)} SLOs"
                     + ("" if "milp" not in set(df["selector"]) or math.isnan(gap) else
                        f"; at most {gap:.3g}% above the optimum where both have one"))
    return (f"# Cost vs latency SLO: {', '.join(params.tasks)} on {params.cluster}\n\n"
            "Each cell: `cost_gb_s` of the selector's plan (new GPU memory in GB x end-to-end latency in s, the "
            "selection objective) when the task's latency SLO is `latency_slo_s`: from the task's own SLO down to "
            f"{params.tightest:g} x the latency of its unconstrained optimum, {params.points} values; `-`: no plan of "
            "that selector meets the SLOs (reasons in cost_vs_slo.parquet). `milp` proves the optimum.\n\n"
            f"{table}\n\n" + "\n".join(worst) + "\n")


def plot(df: pd.DataFrame, path):
    """One panel per task: cost (log) against the latency SLO (log, tightening to the right), one
    look per selector; a legend entry says below which SLO the selector has no plan. Every point is
    at its value; series equal to another show as concentric hollow rings (``tie_marks``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    from experiments.kinds._plotstyle import style_for, tie_marks
    tasks = list(dict.fromkeys(df["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.2 * len(tasks), 6.2), squeeze=False)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for ax, task in zip(axes[0], tasks):
        sub = df[df["task"] == task]
        names = list(dict.fromkeys(sub["selector"]))
        for i, name in enumerate(names):
            g = sub[sub["selector"] == name].sort_values("latency_slo_s", ascending=False)
            ok = g[g["cost_gb_s"].notna()]
            lost = g[g["cost_gb_s"].isna() & (g["latency_slo_s"] < (ok["latency_slo_s"].min() if len(ok) else 0))]
            if ok.empty:
                label = f"{name} (no plan at any SLO)"
            elif len(ok) == len(g):
                label = f"{name} (a plan at every SLO)"
            else:
                label = f"{name} (none below {ok['latency_slo_s'].min():.3g} s)" if len(lost) or len(ok) < len(g) \
                    else name
            look = style_for(name, i, optimum=(name == "milp"))
            ax.plot(g["latency_slo_s"], g["cost_gb_s"], label=label,
                    **(look if name == "milp" else tie_marks(look, i, len(names))))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.invert_xaxis()               # the SLO tightens to the right
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(plain if axis is ax.xaxis else FuncFormatter(lambda v, _: ""))
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_xlabel("latency SLO: end-to-end seconds per request (tighter to the right)")
        ax.set_ylabel("cost of the plan: new GPU GB x latency s (GB*s)")
        ax.set_title(f"{task} on {sub['sharing'].iloc[0]}-shared GPUs")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7.5, title="selector (where its plans stop)", title_fontsize=8, loc="upper center",
                  bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.suptitle("Cost of each selector's plan as the latency SLO tightens (milp, thick: the proved optimum;\n"
                 "every point at its value; equal curves show as concentric rings)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False
