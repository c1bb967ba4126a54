"""Selection time and gap as the problem grows: workflow depth and catalog size.

Problems come from ``selector.synthetic.synthetic_problem``: one workflow of ``depth`` stages
over the 11 real models (depth axis), and a ``catalog_depth``-stage workflow over catalogs of
``n_models`` real + interpolated models (catalog axis). Every solver runs with the same cap
(``time_limit_s``, default 60 s); a solver that hits it reports status ``feasible`` and its
best answer. The gap is measured against the proved optimum (an exact solver with status
``optimal``) or, when none proved it, the best cost any solver found (``reference`` column).

Rows: ``axis, depth, n_models, seed, variant_space, solver, status, cost_gb_s, elapsed_s,
capped, ref_cost_gb_s, reference, gap_pct``. Cells are per (axis, size, seed), so a run
resumes. Outputs: ``scaling.parquet``, ``summary.md`` and four PNGs (time and gap vs depth and
vs catalog size), also copied to ``results/selector_scaling/`` when ``publish`` is set.
"""
from __future__ import annotations

import math
import shutil

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, UserError, atomic_write_parquet, atomic_write_text

EXACT = ("milp", "milp-pulp", "exhaustive")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    depths: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5, 6, 7])
    catalog_sizes: list[int] = Field(default_factory=lambda: [11, 25, 50, 125])
    catalog_depth: int = Field(default=3, ge=1)
    seeds: list[int] = Field(default_factory=lambda: [0])
    solvers: list[str] = Field(default_factory=lambda: ["exhaustive", "flowmaker", "flowmaker-plus", "milp",
                                                        "milp-pulp", "bayesian"])
    time_limit_s: float = Field(default=60.0, gt=0)
    bayesian_trials: int = Field(default=200, ge=1)
    publish: bool = True      # copy the PNGs and summary.md to results/<experiment>/


def _cells(params: Params) -> list[tuple[str, int, int, int]]:
    out = [("depth", d, 11, s) for d in params.depths for s in params.seeds]
    out += [("catalog", params.catalog_depth, m, s) for m in params.catalog_sizes for s in params.seeds]
    return out


def solve_cell(axis: str, depth: int, n_models: int, seed: int, params: Params) -> pd.DataFrame:
    from selector.index import compile_problem
    from selector.synthetic import synthetic_problem
    from solvers.registry import get_solver

    problem = synthetic_problem(n_stages=depth, n_models=n_models, seed=seed)
    space = compile_problem(problem).variant_space
    rows = []
    for name in params.solvers:
        solver = get_solver(name, n_trials=params.bayesian_trials) if name == "bayesian" else get_solver(name)
        plan = solver.select(problem, time_limit_s=params.time_limit_s)
        rows.append({"axis": axis, "depth": depth, "n_models": n_models, "seed": seed, "variant_space": float(space),
                     "solver": name, "status": plan.status,
                     "cost_gb_s": plan.cost_gb_s if plan.solved else math.nan, "elapsed_s": plan.elapsed_s,
                     "capped": plan.elapsed_s >= 0.98 * params.time_limit_s})
    df = pd.DataFrame(rows)
    proved = df[df["solver"].isin(EXACT) & (df["status"] == "optimal")]
    if len(proved):
        ref, how = float(proved["cost_gb_s"].iloc[0]), "proved"
    else:
        ref, how = float(df["cost_gb_s"].min()), "best-known"
    df["ref_cost_gb_s"] = ref
    df["reference"] = how
    df["gap_pct"] = 100.0 * (df["cost_gb_s"] - ref) / ref if ref > 0 else 0.0
    return df


def plot(df: pd.DataFrame, out_dir, time_limit_s: float) -> list:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for axis, x, label in (("depth", "depth", "workflow depth (stages), 11 models"),
                           ("catalog", "n_models", "catalog size (models)")):
        sub = df[df["axis"] == axis]
        if sub.empty:
            continue
        for metric, ylabel, log in (("elapsed_s", "selection time (s)", True), ("gap_pct", "gap to optimum (%)", False)):
            fig, ax = plt.subplots(figsize=(6, 4))
            for name, g in sub.groupby("solver", sort=False):
                m = g.groupby(x)[metric].mean()
                ax.plot(m.index, m.values, marker="o", label=name)
            if metric == "elapsed_s":
                ax.axhline(time_limit_s, color="grey", ls="--", lw=1, label=f"cap {time_limit_s:g} s")
            ax.set_xlabel(label)
            ax.set_ylabel(ylabel)
            if log:
                ax.set_yscale("log")
            if axis == "catalog":
                ax.set_xscale("log")
                ax.set_xticks(sorted(sub[x].unique()), [str(v) for v in sorted(sub[x].unique())])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"{'time' if metric == 'elapsed_s' else 'gap'}_vs_{axis}.png"
            fig.savefig(path, dpi=120)
            plt.close(fig)
            paths.append(path)
    return paths


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    t = df.pivot_table(index=["axis", "depth", "n_models"], columns="solver", values="elapsed_s", aggfunc="mean",
                       sort=False)
    t.columns = [f"{c}_s" for c in t.columns]
    g = df.pivot_table(index=["axis", "depth", "n_models"], columns="solver", values="gap_pct", aggfunc="mean",
                       sort=False)
    g.columns = [f"{c}_gap_pct" for c in g.columns]
    space = df.groupby(["axis", "depth", "n_models"], sort=False)["variant_space"].first()
    return pd.concat([space, t, g], axis=1).reset_index()


def run(params: Params, ctx: RunContext) -> None:
    from solvers.registry import names

    for s in params.solvers:
        if s not in names():
            raise UserError(f"field 'params.solvers': unknown solver '{s}'; known: {', '.join(names())}")
    frames = []
    cells = _cells(params)
    for axis, depth, n_models, seed in tqdm(cells, disable=not ctx.progress, desc="selector scaling", unit="cell"):
        cell = ctx.cell_path(f"{axis}-d{depth}-m{n_models}-s{seed}")
        if not cell.exists():
            atomic_write_parquet(cell, solve_cell(axis, depth, n_models, seed, params))
        frames.append(pd.read_parquet(cell))
    df = pd.concat(frames, ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "scaling.parquet", df)
    table = summary_table(df)
    try:
        text = table.to_markdown(index=False, floatfmt=".4g")
    except ImportError:
        text = table.to_string(index=False)
    atomic_write_text(ctx.run_dir / "summary.md",
                      f"# Selector scaling (cap {params.time_limit_s:g} s per solver)\n\n"
                      f"Mean selection time (s) and gap (%) per problem size.\n\n{text}\n")
    paths = plot(df, ctx.run_dir, params.time_limit_s)
    if params.publish:
        for p in [*paths, ctx.run_dir / "summary.md", ctx.run_dir / "scaling.parquet"]:
            shutil.copy(p, ctx.run_dir.parent / p.name)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
