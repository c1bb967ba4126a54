"""Optimality gap of every selector against the proved optimum, over a benchmark suite.

A suite (``configs/benchmarks/*.yaml``) lists frozen problem files (the paper-sized space, the
seven quickstart tasks deployed in sequence; each file carries its own ``cluster.sharing``), and
ranges of seeds for ``selector.synthetic.paper_problem`` and ``selector.generate.random_problem``,
generated in every mode of the suite's ``sharing`` list (spec section 9; ids of compute-mode
copies end in ``-compute``), and (``typed``) seeded random problems and paper variants spread over
three GPU types with prices (spec section 10, ``selector.typed.spread_over_types``) under each
objective of ``objectives`` (ids ``...-typed-usd`` / ``...-typed-gbs``, before any ``-compute``).
``opt_cost_gb_s`` and ``cost_gb_s`` hold the objective's value: GB*s, or dollars per hour on a
``usd_per_hour`` problem (column ``objective``). Per problem, the reference (``exhaustive``) proves the optimum;
every solver then answers and gets a row::

    problem, family, sharing, variant_space, feasible, opt_cost_gb_s, solver, status, cost_gb_s,
    gap_pct, usd_per_hour, match, same_variant, elapsed_s

(``usd_per_hour``: the plan's dollars per hour, spec section 10; NaN where the problem has no prices)

``gap_pct = 100 (cost - opt) / opt`` (NaN when the solver gave no answer on a feasible problem,
or when ``opt = 0`` and the answer costs more); ``match``: the solver's cost is within 1e-6
relative of the optimum (an infeasible problem matches when the solver says infeasible);
``same_variant``: the plan's variant, placement and numbers equal the reference's.
Cells are per problem (``experiments.executor``: local processes or Ray), so an interrupted run
resumes. Outputs: ``gap.parquet``,
``summary.parquet`` and ``summary.md`` (also by family and by sharing mode), copied to
``results/<experiment>/`` when ``publish`` is set (the notebook reads that copy on a fresh clone).

``python -m experiments.kinds.selector_gap --freeze SUITE.yaml [MODE ...]`` rewrites the frozen
problems of the given sharing modes (default: every mode of the suite's ``quickstart.sharing``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from experiments.executor import Cell, run_cells
from flowmaker.entry import show_progress
from flowmaker.inputs import InputError
from flowmaker.names import check_distinct
from selector.plan import Plan
from selector.problem import Problem, load_problem

DEFAULT_SOLVERS = ["flowmaker", "flowmaker-plus", "milp", "milp-pulp", "bayesian"]
REL = 1e-6


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: str = "configs/benchmarks/selector_gap.yaml"
    solvers: NameList = Field(default_factory=lambda: list(DEFAULT_SOLVERS))
    reference: str = "exhaustive"
    time_limit_s: float = Field(default=60.0, gt=0)
    bayesian_trials: int = Field(default=200, ge=1)
    max_random: int | None = Field(default=None, ge=0)   # first N random problems only
    publish: bool = False     # copy gap.parquet, summary.parquet and summary.md to results/<experiment>/


#: problems a suite's seeded family may hold (the shipped suite has 300): more is a run of days
MAX_SEEDS = 10_000


class RandomSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    start: int = Field(0, ge=0)
    stop: int = Field(ge=0)

    @model_validator(mode="after")
    def _bounded(self) -> RandomSpec:
        if self.stop - self.start > MAX_SEEDS:
            raise ValueError(f"stop - start must be at most {MAX_SEEDS:,} problems (got {self.stop - self.start:,})")
        return self


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    problems: list[str] = Field(default_factory=list)     # frozen problem files, relative to the suite
    random: RandomSpec | None = None
    paper_variants: RandomSpec | None = None              # seeds of selector.synthetic.paper_problem
    sharing: list[Literal["memory", "compute"]] = Field(default_factory=lambda: ["memory"])   # generated members
    quickstart: dict | None = None                        # how the frozen quickstart files were made
    typed: RandomSpec | None = None                       # seeds of typed random problems and paper variants
    objectives: list[Literal["gb_s", "usd_per_hour"]] = Field(default_factory=lambda: ["usd_per_hour", "gb_s"])


def in_mode(problem: Problem, sharing: str, suffix: bool = True) -> tuple[str, Problem]:
    """``(id, problem)`` of ``problem`` under ``cluster.sharing: sharing``; compute-mode ids end in ``-compute``."""
    from selector.problem import parse_problem
    pid = problem.task.name + (f"-{sharing}" if suffix and sharing != "memory" else "")
    if problem.cluster.sharing == sharing:
        return pid, problem
    d = problem.to_dict()
    d["cluster"]["sharing"] = sharing
    return pid, parse_problem(d)


def load_suite(path: str | Path, *, max_random: int | None = None) -> list[tuple[str, str, Problem]]:
    """``(problem id, family, Problem)`` for every member of the suite, in order."""
    from selector.generate import random_problem

    from pydantic import ValidationError

    from profiler.catalog import config_path
    from selector.errors import ProblemError
    from selector.yamlio import load_mapping
    path = config_path(path, "benchmarks", "benchmark suite")   # a name, a path, or configs/... as shipped
    try:
        suite = Suite.model_validate(load_mapping(path))
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserError(f"{path}: field '{'.'.join(map(str, err['loc']))}': {err['msg']}") from None
    out = []
    for rel in suite.problems:
        p = load_problem(path.parent / rel)
        out.append((p.task.name, "paper" if "paper" in p.task.name else "quickstart", p))
    for mode in suite.sharing:
        if suite.paper_variants is not None:
            from selector.synthetic import paper_problem
            v = suite.paper_variants
            for s in range(v.start, v.stop):
                pid, p = in_mode(paper_problem(s), mode)
                out.append((pid, "paper", p))
        if suite.random is not None:
            stop = suite.random.stop if max_random is None else min(suite.random.stop, suite.random.start + max_random)
            for s in range(suite.random.start, stop):
                pid, p = in_mode(random_problem(s), mode)
                out.append((pid, "random", p))
        if suite.typed is not None:
            out += _typed_members(suite, mode)
    try:
        check_distinct((pid for pid, _, _ in out), f"{path}: problem names")   # cells are keyed by them
    except InputError as exc:
        raise UserError(str(exc)) from None
    return out


def _typed_members(suite: Suite, mode: str) -> list[tuple[str, str, Problem]]:
    """Spec section 10 members: random problems and paper variants over three priced GPU types."""
    from selector.generate import random_problem
    from selector.synthetic import paper_problem
    from selector.typed import spread_over_types
    out = []
    for s in range(suite.typed.start, suite.typed.stop):
        for objective in suite.objectives:
            tag = "usd" if objective == "usd_per_hour" else "gbs"
            for family, base in (("typed-random", random_problem(s)),) + (
                    (("typed-paper", paper_problem(s)),) if s < 3 else ()):
                typed = spread_over_types(base, seed=s, objective=objective)
                pid, p = in_mode(typed.model_copy(update={"task": typed.task.model_copy(
                    update={"name": f"{typed.task.name}-typed-{tag}"})}), mode)
                out.append((pid, family, p))
    return out


def _solver(name: str, params: Params):
    from solvers.registry import get_solver
    return get_solver(name, n_trials=params.bayesian_trials) if name == "bayesian" else get_solver(name)


def _comparable(plan: Plan) -> dict:
    d = {**plan.to_dict(), "solved": plan.solved}
    return {k: v for k, v in d.items() if k in ("solved", "workflow", "stages", "cost_gb_s", "usd_per_hour", "latency_s",
                                                 "new_mem_gb", "new_gpus", "accuracy")}


def compare(pid: str, family: str, ref: Plan, plan: Plan, solver: str, sharing: str = "memory",
            objective: str = "gb_s") -> dict:
    """One result row (see the module docstring)."""
    feasible = ref.status == "optimal"
    opt = ref.value(objective) if feasible else math.nan
    cost = plan.value(objective) if plan.solved else math.nan
    if not feasible:
        match, gap = not plan.solved, math.nan
    elif not plan.solved:
        match, gap = False, math.nan
    else:
        match = abs(cost - opt) <= REL * max(abs(opt), 1e-12) or cost == opt
        gap = 100.0 * (cost - opt) / opt if opt > 0 else (0.0 if cost == 0 else math.nan)
    return {"problem": pid, "family": family, "sharing": sharing, "objective": objective,
            "variant_space": ref.variant_space,
            "feasible": feasible,
            "opt_cost_gb_s": opt, "solver": solver, "status": plan.status, "cost_gb_s": cost, "gap_pct": gap,
            "usd_per_hour": plan.usd_per_hour if plan.solved and plan.usd_per_hour is not None else math.nan,
            "match": bool(match), "same_variant": _comparable(plan) == _comparable(ref),
            "elapsed_s": plan.elapsed_s}


def solve_problem(pid: str, family: str, problem: Problem, params: Params) -> pd.DataFrame:
    ref = _solver(params.reference, params).select(problem, time_limit_s=params.time_limit_s)
    if ref.status == "feasible":
        raise RuntimeError(f"{pid}: reference {params.reference} did not finish within {params.time_limit_s} s")
    mode, objective = problem.cluster.sharing, problem.objective
    rows = [compare(pid, family, ref, ref, params.reference, mode, objective)]
    for name in params.solvers:
        plan = _solver(name, params).select(problem, time_limit_s=params.time_limit_s)
        rows.append(compare(pid, family, ref, plan, name, mode, objective))
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Per solver: problems, feasible ones, match rate and gap over the feasible ones, time."""
    rows = []
    for name, g in df.groupby("solver", sort=False):
        f = g[g["feasible"]]
        rows.append({"solver": name, "problems": len(g), "feasible": len(f),
                     "answered_pct": 100.0 * (f["status"] != "infeasible").mean() if len(f) else math.nan,
                     "match_pct": 100.0 * f["match"].mean() if len(f) else math.nan,
                     "same_variant_pct": 100.0 * g["same_variant"].mean(),
                     "mean_gap_pct": float(f["gap_pct"].mean()) if len(f) else math.nan,
                     "max_gap_pct": float(f["gap_pct"].max()) if len(f) else math.nan,
                     "infeasible_agree_pct": 100.0 * g[~g["feasible"]]["match"].mean() if (~g["feasible"]).any()
                     else math.nan,
                     "mean_time_s": float(g["elapsed_s"].mean()), "max_time_s": float(g["elapsed_s"].max())})
    return pd.DataFrame(rows)


def baseline_figures(summary: pd.DataFrame) -> dict:
    """The figures the CI regression test compares: per solver, match rate and mean/max gap."""
    out = {}
    for r in summary.to_dict("records"):
        out[r["solver"]] = {k: (None if isinstance(r[k], float) and math.isnan(r[k]) else round(float(r[k]), 6))
                            for k in ("match_pct", "mean_gap_pct", "max_gap_pct", "same_variant_pct", "answered_pct")}
        out[r["solver"]].update(problems=int(r["problems"]), feasible=int(r["feasible"]))
    return out


def _figures(df: pd.DataFrame, **where) -> dict:
    """Baseline figures of a gap table: over all problems, and per sharing mode."""
    df = df if "sharing" in df else df.assign(sharing="memory")
    return {**where, "problems": int(df["problem"].nunique()), "solvers": baseline_figures(summarise(df)),
            "by_sharing": {m: {"problems": int(g["problem"].nunique()), "solvers": baseline_figures(summarise(g))}
                           for m, g in df.groupby("sharing", sort=False)}}


#: the columns of summary.md (also in the README, "Output columns")
COLUMNS = """\
- `problems`: problems of the suite; `feasible`: those the reference (`exhaustive`) proved
  feasible, so they have an optimum.
- `answered_pct`: share of the feasible problems where the solver did not answer `infeasible` (%).
- `match_pct`: share of the feasible problems where the solver's `cost_gb_s` is within 1e-6
  relative of the optimum (%); `same_variant_pct`: share of all problems where its variant,
  placement and numbers equal the reference's (%).
- `mean_gap_pct`, `max_gap_pct`: `100 (cost_gb_s - optimum) / optimum` over the feasible
  problems it answered (%).
- `infeasible_agree_pct`: share of the infeasible problems it also found infeasible (%).
- `mean_time_s`, `max_time_s`: wall seconds per selection.
"""


def markdown(summary: pd.DataFrame, title: str) -> str:
    try:
        table = summary.to_markdown(index=False, floatfmt=".4g")
    except ImportError:
        table = summary.to_string(index=False)
    return f"# {title}\n\n{table}\n"


def run(params: Params, ctx: RunContext) -> None:
    from solvers.registry import names

    for s in [params.reference, *params.solvers]:
        if s not in names():
            raise UserError(f"field 'params.solvers': unknown solver '{s}'; known: {', '.join(names())}")
    members = load_suite(params.suite, max_random=params.max_random)
    cells = [Cell(pid, solve_problem, (pid, family, problem, params), label=pid) for pid, family, problem in members]
    df = pd.concat(run_cells(ctx, cells, desc="selector gap"), ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "gap.parquet", df)
    summary = summarise(df)
    atomic_write_parquet(ctx.run_dir / "summary.parquet", summary)
    by_family = pd.concat([summarise(g).assign(family=fam) for fam, g in df.groupby("family", sort=False)])
    text = markdown(summary, f"Selector optimality gap: {len(members)} problems ({params.suite})")
    text += "\n## By family\n\n" + markdown(by_family, "").lstrip("# \n")
    by_mode = pd.concat([summarise(g).assign(sharing=m) for m, g in df.groupby("sharing", sort=False)])
    text += "\n## By sharing mode (spec section 9)\n\n" + markdown(by_mode, "").lstrip("# \n")
    text += f"\n## Columns\n\n{COLUMNS}"
    atomic_write_text(ctx.run_dir / "summary.md", text)
    if params.publish:
        import shutil
        for name in ("gap.parquet", "summary.parquet", "summary.md"):
            shutil.copyfile(ctx.run_dir / name, ctx.run_dir.parent / name)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


# -- freezing the suite's problem files ----------------------------------------------------------
def freeze(suite_path: Path, modes: list[str] | None = None) -> list[Path]:
    """Rewrite the frozen problems of each sharing mode in ``modes`` (default: the suite's
    ``quickstart.sharing``, else memory): the paper-sized space, and the quickstart tasks resolved
    and deployed in sequence with the suite's ``quickstart.solver`` (default exhaustive) in that
    mode. Memory-mode files are ``paper-sized.json`` and ``quickstart-<k>-<task>.json``; a compute
    mode's carry ``-compute`` after ``paper-sized`` / ``quickstart``."""
    from selector.deploy import deploy_task
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.synthetic import paper_problem
    from solvers.registry import get_solver

    from selector.yamlio import load_mapping
    suite = Suite.model_validate(load_mapping(suite_path))
    q = suite.quickstart or {}
    out_dir = suite_path.parent / "problems"
    out_dir.mkdir(exist_ok=True)
    catalog, solver = load_catalog(), get_solver(q.get("solver", "exhaustive"))
    written = []
    for mode in modes or q.get("sharing", ["memory"]):
        tag = "" if mode == "memory" else f"-{mode}"
        paper = paper_problem()
        paper = in_mode(paper.model_copy(update={"task": paper.task.model_copy(update={"name": f"paper-sized{tag}"})}),
                        mode, suffix=False)[1]
        written.append(_write(out_dir / f"paper-sized{tag}.json", paper))
        cluster, gpu = load_cluster_file(q.get('cluster', 'a6000x8'), sharing=mode)
        for k, task in enumerate(q.get("tasks", [])):
            p = resolve_task(task, catalog=catalog, cluster=cluster, gpu=gpu)
            name = f"quickstart{tag}-{k + 1}-{task}"
            p = p.model_copy(update={"task": p.task.model_copy(update={"name": name})})
            written.append(_write(out_dir / f"{name}.json", p))
            _, cluster = deploy_task(p, solver, time_limit_s=600)
    return written


def _write(path: Path, problem: Problem) -> Path:
    path.write_text(json.dumps(problem.to_dict(), separators=(",", ":")) + "\n")
    return path


def write_baseline(ci_suite: Path, out: Path, full_run: Path | None = None) -> dict:
    """Solve the CI suite with the CI solvers and store its figures (plus, for information, those
    of a finished full run's ``gap.parquet``) as the regression baseline."""
    params = Params(suite=str(ci_suite), solvers=["flowmaker", "flowmaker-plus", "milp", "milp-pulp"])
    members = load_suite(params.suite)
    bar = tqdm(members, desc="baseline", disable=not show_progress())
    df = pd.concat([solve_problem(pid, fam, p, params) for pid, fam, p in bar], ignore_index=True)
    data = {"ci": _figures(df, suite=str(ci_suite))}
    if full_run is not None:
        data["full"] = _figures(pd.read_parquet(full_run / "gap.parquet"), run=str(full_run))
    atomic_write_text(out, json.dumps(data, indent=1) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.kinds.selector_gap``: maintain the benchmark suite."""
    from flowmaker.entry import OneLineParser, add_version
    ap = OneLineParser(prog="python -m experiments.kinds.selector_gap",
                       description="Freeze a benchmark suite's problems, or write the CI regression baseline.")
    add_version(ap)
    job = ap.add_mutually_exclusive_group(required=True)
    job.add_argument("--freeze", metavar="SUITE", type=Path,
                     help="rewrite the frozen problems of this suite (configs/benchmarks/*.yaml)")
    job.add_argument("--baseline", metavar="SUITE", type=Path,
                     help="solve this CI suite and write results/baselines/selector_gap.json")
    ap.add_argument("rest", nargs="*", metavar="MODE|RUN",
                    help="with --freeze: the sharing modes to rewrite (default: the suite's); with --baseline: "
                         "at most one finished full run folder whose figures are recorded too")
    a = ap.parse_args(argv)
    suite = a.freeze or a.baseline
    if not suite.is_file():
        ap.error(f"{suite}: no such suite file")
    if a.freeze:
        if bad := [m for m in a.rest if m not in ("memory", "compute")]:
            ap.error(f"unknown sharing mode {bad[0]!r}; known: memory, compute")
        for p in freeze(a.freeze, a.rest or None):
            print(f"wrote {p}")
        return 0
    if len(a.rest) > 1 or (a.rest and not (Path(a.rest[0]) / "gap.parquet").is_file()):
        ap.error("--baseline takes at most one run folder, holding gap.parquet")
    full = Path(a.rest[0]) if a.rest else None
    print(json.dumps(write_baseline(a.baseline, Path("results/baselines/selector_gap.json"), full), indent=1))
    return 0


if __name__ == "__main__":
    from flowmaker.entry import run as _run
    _run(main)
