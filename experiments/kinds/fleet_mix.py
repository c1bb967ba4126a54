"""Dollars per hour on single-type fleets and on a mixed one (issue 24 item 5, spec section 10).

Each task (the seven of ``configs/tasks`` and ``random_tasks`` seeded random ones) is resolved
once on the *mixed pool*: ``gpus_per_type`` GPUs of each of ``types`` (the catalog's analytic
model, one latency SLO per task from ``reference_gpu`` so every pool faces the same SLO). The
same problem restricted to one type's GPUs, configs and rows is that type's *single pool*.
For every pool and request rate (the task's ``arrival_rate_rps`` set to the rate) the task is
planned on the empty pool

- with ``objective: usd_per_hour`` by ``solver`` (an exact one: its plan is the cheapest in
  dollars per hour that meets the SLOs, a whole GPU per shard at its type's price), and
- with ``objective: gb_s`` by ``gb_s_solver`` (FlowMaker, the paper's objective), whose plan is
  priced in dollars too (``usd_per_hour`` of the GPUs it reserves).

A pool lists availability: a plan pays only for the GPUs it reserves (``usd_per_hour``). Pools:

- ``T`` (one per type): ``gpus_per_type`` GPUs of type T; its *pool price* is
  ``gpus_per_type x price_T`` dollars per hour.
- ``mixed@T`` (one per type, the equal-price comparison): a mixed pool whose pool price is at most
  T's. The budget ``B = gpus_per_type x price_T`` is split equally in dollars over the types:
  ``n_t = floor(B / (len(types) x price_t))`` GPUs of each type t (the first ``n_t`` of the
  resolved pool's); a type with ``n_t = 0`` is absent. So ``sum_t n_t price_t <= B``.
- ``mixed`` (upper reference): all ``gpus_per_type`` GPUs of every type; its pool price is the
  sum of all single pools', so it can only match or beat each single type.

Rows (``fleet_mix.parquet``): ``task, family (seven | random), rate_rps, pool, pool_usd_per_hour
(the pool's price: every GPU it offers), objective, solver, status, usd_per_hour, cost_gb_s, latency_s, new_gpus, workflow, choice, types, reason,
elapsed_s``; ``choice`` names every stage as ``model@tpTppP:type xR``. The report
(``summary.md``, ``fleet_mix.png``) is ``experiments/kinds/_fleet_report.py``'s, its tables
``_fleet_tables.py``'s (totals, per task) and ``_fleet_pools.py``'s (pools at a single type's price).
"""
from __future__ import annotations

import math
import shutil
import time
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError

SIX_TYPES = ["a6000", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h200"]
ROLES = ["answer", "plan", "classify", "rewrite", "verify", "refine", "map", "reduce"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: list[str] | None = None                 # names or files; None: the seven of configs/tasks
    random_tasks: int = Field(default=20, ge=0, le=1000)
    types: list[str] = Field(default_factory=lambda: list(SIX_TYPES), min_length=2)
    gpus_per_type: int = Field(default=8, ge=1, le=64)
    rates_rps: list[float] = Field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0, 8.0], min_length=1)
    reference_gpu: str = "a6000"                   # the latency SLO's standalone latency is on it
    pricing: Literal["on_demand", "spot"] = "on_demand"
    solver: str = "milp"                           # usd_per_hour, exact
    gb_s_solver: str = "flowmaker"                 # the paper's objective, priced in dollars beside
    time_limit_s: float = Field(default=60.0, gt=0)
    publish: bool = True


def run(params: Params, ctx: RunContext) -> None:
    from experiments.kinds._fleet_report import plot, summary_md
    from selector.errors import ProblemError
    from selector.resolve import ResolveSettings, load_catalog
    from selector.taskspec import load_task, task_names
    _check_names(params)
    try:
        catalog = load_catalog()
        specs = [(load_task(t), "seven") for t in (params.tasks or task_names())]
        specs += [(t, "random") for t in random_tasks(params.random_tasks, ctx.seed)]
        cluster = mixed_pool(params.types, params.gpus_per_type, params.pricing)
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    settings = ResolveSettings(reference_gpu=params.reference_gpu)
    frames = []
    bar = tqdm(total=len(specs), disable=not ctx.progress, desc="fleet mix", unit="task")
    for spec, family in specs:
        cell = ctx.cell_path(f"task-{spec.name}")
        if not cell.exists():
            atomic_write_parquet(cell, _task_rows(spec, family, catalog, cluster, settings, params))
        frames.append(pd.read_parquet(cell))
        bar.update()
    bar.close()
    df = pd.concat(frames, ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "fleet_mix.parquet", df)
    text = summary_md(df, params, cluster.prices or {})
    atomic_write_text(ctx.run_dir / "summary.md", text)
    png = plot(df, ctx.run_dir / "fleet_mix.png")
    if params.publish:
        for f in (png, ctx.run_dir / "summary.md", ctx.run_dir / "fleet_mix.parquet"):
            shutil.copyfile(f, ctx.run_dir.parent / f.name)
    print(text)


def _check_names(params: Params) -> None:
    from profiler.catalog import load_gpus
    from solvers.registry import names
    for field in ("solver", "gb_s_solver"):
        if getattr(params, field) not in names():
            raise UserError(f"field 'params.{field}': unknown solver '{getattr(params, field)}'; "
                            f"known: {', '.join(names())}")
    gpus = load_gpus()
    for t in [*params.types, params.reference_gpu]:
        if t not in gpus:
            raise UserError(f"field 'params.types': unknown GPU type '{t}'; known: {', '.join(gpus)}")
    if len(set(params.types)) != len(params.types):
        raise UserError("field 'params.types': a type is listed twice")


def mixed_pool(types: list[str], per_type: int, pricing: str):
    """The cluster of ``per_type`` GPUs of each type (one node per type, ids counting up), priced
    from configs/prices.yaml's ``pricing`` column."""
    from profiler.catalog import load_gpus
    from selector.clusterfile import cluster_from_spec
    gpus = load_gpus()
    nodes, gid = [], 0
    for t in types:
        nodes.append({"name": f"{t}-node", "gpus": [{"id": gid + k, "gpu": t, "mem_gb": gpus[t].mem_gb}
                                                    for k in range(per_type)]})
        gid += per_type
    cluster, _ = cluster_from_spec({"name": "fleet-mix", "nodes": nodes, "pricing": pricing}, where="fleet_mix")
    if cluster.prices is None:
        raise UserError(f"configs/prices.yaml has no {pricing} price for one of {', '.join(types)}")
    return cluster


def equal_price_counts(types: list[str], budget: float, prices: dict[str, float]) -> dict[str, int]:
    """GPUs per type of the mixed pool priced at most ``budget`` $/h: the budget split equally in
    dollars over ``types``, ``n_t = floor(budget / (len(types) x price_t))``; 0-GPU types left out."""
    counts = {t: math.floor(budget / (len(types) * prices[t]) + 1e-9) for t in types}
    return {t: n for t, n in counts.items() if n > 0}


def pools(types: list[str], per_type: int, prices: dict[str, float]) -> list[tuple[str, dict[str, int]]]:
    """Every pool as (name, GPUs per type): each type alone, ``mixed@T`` at T's pool price, and
    ``mixed`` (all GPUs, the upper reference)."""
    out: list[tuple[str, dict[str, int]]] = [(t, {t: per_type}) for t in types]
    out += [(f"mixed@{t}", equal_price_counts(types, per_type * prices[t], prices)) for t in types]
    return out + [("mixed", {t: per_type for t in types})]


def pool_problem(problem, counts: dict[str, int], rate: float, objective: str):
    """``problem`` on the first ``counts[t]`` GPUs of each type t only (the configs, rows and
    prices of those types), at ``rate`` requests per second, minimising ``objective``."""
    from selector.problem import parse_problem
    d = problem.to_dict()
    keep = lambda row: row.get("gpu_type", "gpu") in counts          # noqa: E731
    d["configs"] = [c for c in d["configs"] if keep(c)]
    d["deployments"] = [x for x in d["deployments"] if keep(x)]
    d["perf"] = [r for r in d["perf"] if keep(r)]
    c = d["cluster"]
    seen: dict[str, int] = {}
    gpus = []
    for g in c["gpus"]:
        t = g.get("type", "gpu")
        seen[t] = seen.get(t, 0) + 1
        if seen[t] <= counts.get(t, 0):
            gpus.append(g)
    c["gpus"] = gpus
    types = set(counts)
    c["prices"] = {t: usd for t, usd in c["prices"].items() if t in types}
    d["task"]["arrival_rate_rps"] = rate
    d["objective"] = objective
    return parse_problem(d)


def _task_rows(spec, family: str, catalog, cluster, settings, params: Params) -> pd.DataFrame:
    from selector.resolve import resolve_task
    from solvers.registry import get_solver
    base = resolve_task(spec, catalog=catalog, cluster=cluster, settings=settings)
    prices = cluster.prices or {}
    rows = []
    for rate in params.rates_rps:
        for pool, counts in pools(params.types, params.gpus_per_type, prices):
            price = sum(n * prices[t] for t, n in counts.items())
            for objective, solver in (("usd_per_hour", params.solver), ("gb_s", params.gb_s_solver)):
                p = pool_problem(base, counts, rate, objective)
                t0 = time.perf_counter()
                plan = get_solver(solver).select(p, time_limit_s=params.time_limit_s)
                rows.append({**_row(spec.name, family, rate, pool, objective, solver, plan,
                                    time.perf_counter() - t0), "pool_usd_per_hour": price})
    return pd.DataFrame(rows)


def _row(task: str, family: str, rate: float, pool: str, objective: str, solver: str, plan,
         elapsed: float) -> dict:
    ok = plan.solved
    stages = plan.to_dict().get("stages", []) if ok else []
    return {"task": task, "family": family, "rate_rps": rate, "pool": pool, "objective": objective,
            "solver": solver, "status": plan.status,
            "usd_per_hour": plan.usd_per_hour if ok and plan.usd_per_hour is not None else math.nan,
            "cost_gb_s": plan.cost_gb_s if ok else math.nan, "latency_s": plan.latency_s if ok else math.nan,
            "new_gpus": plan.new_gpus if ok else 0, "workflow": plan.workflow or "",
            "choice": choice(stages), "types": ",".join(sorted({s["gpu_type"] for s in stages if not s["reuse"]})),
            "reason": plan.reason or "", "elapsed_s": elapsed}


def choice(stages: list[dict]) -> str:
    """A plan's stages as ``model@tpTppP:type xR`` joined by `` > ``."""
    return " > ".join(f"{s['model']}@tp{s['tp']}pp{s['pp']}:{s['gpu_type']} x{s['replicas']}" for s in stages)


def random_tasks(n: int, seed: int) -> list:
    """``n`` seeded random tasks: a trace, an accuracy SLO the catalog can reach, a latency SLO
    factor of 2-5, and 1-3 workflows of 1-3 stages with random roles and 1-3 calls."""
    from selector.taskspec import TaskSpec
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        workflows = []
        for w in range(int(rng.integers(1, 4))):
            stages = [{"name": f"s{i}", "role": str(rng.choice(ROLES)), "calls": int(rng.integers(1, 4))}
                      for i in range(int(rng.integers(1, 4)))]
            workflows.append({"name": f"w{w}", "stages": stages})
        out.append(TaskSpec.model_validate({
            "name": f"random-{k:03d}", "trace": str(rng.choice(["code", "conv"])),
            "accuracy_slo": float(np.round(rng.uniform(14.0, 38.0), 1)),
            "latency_slo_factor": float(np.round(rng.uniform(2.0, 5.0), 2)),
            "arrival_rate_rps": 1.0, "workflows": workflows}))
    return out
