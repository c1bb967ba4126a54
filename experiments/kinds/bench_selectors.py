"""``python -m experiments.run bench_selectors``: selection time on the paper-sized space and on deep
three-workflow spaces, in both sharing modes of spec section 9.

Spaces (``params.spaces``):

* ``paper``: ``selector.synthetic.paper_problem`` (24,310 new-deployment variants) on 8x A6000
  after three quickstart tasks were deployed with flowmaker in the same sharing mode, so reuse
  options exist too;
* ``paper-empty``: the same space on the empty cluster (the gap suite's ``paper-sized.json``);
* ``deep``: ``selector.synthetic.synthetic_problem(depths=(7, 5, 3))``: three workflows of 7, 5 and
  3 stages over the 11 real models and 10 configs (about 9e13 variants) on the empty 8x A6000
  cluster, one per ``params.deep_rates`` arrival rate (default 0.6 rps, the base task's, and 2 and 3
  rps, where compute sharing binds).

``params.gpu_types`` N (2 or 3) spreads every space over N priced GPU types (spec section 10,
``selector.typed.spread_over_types``: each config on every type, about 3^stages times the
variants) under ``params.objective`` (``gb_s`` or ``usd_per_hour``); the value column is then in
that objective's unit (GB*s or $/h). Issue 24's targets: milp <= 1 s on ``paper`` and <= 3 s on
``deep`` with 3 types.

Prints, per space, sharing mode and solver, the median and minimum wall time over
``params.repeats`` runs, the variants evaluated per second, the plan's cost and whether it equals the proved
optimum (``opt``: the cost of an exact solver's ``optimal`` answer on that space). ``exhaustive``
(and ``murakkab``, which runs it on its fixed workflow) is skipped on spaces above
``params.max_exhaustive`` variants. Targets (issues 2 and 12) on a 2-core
machine: exhaustive <= 0.5 s and flowmaker <= 20 ms on ``paper``; milp <= 1 s on ``paper`` and
<= 2 s on ``deep``, in both modes (the paper: ~1 s heuristic, 6.5-40 s exhaustive).
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext
from experiments.kinds._bench import Report
from flowmaker.entry import UserError

from selector.deploy import deploy_task, with_cluster
from selector.index import NEW, compile_problem
from selector.problem import Problem, parse_problem
from selector.clusterfile import load_cluster_file
from selector.resolve import load_catalog, resolve_task
from selector.synthetic import paper_problem, synthetic_problem

EXACT = ("milp", "milp-pulp", "exhaustive")
EXHAUSTIVE_INSIDE = ("exhaustive", "murakkab")   # murakkab searches its fixed workflow with exhaustive


def paper_sized_problem(sharing: str = "memory") -> Problem:
    """``selector.synthetic.paper_problem`` (24,310 new-deployment variants) on 8x A6000 after
    three quickstart tasks were deployed with flowmaker under ``sharing``, so reuse options exist too."""
    from solvers.registry import get_solver

    catalog = load_catalog()
    cluster, gpu = load_cluster_file(sharing=sharing)
    for warm in ("code-completion", "chat", "rag-qa"):
        p = resolve_task(warm, catalog=catalog, cluster=cluster, gpu=gpu)
        _, cluster = deploy_task(with_cluster(p, cluster), get_solver("flowmaker"))
    return with_cluster(paper_problem(), cluster)


def deep_problem(arrival_rate_rps: float | None = None, sharing: str = "memory",
                 depths: tuple[int, ...] = (7, 5, 3), seed: int = 0) -> Problem:
    """Workflows of ``depths`` stages (``selector.synthetic.synthetic_problem``) under ``sharing``."""
    d = synthetic_problem(depths=depths, seed=seed, arrival_rate_rps=arrival_rate_rps).to_dict()
    d["cluster"]["sharing"] = sharing
    return parse_problem(d)


def _with_sharing(problem: Problem, sharing: str) -> Problem:
    d = problem.to_dict()
    d["cluster"]["sharing"] = sharing
    return parse_problem(d)


def spaces(which: list[str], sharing: list[str], deep_rates: list[float]) -> list[tuple[str, str, Problem]]:
    out = []
    for mode in sharing:
        if "paper" in which:
            out.append(("paper", mode, paper_sized_problem(mode)))
        if "paper-empty" in which:
            out.append(("paper-empty", mode, _with_sharing(paper_problem(), mode)))
        if "deep" in which:
            out += [(f"7-5-3@{r:g}rps", mode, deep_problem(r, mode)) for r in deep_rates]
    return out


def describe(problem: Problem) -> str:
    cp = compile_problem(problem)
    new_only = sum(math.prod(sum(1 for o in st.options if o.kind == NEW) for st in wf.stages) for wf in cp.workflows)
    return (f"{cp.variant_space:.4g} variants ({new_only:.4g} new-deployment only), workflows "
            f"{[len(w.stages) for w in cp.workflows]} stages, {len(problem.cluster.instances)} reusable instances")


Space = Literal["paper", "paper-empty", "deep"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    solvers: list[str] | None = None                      # default: every registered solver
    # the paper-sized space after three deployments, the same on an empty cluster, the 7/5/3-stage spaces
    spaces: list[Space] = ["paper", "paper-empty", "deep"]
    sharing: list[Literal["memory", "compute"]] = ["memory", "compute"]   # spec section 9
    deep_rates: list[float] = [0.6, 2.0, 3.0]              # arrival rates (rps) of the 7/5/3-stage spaces
    repeats: int = Field(default=5, ge=1)                 # timed runs per solver; median and min reported
    time_limit_s: float = Field(default=120.0, gt=0)      # wall seconds per solve
    max_exhaustive: float = 1e8                           # skip exhaustive and murakkab above this many variants
    gpu_types: Literal[1, 2, 3] = 1                       # spread each space over this many priced GPU types
    objective: Literal["gb_s", "usd_per_hour"] = "gb_s"   # objective of the typed spaces (gpu_types 2 or 3)


def run(params: Params, ctx: RunContext) -> None:
    from solvers.registry import get_solver, names
    chosen = params.solvers or names()
    for name in chosen:
        if name not in names():
            raise UserError(f"field 'params.solvers': unknown solver '{name}'; known: {', '.join(names())}")
    report = Report(ctx, "Selection time (bench_selectors)")
    report.line(f"{'space':<16}{'sharing':<9}{'solver':<19}{'status':<11}{'median_s':>10}{'min_s':>10}"
                f"{'variants/s':>13}{'value':>12}  opt")
    for label, mode, problem in spaces(params.spaces, params.sharing, params.deep_rates):
        if params.gpu_types > 1:
            from selector.typed import spread_over_types
            problem = spread_over_types(problem, n_types=params.gpu_types, objective=params.objective)
        report.line(f"# {label} ({mode}): {describe(problem)}")
        rows = []
        for name in chosen:
            if name in EXHAUSTIVE_INSIDE and compile_problem(problem).variant_space > params.max_exhaustive:
                rows.append((name, "skipped", math.nan, math.nan, math.nan, None))
                continue
            solver, times, plan = get_solver(name), [], None
            for _ in range(params.repeats):
                t0 = time.perf_counter()
                plan = solver.select(problem, time_limit_s=params.time_limit_s)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            rows.append((name, plan.status, med, min(times), plan.variants_evaluated / med if med > 0 else math.inf,
                         plan.value(problem.objective) if plan.solved else None))
        proved = [r[5] for r in rows if r[0] in EXACT and r[1] == "optimal"]
        opt = proved[0] if proved else None
        for name, status, med, lo, rate, cost in rows:
            match = "" if opt is None or status in ("skipped",) else (
                "yes" if cost is not None and abs(cost - opt) <= 1e-6 * max(abs(opt), 1e-12) else "no")
            cost_s = "-" if cost is None else f"{cost:.6g}"
            report.line(f"{label:<16}{mode:<9}{name:<19}{status:<11}{med:>10.4f}{lo:>10.4f}{rate:>13.0f}{cost_s:>12}  "
                        f"{match}")
            report.row({"space": label, "sharing": mode, "solver": name, "status": status, "median_s": med,
                        "min_s": lo, "variants_per_s": rate, "value": cost, "objective": problem.objective,
                        "matches_optimum": match})
    report.write()

