"""The paper's end-to-end comparison (issue 17: fair, load-aware, multi-seed): deploy the seven
tasks in sequence on 8x A6000 with each selector, re-planned at every load level, replay Poisson
(or bounded-burstiness) arrival windows of {code, conv} x loads x seeds on the simulated
cluster, and report goodput and cost with 95% confidence intervals.

A *scenario* is one row of the study: sharing mode (spec section 9), SLO set
(``configs/slo_sets``), colocation penalty on or off, re-planning per load or once, arrival
process, the selectors and tasks left unplaced. Every selector re-plans at every load (rates =
load x the tasks' planned rates) from the empty cluster (spec section 8); the sequence per load
is in ``deployments.parquet``. Each cell (what the plan deploys, colocation, arrivals, trace, load,
seed) is written atomically to ``cells/`` and shared by the scenarios and plan keys that contain it
(two selectors or placements that deploy the same thing replay it once); a rerun with
``--run-id`` skips finished cells. Outputs: ``results.parquet`` (one row per scenario and cell),
``tasks.parquet``, ``gpus.parquet`` (busy share per GPU), ``deployments.parquet``,
``goodput*.png``, ``cost*.png`` and ``summary.md`` (``experiments/kinds/_paper_report.py``).
Docs: docs/harness.md ("The paper experiment"), docs/metrics.md, docs/baselines.md.
"""
from __future__ import annotations

import json
import os
import time
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from experiments.executor import Cell, run_cells
from experiments.kinds._paper_plan import (CellKey, deploy_sequence, label, load_slo_set, plan_frame, plan_key,
                                           run_cell, work_digest)
from selector.taskspec import TaskList


class Scenario(BaseModel):
    """One row of the study; unset fields take the experiment's."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    description: str = ""
    selectors: list[str] | None = Field(default=None, min_length=1)
    sharing: Literal["memory", "compute"] = "compute"
    slo_set: str = "current"
    colocation: bool = Field(default=True, description="charge instances sharing a GPU (harness.cluster)")
    replan: bool = Field(default=True, description="plan at every load; false: once, at plan_load_pct")
    placement: Literal["own", "spec"] = Field(
        default="own", description="the baselines' placement: their own rule, or FlowMaker's (spec: LeastLoaded, "
                                   "compute-aware under sharing compute; docs/baselines.md)")
    objective: Literal["gb_s", "usd_per_hour"] = Field(
        default="gb_s", description="the problems' objective (spec section 5, or section 10's dollars per hour)")
    fair_share: bool = Field(
        default=True, description="under sharing compute, FlowMaker's planning path (_paper_plan.FAIR_SHARE) adds "
                                   "the fair-share check (sharing: fair-share, docs/selection.md); false: section 9 "
                                   "alone. The other selectors keep their own rules either way")
    arrivals: Literal["poisson", "window"] | None = None
    loads_pct: list[float] | None = Field(default=None, min_length=1)
    seeds: int | None = Field(default=None, ge=1)
    unplaced: dict[str, list[str]] = Field(default_factory=dict,
                                           description="selector label -> tasks it leaves unplaced")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList
    cluster: str = "a6000x8"
    selectors: NameList = Field(description="registry names; 'name:setting' for routellm, langchain")
    traces: list[str] = Field(default=["code", "conv"])
    loads_pct: list[float] = Field(default=[25, 50, 75, 100, 200, 400], min_length=1)
    arrivals: Literal["poisson", "window"] = Field(
        default="poisson", description="poisson: Poisson at load x planned rate, trace token sizes; window: "
                                       "trace windows with peak-to-mean <= max_peak_to_mean")
    window_s: float = Field(default=240.0, gt=0, description="arrival window per cell (s)")
    seeds: int = Field(default=3, ge=1, le=1000, description="windows per cell: seeds seed, seed+1, ...")
    max_peak_to_mean: float = Field(default=3.0, ge=1, description="window arrivals: burstiness bound (10 s bins)")
    drain_cap_s: float | None = Field(default=None, ge=0, description="cost window = window_s + min(drain, cap); "
                                                                      "default: the largest latency SLO")
    plan_load_pct: float = Field(default=100.0, gt=0, description="the load plans are made for when replan is off")
    price_per_gb_s: float = Field(default=1e-6, ge=0, description="USD per GB-second of reserved memory")
    time_limit_s: float = Field(default=30.0, gt=0)
    data_dir: str | None = Field(default=None, description="shared data folder; default $FLOWMAKER_SHARED_DATA "
                                                           "or ../shared/data")
    scheduler: str = "vllm"
    reference: str = "flowmaker"
    scenarios: list[Scenario] = Field(default_factory=lambda: [Scenario(name="main")], min_length=1)
    publish: bool = Field(default=False, description="copy summary.md, the plots and the parquet tables to "
                                                     "results/<experiment>/ (the committed copy)")
    plots: list[str] | None = Field(default=None, description="scenarios to plot (default: all); the first "
                                                              "scenario's plots are goodput.png / cost.png")

    @model_validator(mode="after")
    def _check(self) -> Params:
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError(f"scenarios: duplicate name in {names}")
        for s in self.scenarios:
            if self.reference not in (s.selectors or self.selectors):
                raise ValueError(f"scenario {s.name}: selectors must include the reference '{self.reference}'")
            bad = [t for ts in s.unplaced.values() for t in ts if t not in self.tasks]
            if self.plots is not None and not set(self.plots) <= set(names):
                raise ValueError(f"plots: unknown scenario in {self.plots}; known: {', '.join(names)}")
            if bad:
                raise ValueError(f"scenario {s.name}: unplaced task '{bad[0]}' is not in tasks")
        return self


def _solver(spec: str):
    from experiments.kinds._paper_plan import _solver as solver
    return solver(spec)


_label = label


def _tag(sharing: str) -> str:
    return "" if sharing == "memory" else f"-{sharing}"


def deploy_all(params: Params, problems, ctx: RunContext) -> dict[str, list]:
    """Sequential deployment per selector, as quickstart's (``selector.deploy.deploy_task``), in
    the problems' sharing mode; returns label -> [(problem seen, Plan)] (``plan.deployment``: what
    the task deployed) and writes ``deployments.parquet``."""
    out, rows = _deploy_mode(params, problems, ctx)
    atomic_write_parquet(ctx.run_dir / "deployments.parquet", pd.DataFrame(rows))
    return out


def _deploy_mode(params: Params, problems, ctx: RunContext) -> tuple[dict[str, list], list[dict]]:
    from selector.deploy import deploy_task, with_cluster
    mode = problems[0].cluster.sharing
    out, rows = {}, []
    for spec in params.selectors:
        solver, cluster, seq = _solver(spec), problems[0].cluster, []
        for p in problems:
            p = with_cluster(p, cluster)
            t0 = time.perf_counter()
            plan, cluster = deploy_task(p, solver, time_limit_s=params.time_limit_s)
            seq.append((p, plan))
            dep = plan.deployment
            insts = dep.instances if dep is not None else ()
            rows.append({"sharing": mode, "selector": _label(spec), "task": p.task.name, "status": plan.status,
                         "placed": dep is not None, "workflow": dep.workflow if dep is not None else None,
                         "instances_new": len(insts), "gb_new": sum(i.mem_gb for i in insts),
                         "models": ",".join(sorted({i.model for i in insts})),
                         "spec_violation": plan.extra.get("spec_violation"), "select_s": time.perf_counter() - t0})
        out[_label(spec)] = seq
        atomic_write_text(ctx.file_path("deployments", f"{_label(spec)}{_tag(mode)}.json"),
                          json.dumps({"cluster": cluster.model_dump(mode="json")}, indent=1))
    return out, rows


def resolve_all(params) -> tuple[list, str, list[dict]]:
    """The tasks' resolved problems on ``params.cluster``, its GPU name, and per task
    ``{workflow: [(prompt, output) tokens per stage]}``."""
    from selector.errors import ProblemError
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import CONFIGS, load_task, stage_tokens

    try:
        cluster0, gpu = load_cluster_file(CONFIGS / "clusters" / f"{params.cluster}.yaml")
        catalog = load_catalog()
        problems = [resolve_task(t, catalog=catalog, cluster=cluster0, gpu=gpu) for t in params.tasks]
        specs = [load_task(t) for t in params.tasks]
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    return problems, gpu, [{w.name: stage_tokens(s, w) for w in s.workflows} for s in specs]


def load_traces(params, seed: int) -> dict:
    """``{trace kind: (Trace, source)}`` for ``params.traces``."""
    from harness.workload import azure_or_synthetic
    traces = {}
    for kind in params.traces:
        try:
            traces[kind] = azure_or_synthetic(kind, data_dir=params.data_dir, seed=seed)
        except KeyError as exc:
            raise UserError(f"field 'params.traces': {exc.args[0]}") from None
    return traces


def plan_all(params: Params, problems, seed: int = 0, ctx: RunContext | None = None,
             earlier: list | None = None) -> tuple[dict, dict, list[dict]]:
    """Every scenario's plan keys and cells: ``plans`` {PlanKey: sequence}, ``cells`` {CellKey:
    [scenario names]} (seeds ``seed``, ``seed + 1``, ...) and the deployment records (one per plan key
    and task). With ``ctx`` the plan keys are planned as executor cells (the config's workers; cells
    ``plan__*`` of the run folder, so a resumed run re-plans none: the frames of those planned by an
    earlier invocation go to ``earlier``), else here in turn."""
    keyed = []
    for sc in params.scenarios:
        load_slo_set(sc.slo_set)                       # an unknown set fails before any work
        for spec in sc.selectors or params.selectors:
            unplaced = tuple(sc.unplaced.get(label(spec), ()))
            for load in sc.loads_pct or params.loads_pct:
                keyed.append((sc, load, plan_key(sc.sharing, sc.slo_set, spec, load if sc.replan else
                                                 params.plan_load_pct, unplaced, sc.placement, sc.objective,
                                                 sc.fair_share)))
    plans, rows = _plan_keys(params, problems, list(dict.fromkeys(k for _, _, k in keyed)), ctx,
                             [] if earlier is None else earlier)
    work = {k: work_digest(seq) for k, seq in plans.items()}
    cells: dict = {}
    for sc, load, key in keyed:
        for trace in params.traces:
            for i in range(sc.seeds or params.seeds):
                cell = CellKey(key, sc.colocation, sc.arrivals or params.arrivals, trace, load, seed + i, work[key])
                cells.setdefault(cell, []).append(sc.name)
    return plans, cells, rows


def _plan_keys(params: Params, problems, keys: list, ctx: RunContext | None,
               earlier: list) -> tuple[dict, list[dict]]:
    """``{key: sequence}`` and the records of every key, in the keys' order."""
    import pickle
    if ctx is None:
        out = {k: deploy_sequence(problems, k, time_limit_s=params.time_limit_s) for k in keys}
        return {k: seq for k, (seq, _) in out.items()}, [r for _, recs in out.values() for r in recs]
    cells = [Cell("plan__" + CellKey(k, True, "", "", 0.0, 0).name(), plan_frame, (k, problems),
                  {"time_limit_s": params.time_limit_s}) for k in keys]
    ran: set[str] = set()
    frames = run_cells(ctx, cells, desc="plans", on_done=lambda c, _: ran.add(c.name))
    earlier += [f.iloc[:1] for c, f in zip(cells, frames) if c.name not in ran]
    plans = {k: pickle.loads(f["sequence"].iloc[0]) for k, f in zip(keys, frames)}
    return plans, [r for f in frames for r in f.drop(columns=["sequence", "cell_wall_s"]).to_dict("records")]


def cell_frame(cell: CellKey, seq: list, **setting) -> pd.DataFrame:
    """One cell's replay (``_paper_plan.run_cell``) as a one-row table."""
    return pd.DataFrame([run_cell(cell, seq, **setting)])


def _replay_cells(ctx: RunContext, plans, cells, setting: dict) -> set[str]:
    """Run every cell whose file is missing (``experiments.executor``: the config's runtime and
    workers), each written atomically; the names of the cells this invocation ran."""
    simulated, ran = 0, set()

    def done(cell: Cell, row: pd.DataFrame) -> None:
        nonlocal simulated
        ran.add(cell.name)
        simulated += int(row["requests"].iloc[0])
        if ctx.progress:
            key = cell.args[0]
            tqdm.write(f"{label(key.plan.selector)} {key.trace} {key.load_pct:g}%: {simulated} requests simulated")

    slim = {k: _replayed(seq) for k, seq in plans.items()}
    run_cells(ctx, [Cell(c.name(), cell_frame, (c, slim[c.plan]), setting) for c in cells], on_done=done)
    return ran


def _replayed(seq: list) -> list:
    """A sequence as a replay reads it (``harness.replay.sim_tasks``: the task, models, cluster
    and deployment): without the perf and deployment rows, which are 96% of its pickle (518 KB
    -> 22 KB per cell shipped to a worker)."""
    return [(p.model_copy(update={"perf": (), "deployments": ()}), plan) for p, plan in seq]


def _cpu_since(c0) -> float:
    """CPU seconds (user + system) of this process and its finished children since ``c0``."""
    c = os.times()
    return sum(getattr(c, f) - getattr(c0, f) for f in ("user", "system", "children_user", "children_system"))


def run(params: Params, ctx: RunContext) -> None:
    from experiments.kinds._paper_report import Resumed, write_report
    from profiler.engine import EngineConfig

    t0, c0 = time.perf_counter(), os.times()
    problems, gpu, tokens = resolve_all(params)
    earlier: list[pd.DataFrame] = []
    plans, cells, dep_rows = plan_all(params, problems, ctx.seed, ctx, earlier)
    atomic_write_parquet(ctx.run_dir / "deployments.parquet", pd.DataFrame(dep_rows))
    cap = params.drain_cap_s if params.drain_cap_s is not None else max(p.task.latency_slo_s for p in problems)
    setting = dict(tokens=tokens, rates=tuple(p.task.arrival_rate_rps for p in problems), gpu=gpu,
                   gpu_ids=[g.id for g in problems[0].cluster.gpus], engine=EngineConfig(scheduler=params.scheduler),
                   window_s=params.window_s, drain_cap_s=cap, price_per_gb_s=params.price_per_gb_s,
                   max_peak_to_mean=params.max_peak_to_mean, data_dir=params.data_dir)
    ran = _replay_cells(ctx, plans, cells, setting)
    rows = [pd.read_parquet(ctx.cell_path(c.name())).assign(scenario=sc, cell=c.name(), **c.fields())
            for c, scs in cells.items() for sc in scs]
    df = pd.concat(rows, ignore_index=True)
    earlier += [pd.read_parquet(ctx.cell_path(n)) for n in {c.name() for c in cells} - ran]
    atomic_write_parquet(ctx.run_dir / "results.parquet", df.drop(columns=["per_task", "gpu_busy_share"]))
    keys = ["scenario", "selector", "trace", "load_pct", "seed"]
    tasks = [dict(zip(keys, k), **t) for *k, pt in df[keys + ["per_task"]].itertuples(index=False)
             for t in json.loads(pt)]
    atomic_write_parquet(ctx.run_dir / "tasks.parquet", pd.DataFrame(tasks))
    gpus = [dict(zip(keys, k), gpu=int(g), busy_share=v) for *k, js in df[keys + ["gpu_busy_share"]].itertuples(index=False)
            for g, v in json.loads(js).items()]
    atomic_write_parquet(ctx.run_dir / "gpus.parquet", pd.DataFrame(gpus))
    write_report(params, ctx.run_dir, df.drop(columns=["per_task"]), pd.DataFrame(dep_rows), pd.DataFrame(gpus),
                 drain_cap_s=cap, clock=lambda: (time.perf_counter() - t0, _cpu_since(c0)), execution=ctx.execution,
                 resumed=Resumed.of(earlier))
    if params.publish:
        _publish(ctx.run_dir)
    print((ctx.run_dir / "summary.md").read_text())


PUBLISHED = ("summary.md", "results.parquet", "tasks.parquet", "gpus.parquet", "deployments.parquet")


def _publish(run_dir) -> None:
    """Copy the run's summary, tables and plots beside its folder (``results/<experiment>/``)."""
    import shutil
    for path in [run_dir / n for n in PUBLISHED] + sorted(run_dir.glob("*.png")):
        shutil.copyfile(path, run_dir.parent / path.name)
