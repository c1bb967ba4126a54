"""Selection time and gap as the problem grows: workflow depth and catalog size.

Problems come from ``selector.synthetic.synthetic_problem``: one workflow of ``depth`` stages
over the 11 real models (``depth`` axis); three workflows of ``depth``, ``depth - 2`` and
``depth - 4`` stages (at least 1; 7/5/3 at depth 7) over the same models (``multi`` axis, depth
= the deepest); and a ``catalog_depth``-stage workflow over catalogs of ``n_models`` real +
interpolated models (``catalog`` axis). Each cell runs in every ``sharing`` mode of spec section
9. Every solver runs with the same cap (``time_limit_s``, default 60 s); a solver that hits it
reports status ``feasible`` (or ``unknown``) and its best answer; ``exhaustive`` is skipped on
spaces above ``max_exhaustive_space`` (status ``skipped``). The gap is measured against the
proved optimum (an exact solver with status ``optimal``) or, when none proved it, the best cost
any solver found (``reference`` column).

Rows: ``axis, depth, n_models, seed, sharing, variant_space, solver, status, cost_gb_s,
elapsed_s, capped, ref_cost_gb_s, reference, gap_pct``. Cells are per (axis, size, seed,
sharing), run by ``experiments.executor`` (local processes or Ray), so a run resumes. Outputs: ``scaling.parquet``, ``summary.md`` and PNGs (time and gap
vs depth, vs the deepest of three workflows and vs catalog size; per sharing mode), also copied
to ``results/selector_scaling/`` when ``publish`` is set.
"""
from __future__ import annotations

import math
import shutil
from typing import Annotated, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from experiments.executor import Cell, run_cells

EXACT = ("milp", "milp-pulp", "exhaustive")


MAX_DEPTH = 32


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # workflow depths stop at MAX_DEPTH stages: the variant space grows as options^depth (issue 28:
    # depth 1000 overflowed the space's size)
    depths: list[Annotated[int, Field(ge=1, le=MAX_DEPTH)]] = Field(default_factory=lambda: [1, 2, 3, 4, 5, 6, 7])
    multi_depths: list[Annotated[int, Field(ge=1, le=MAX_DEPTH)]] = Field(default_factory=list)   # deepest of three workflows (d, d-2, d-4)
    sharing: list[Literal["memory", "compute"]] = Field(default_factory=lambda: ["memory"])
    max_exhaustive_space: float | None = Field(default=None, gt=0)   # skip exhaustive above this
    catalog_sizes: list[Annotated[int, Field(ge=2, le=1000)]] = Field(default_factory=lambda: [11, 25, 50, 125])
    catalog_depth: int = Field(default=3, ge=1, le=MAX_DEPTH)
    seeds: list[int] = Field(default_factory=lambda: [0])
    solvers: NameList = Field(default_factory=lambda: ["exhaustive", "flowmaker", "flowmaker-plus", "milp",
                                                        "milp-pulp", "bayesian"])
    time_limit_s: float = Field(default=60.0, gt=0)
    bayesian_trials: int = Field(default=200, ge=1)
    publish: bool = True      # copy the PNGs and summary.md to results/<experiment>/


def _cells(params: Params) -> list[tuple[str, int, int, int, str]]:
    out = []
    for mode in params.sharing:
        out += [("depth", d, 11, s, mode) for d in params.depths for s in params.seeds]
        out += [("multi", d, 11, s, mode) for d in params.multi_depths for s in params.seeds]
        out += [("catalog", params.catalog_depth, m, s, mode) for m in params.catalog_sizes for s in params.seeds]
    return out


def multi_depths(depth: int) -> tuple[int, int, int]:
    """The ``multi`` axis's three workflows: ``depth``, ``depth - 2``, ``depth - 4`` stages (at least 1)."""
    return depth, max(1, depth - 2), max(1, depth - 4)


def cell_problem(axis: str, depth: int, n_models: int, seed: int, sharing: str = "memory"):
    from selector.problem import parse_problem
    from selector.synthetic import synthetic_problem

    depths = multi_depths(depth) if axis == "multi" else None
    d = synthetic_problem(n_stages=depth, n_models=n_models, seed=seed, depths=depths).to_dict()
    d["cluster"]["sharing"] = sharing
    return parse_problem(d)


def solve_cell(axis: str, depth: int, n_models: int, seed: int, params: Params,
               sharing: str = "memory") -> pd.DataFrame:
    from selector.index import compile_problem
    from solvers.registry import get_solver

    problem = cell_problem(axis, depth, n_models, seed, sharing)
    space = compile_problem(problem).variant_space
    rows = []
    for name in params.solvers:
        base = {"axis": axis, "depth": depth, "n_models": n_models, "seed": seed, "sharing": sharing,
                "variant_space": float(space), "solver": name}
        if name == "exhaustive" and params.max_exhaustive_space is not None and space > params.max_exhaustive_space:
            rows.append({**base, "status": "skipped", "cost_gb_s": math.nan, "elapsed_s": math.nan, "capped": False})
            continue
        solver = get_solver(name, n_trials=params.bayesian_trials) if name == "bayesian" else get_solver(name)
        plan = solver.select(problem, time_limit_s=params.time_limit_s)
        rows.append({**base, "status": plan.status,
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
    if ref > 0:
        df["gap_pct"] = 100.0 * (df["cost_gb_s"] - ref) / ref
    else:       # ref 0: no gap for a 0-cost answer, infinite otherwise; no reference (infeasible): NaN
        df["gap_pct"] = df["cost_gb_s"].map(lambda c: 0.0 if c == 0 else math.inf) if ref == 0 else math.nan
    return df


def plot(df: pd.DataFrame, out_dir, time_limit_s: float) -> list:
    """Per axis, a time and a gap figure with one panel per sharing mode; each solver keeps one
    look everywhere (``_plotstyle``). Gap panels: a symmetric-log axis (0 and 0.5% apart), points
    of different solvers moved a little sideways so equal ones stay visible, and the solvers at
    the optimum everywhere named in the panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    paths = []
    df = df if "sharing" in df else df.assign(sharing="memory")
    modes = list(dict.fromkeys(df["sharing"]))
    for axis, x, label in (("depth", "depth", "workflow depth (stages), 11 models"),
                           ("multi", "depth", "deepest of three workflows (d, d-2, d-4 stages), 11 models"),
                           ("catalog", "n_models", "catalog size (models), 3-stage workflow")):
        sub = df[df["axis"] == axis]
        if sub.empty:
            continue
        solvers = list(dict.fromkeys(sub["solver"]))
        for metric in ("elapsed_s", "gap_pct"):
            fig, axes = plt.subplots(1, len(modes), figsize=(5.6 * len(modes), 4.6), squeeze=False, sharey=True)
            for ax, mode in zip(axes[0], modes):
                draw_panel(ax, sub[sub["sharing"] == mode], solvers, x, metric, axis, time_limit_s)
                ax.set_title(f"{mode} sharing")
                ax.set_xlabel(label)
            axes[0][0].set_ylabel("selection time per problem (wall s, log)" if metric == "elapsed_s"
                                  else "gap to the optimum's cost (%, symlog)")
            handles, labels = axes[0][0].get_legend_handles_labels()
            fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(labels)),
                       fontsize=8, frameon=False)
            fig.suptitle(("Mean selection time" if metric == "elapsed_s" else "Mean gap to the proved optimum")
                         + f" vs {axis} (each solver capped at {time_limit_s:g} s)", fontsize=10)
            fig.tight_layout()
            path = out_dir / f"{'time' if metric == 'elapsed_s' else 'gap'}_vs_{axis}.png"
            fig.savefig(path, dpi=120, bbox_inches="tight")
            plt.close(fig)
            paths.append(path)
    return paths


def draw_panel(ax, sub: pd.DataFrame, solvers: list, x: str, metric: str, axis: str, time_limit_s: float,
               style_for=None, dodge=None) -> None:
    """One panel: mean ``metric`` (``elapsed_s`` or ``gap_pct``) of each solver against ``x`` for
    the rows ``sub`` of one axis and sharing mode (the time panel draws the cap, dashed)."""
    if style_for is None or dodge is None:
        from experiments.kinds._plotstyle import dodge, style_for
    log_x = axis == "catalog"
    at_zero = []
    for i, name in enumerate(solvers):
        g = sub[sub["solver"] == name]
        m = g.groupby(x)[metric].mean().dropna()
        if m.empty:
            continue
        if metric == "gap_pct" and (m.abs() < 1e-9).all():
            at_zero.append(name)
        xs = dodge(m.index.to_numpy(dtype=float), i, len(solvers), log=log_x, spread=0.12 if log_x else 0.3)
        ax.plot(xs, m.values, label=name, **style_for(name, i))
    if metric == "elapsed_s":
        ax.axhline(time_limit_s, color="black", ls="--", lw=1, label=f"cap {time_limit_s:g} s")
        ax.set_yscale("log")
    else:
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(bottom=-0.5)
        if at_zero:
            ax.text(0.02, 0.97, "at the optimum everywhere:\n" + ", ".join(at_zero), transform=ax.transAxes,
                    va="top", fontsize=7.5, bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
    if log_x:
        ax.set_xscale("log")
    ticks = sorted(sub[x].unique())
    ax.set_xticks(ticks, [str(v) for v in ticks])
    ax.grid(alpha=0.3)


#: the columns of summary.md (also in the README, "Output columns")
COLUMNS = """\
- `axis`: `depth` (one workflow of `depth` stages, 11 models), `multi` (three workflows, the
  deepest of `depth` stages) or `catalog` (`n_models` models); `sharing`: spec section 9's mode.
- `variant_space`: variants of the problem (workflows x per-stage options).
- `<solver>_s`: mean wall seconds per selection over the seeds (capped at the time limit).
- `<solver>_gap_pct`: mean `100 (cost_gb_s - reference) / reference` (%), the reference being an
  exact solver's proved optimum, else the best cost any solver found; `inf` when the reference
  costs 0 and the answer does not; `nan` when the solver gave no answer (or was skipped).
"""


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    df = df if "sharing" in df else df.assign(sharing="memory")
    keys = ["axis", "depth", "n_models", "sharing"]
    t = df.pivot_table(index=keys, columns="solver", values="elapsed_s", aggfunc="mean", sort=False)
    t.columns = [f"{c}_s" for c in t.columns]
    g = df.pivot_table(index=keys, columns="solver", values="gap_pct", aggfunc="mean", sort=False)
    g.columns = [f"{c}_gap_pct" for c in g.columns]
    space = df.groupby(keys, sort=False)["variant_space"].first()
    return pd.concat([space, t, g], axis=1).reset_index()


def run(params: Params, ctx: RunContext) -> None:
    from solvers.registry import names

    for s in params.solvers:
        if s not in names():
            raise UserError(f"field 'params.solvers': unknown solver '{s}'; known: {', '.join(names())}")
    cells = [Cell(f"{axis}-d{depth}-m{n_models}-s{seed}" + ("" if mode == "memory" else f"-{mode}"), solve_cell,
                  (axis, depth, n_models, seed, params, mode)) for axis, depth, n_models, seed, mode in _cells(params)]
    df = pd.concat(run_cells(ctx, cells, desc="selector scaling"), ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "scaling.parquet", df)
    table = summary_table(df)
    try:
        text = table.to_markdown(index=False, floatfmt=".4g")
    except ImportError:
        text = table.to_string(index=False)
    atomic_write_text(ctx.run_dir / "summary.md",
                      f"# Selector scaling (cap {params.time_limit_s:g} s per solver)\n\n"
                      f"Mean selection time (s) and gap (%) per problem size.\n\n{text}\n\n"
                      f"## Columns\n\n{COLUMNS}")
    paths = plot(df, ctx.run_dir, params.time_limit_s)
    if params.publish:
        for p in [*paths, ctx.run_dir / "summary.md", ctx.run_dir / "scaling.parquet"]:
            shutil.copy(p, ctx.run_dir.parent / p.name)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
