"""Beyond the paper (issues 19, 25): re-selection when load shifts, with migration cost, judged on
held-out days and seeds of a week.

The Azure LLM inference traces of 2024 (a week: ``configs/profiles/azure2024_week.yaml``, one
curve per trace; ``curves`` maps each task to one) give every task's rate over the week; request
sizes come from the Azure 2023 traces. Every run deploys the tasks in order on the same cluster
(the cluster file's GPUs repeated ``nodes`` times). The experiment runs in two stages of cells
(``experiments.executor``), each an *arm* (``experiments.kinds._reselection_arms``):

1. **choices** (never on the reported seeds): the controller tuned on the ``tune`` days and
   seeds (each candidate of ``controllers`` against static-peak there: the cheapest in GPU-seconds
   held whose goodput is within ``choice_tol`` of static-peak's); the right-sized static plan on
   the ``report`` days with the ``rightsize_seeds`` (the smallest ``rightsize`` multiplier of the
   peak plan whose goodput is within ``choice_tol`` of static-peak's); and, seed-independent, on
   the report days: ``static-peak``, ``static-peak-fixed-workflow`` and the hourly ``oracle``
   (with ``oracle_pack``, also one whose planner packs instances onto shared GPUs);
2. **report** (the ``report`` days and seeds): ``adaptive`` (the tuned controller),
   ``adaptive-fixed-workflow`` (the same controller, the selector restricted to the developer's
   workflow: compared with ``static-peak-fixed-workflow``; both on the first ``fixed_workflow_seeds``
   report seeds), ``static-right`` (the chosen
   multiplier); on the first report seed the start-up sweep (``startup_sweep``: every instance
   ready after that many profile seconds) and the GPU cap (``gpu_cap``); and the uncompressed
   segment (``uncompressed``: compression 1, static-peak and adaptive).

Outputs as before (docs/reselection.md): ``results``, ``tasks``, ``decisions``, ``instances``,
``memory``, ``hourly`` parquet (a ``phase`` column), ``choices.json``, figures and ``summary.md``;
``publish`` copies the summary, figures and the small tables to ``results/<experiment>/``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from experiments.executor import Cell, run_cells
from experiments.kinds._reselection_arms import PLAIN, Arm, arm_cell, oracle_cell
from experiments.kinds._reselection_depends import PACKED
from flowmaker.entry import UserError
from harness.adaptive.config import ControllerConfig
from harness.adaptive.diurnal import DiurnalProfile
from selector.taskspec import TaskList

#: the experiment's control loop, in profile seconds (divided by the compression in a run): tick
#: every 4 min, rates over 48 min (short) and 72 min (long), 72 min after a migration before
#: moving down, 24 min before moving up again, no headroom over the capacity rows
WEEK_CONTROLLER = ControllerConfig(interval_s=240.0, window_s=2880.0, window_long_s=4320.0, headroom=1.0,
                                   drift_down=0.15, up_gap_s=1440.0, cooldown_s=4320.0)


class Segment(BaseModel):
    """A part of the profile: ``hours`` from ``start_hour`` (wrapping), under ``seeds``."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    start_hour: float = Field(0.0, ge=0)
    hours: float = Field(24.0, gt=0)
    seeds: list[int] = Field(default=[0], min_length=1)
    compression: float | None = Field(None, gt=0, description="default: the profile's")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList
    cluster: str = Field("a6000x8-compute", description="configs/clusters/<name>.yaml")
    nodes: int = Field(8, ge=1, description="copies of the cluster file's GPUs")
    selector: str = Field("flowmaker", description="registry name of the selector every policy runs")
    trace: str = Field("conv", pattern="^(code|conv)$", description="Azure 2023 trace whose request sizes are drawn")
    profile: DiurnalProfile = Field(default=DiurnalProfile(peak_x=6.0, compression=96.0))
    curves: dict[str, str] = Field(default_factory=dict, description="task -> week curve (configs/profiles)")
    report: Segment = Field(default=Segment())
    tune: Segment | None = Field(None, description="days and seeds the controller is tuned on")
    seen_seeds: list[int] = Field(default=[], description="report seeds looked at while the candidates were "
                                  "last revised: summary.md also judges the targets on the other report seeds alone")
    controllers: dict[str, ControllerConfig] = Field(default={"default": WEEK_CONTROLLER}, min_length=1,
                                                     description="candidates, times in profile seconds")
    planner: dict[str, Any] = Field(default_factory=dict, description="planning rules (fields of PLANNER) every "
                                    "policy uses, static, adaptive and the oracle alike")
    selector_plan: bool = Field(True, description="also run static-peak with the selector's own plans (no "
                                "planner rules) on the report seeds")
    rightsize: list[float] = Field(default=[], description="static multipliers of the peak plan tried")
    rightsize_seeds: list[int] = Field(default=[], description="seeds the right-sized static plan is "
                                       "chosen on (a multiplier must pass on every one)")
    goodput_tol: float = Field(0.01, ge=0, lt=1, description="relative goodput loss allowed against static-peak")
    choice_tol: float | None = Field(None, ge=0, lt=1, description="the largest loss a choice (controller, "
                                     "right-size multiplier) may show on each seed it is chosen on (None: "
                                     "goodput_tol; less leaves a margin for the days and seeds it has not seen)")
    startup_fixed_s: float = Field(30.0, ge=0, description="start-up besides weights (profile s)")
    load_gb_per_s: float = Field(0.5, gt=0, description="weights loaded per profile second")
    startup_sweep: list[float] = Field(default=[], description="uniform start-ups (profile s) run on the first seed")
    gpu_cap: int | Literal["static-peak"] | None = Field(None, description="adaptive run on the first seed with "
                                                         "this many GPUs (static-peak: as many as its plan holds)")
    oracle_pack: float | None = Field(None, gt=0, le=1, description="also the hourly oracle whose planner packs "
                                      "(pack_busy = this): the bound for a planner that shares GPUs")
    uncompressed: Segment | None = Field(None, description="a segment run at compression 1")
    fixed_workflow: bool = Field(True, description="run the fixed-workflow pair")
    fixed_workflow_seeds: int = Field(1, ge=1, description="the fixed-workflow pair runs on this many of the first "
                                      "report seeds (summary.md details the first, and gives the range over all)")
    seeds_overlap_ok: bool = Field(False, description="allow tuning and right-size seeds among the reported")
    price_per_gb_s: float = Field(1e-6, ge=0, description="USD per GB-second of reserved memory")
    data_dir: str | None = Field(None, description="shared data folder (Azure traces)")
    scheduler: str = Field("vllm", pattern="^(vllm-v1|vllm|padded|sarathi)$")
    publish: bool = Field(False, description="copy the summary, figures and small tables to results/<experiment>/")

    @property
    def choice_limit(self) -> float:
        """The largest loss a choice may show on a seed it is chosen on (``choice_tol``, else
        ``goodput_tol``)."""
        return self.goodput_tol if self.choice_tol is None else self.choice_tol

    @model_validator(mode="after")
    def _held_out(self) -> Params:
        bad = set(self.planner) - set(PLAIN)
        if bad:
            raise ValueError(f"planner: not a planning rule: {sorted(bad)} (rules: {sorted(PLAIN)})")
        ControllerConfig(**self.planner)
        unknown = set(self.curves) - set(self.tasks)
        if unknown:
            raise ValueError(f"curves: tasks not in the experiment: {sorted(unknown)}")
        rep = set(self.report.seeds)
        used = set(self.rightsize_seeds) | (set(self.tune.seeds) if self.tune else set())
        if rep & used and not self.seeds_overlap_ok:
            raise ValueError(f"tuning / right-size seeds {sorted(rep & used)} are among the reported seeds")
        return self


def setup(params: Params):
    """``(problems, tokens, cluster, gpu)``: every task resolved on the replicated cluster."""
    from selector.errors import ProblemError
    from selector.problem import Cluster, Gpu
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import CONFIGS, load_task, stage_tokens
    try:
        base, gpu = load_cluster_file(CONFIGS / "clusters" / f"{params.cluster}.yaml")
        gpus = tuple(Gpu(id=n * len(base.gpus) + k, mem_gb=g.mem_gb, used_gb=g.used_gb, type=g.type)
                     for n in range(params.nodes) for k, g in enumerate(base.gpus))
        cluster = Cluster(gpus=gpus, sharing=base.sharing, prices=base.prices)
        catalog = load_catalog()
        problems = [resolve_task(t, catalog=catalog, cluster=cluster, gpu=gpu) for t in params.tasks]
        specs = [load_task(t) for t in params.tasks]
    except (ProblemError, OSError) as exc:
        raise UserError(str(exc)) from None
    tokens = [{w.name: stage_tokens(s, w) for w in s.workflows} for s in specs]
    return problems, tokens, cluster, gpu


def segment_profile(params: Params, seg: Segment, compression: float | None = None) -> DiurnalProfile:
    return DiurnalProfile(**{**params.profile.model_dump(), "start_hour": seg.start_hour, "hours": seg.hours,
                             "compression": compression or seg.compression or params.profile.compression})


def controller(params: Params, name: str | None = None) -> ControllerConfig:
    """Candidate ``name`` (default: the first) with the experiment's planning rules."""
    return params.controllers[name or next(iter(params.controllers))].model_copy(update=dict(params.planner))


def _arm(params: Params, phase: str, policy: str, seg: Segment, seed: int, ctl: ControllerConfig, *,
         adaptive: bool, compression: float | None = None, **kw) -> Arm:
    return Arm(phase=phase, policy=policy, adaptive=adaptive, profile=segment_profile(params, seg, compression),
               controller=ctl, seed=seed, **{"startup_fixed_s": params.startup_fixed_s,
                                              "load_gb_per_s": params.load_gb_per_s, **kw})


def choice_arms(params: Params) -> list[Arm]:
    """Stage 1 (module docstring)."""
    first = controller(params)
    arms = []
    if params.tune is not None and len(params.controllers) > 1:
        for s in params.tune.seeds:
            arms.append(_arm(params, "tune", "static-peak", params.tune, s, first, adaptive=False))
            arms += [_arm(params, "tune", f"adaptive-{n}", params.tune, s, controller(params, n), adaptive=True)
                     for n in params.controllers]
    for s in params.rightsize_seeds:
        arms.append(_arm(params, "rightsize", "static-peak", params.report, s, first, adaptive=False))
        arms += [_arm(params, "rightsize", f"static-x{m:g}", params.report, s, first, adaptive=False, rate_x=m)
                 for m in params.rightsize]
    for s in params.report.seeds:
        arms.append(_arm(params, "report", "static-peak", params.report, s, first, adaptive=False))
        if params.selector_plan and params.planner:
            arms.append(_arm(params, "report", "static-peak-selector", params.report, s, first, adaptive=False,
                             plain=True))
        if params.fixed_workflow and s in params.report.seeds[:params.fixed_workflow_seeds]:
            arms.append(_arm(params, "report", "static-peak-fixed-workflow", params.report, s, first,
                             adaptive=False, fixed_workflow=True))
    if params.uncompressed is not None:
        arms += [_arm(params, "uncompressed", "static-peak", params.uncompressed, s, first, adaptive=False,
                      compression=1.0) for s in params.uncompressed.seeds]
    return arms


def choose(frames: pd.DataFrame, params: Params) -> dict:
    """The tuned controller and the right-sized multiplier from stage 1's results."""
    tol = params.choice_limit
    out: dict = {"controller": next(iter(params.controllers)), "rate_x": 1.0, "tune": [], "rightsize": []}
    t = frames[frames.phase == "tune"]
    if len(t):
        loss = worst_loss(t)
        agg = _per_policy(t, loss)
        cands = agg[agg.index.str.startswith("adaptive-")]
        ok = cands[cands.worst_loss <= tol]
        best = ok.gpu_s.idxmin() if len(ok) else cands.goodput.idxmax()
        out["controller"] = best.removeprefix("adaptive-")
        out["tune"] = [{"policy": p, **r} for p, r in agg.to_dict("index").items()]
    out.update(rightsize(frames[frames.phase == "rightsize"], params.rightsize, tol))
    return out


def worst_loss(rows: pd.DataFrame) -> dict[str, float]:
    """Per policy, its largest relative goodput loss against static-peak on the same seed, over the
    seeds of ``rows`` (policies missing a seed are left out). The targets are judged per seed, and a
    pooled mean lets one lucky seed carry a choice that fails on others: both choices (the right-sized
    static plan, the tuned controller) use this rule."""
    g = rows.set_index(["policy", "seed"]).goodput
    seeds = sorted(rows.seed.unique())
    return {p: max(1 - g.get((p, s), 0.0) / g[("static-peak", s)] for s in seeds)
            for p in rows.policy.unique() if all(("static-peak", s) in g.index for s in seeds)}


def _per_policy(rows: pd.DataFrame, loss: dict[str, float]) -> pd.DataFrame:
    """Per policy: mean and least goodput, mean GPU-s held and ``worst_loss``."""
    agg = rows.groupby("policy").agg(goodput=("goodput", "mean"), goodput_min=("goodput", "min"),
                                     gpu_s=("gpu_s_held", "mean"))
    return agg.assign(worst_loss=[loss.get(p, float("nan")) for p in agg.index])


def rightsize(rows: pd.DataFrame, multipliers: list[float], tol: float) -> dict:
    """The right-sized static plan: the smallest multiplier whose goodput is within ``tol`` of
    static-peak's on **every** right-size seed (``worst_loss``), so that the choice carries to other
    seeds. ``rate_x`` 1.0 when none passes; ``rightsize``: per policy the mean goodput and GPU-s
    held, the worst seed's goodput and its relative loss against static-peak on that seed."""
    if not len(rows):
        return {}
    loss = worst_loss(rows)
    ok = [m for m in sorted(multipliers) if loss.get(f"static-x{m:g}", 1.0) <= tol]
    return {"rate_x": ok[0] if ok else 1.0,
            "rightsize": [{"policy": p, **r} for p, r in _per_policy(rows, loss).to_dict("index").items()]}


def peak_gpus(instances: pd.DataFrame, params: Params) -> int | None:
    """GPUs static-peak's plan holds on the first report seed (``gpu_cap: static-peak``)."""
    sub = instances[(instances.phase == "report") & (instances.policy == "static-peak")
                    & (instances.seed == params.report.seeds[0])] if len(instances) else instances
    return int(sub.gpus.astype(str).str.split(",").explode().nunique()) if len(sub) else None


def report_arms(params: Params, choice: dict) -> list[Arm]:
    """Stage 2 (module docstring)."""
    ctl = controller(params, choice["controller"])
    seg, first = params.report, params.report.seeds[0]
    arms = []
    for s in seg.seeds:
        arms.append(_arm(params, "report", "adaptive", seg, s, ctl, adaptive=True))
        if params.fixed_workflow and s in seg.seeds[:params.fixed_workflow_seeds]:
            arms.append(_arm(params, "report", "adaptive-fixed-workflow", seg, s, ctl, adaptive=True,
                             fixed_workflow=True))
        if choice["rate_x"] < 1.0:
            arms.append(_arm(params, "report", "static-right", seg, s, ctl, adaptive=False, rate_x=choice["rate_x"]))
    arms += [_arm(params, "sweep", f"adaptive-startup-{x:g}s", seg, first, ctl, adaptive=True, startup_fixed_s=x,
                  load_gb_per_s=1e9) for x in params.startup_sweep]
    cap = choice.get("gpu_cap", params.gpu_cap)
    if isinstance(cap, int):
        arms.append(_arm(params, "cap", f"adaptive-cap-{cap}", seg, first, ctl, adaptive=True, gpu_cap=cap))
    if params.uncompressed is not None:
        arms += [_arm(params, "uncompressed", "adaptive", params.uncompressed, s, ctl, adaptive=True,
                      compression=1.0) for s in params.uncompressed.seeds]
    return arms


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The cells' rows in one table; a column empty in one cell takes its type from the others."""
    cols = list(dict.fromkeys(c for f in frames for c in f.columns))
    full = [f.dropna(axis=1, how="all") for f in frames if len(f)]
    return pd.concat(full, ignore_index=True).reindex(columns=cols) if full else pd.DataFrame(columns=cols)


TABLES = ("results", "tasks", "decisions", "instances", "memory", "hourly")
#: what ``publish`` copies beside the run folders (a few hundred kB)
PUBLISHED = ("summary.md", "choices.json", "memory.png", "migrations.png", "goodput.png", "results.parquet",
             "tasks.parquet", "hourly.parquet", "memory.parquet", "decisions.parquet")


def _report(cell, tables) -> None:
    r = tables["results"].iloc[0]
    print(f"{r.phase} {r.policy} seed {r.seed}: goodput {r.goodput:.4f}, {r.gpu_s_held:.4g} GPU-s held, "
          f"{r.reserved_gb_s:.4g} GB*s, wall {r.wall_s:.1f} s", flush=True)


def run(params: Params, ctx: RunContext) -> None:
    from experiments.kinds._reselection_report import plots, summary_md
    from experiments.executor import is_done
    from harness.workload import azure_or_synthetic
    t0 = time.perf_counter()
    problems, tokens, cluster, gpu = setup(params)
    trace, source = azure_or_synthetic(params.trace, data_dir=params.data_dir, seed=ctx.seed)
    source = Path(source).name if Path(source).is_file() else source
    common = (params, problems, tokens, cluster, gpu)
    on_done = _report if ctx.progress else None

    def cells(arms: list[Arm]) -> list[Cell]:
        return [Cell(a.name, arm_cell, (a, *common, trace, source), tables=TABLES, label=a.policy) for a in arms]

    oracle = _arm(params, "report", "oracle-hourly", params.report, params.report.seeds[0],
                  controller(params), adaptive=True)
    oracles = [oracle]
    if params.oracle_pack is not None:
        oracles.append(oracle.model_copy(update={
            "policy": PACKED, "controller": oracle.controller.model_copy(update={"pack_busy": params.oracle_pack})}))
    stage1 = [*(Cell(o.name, oracle_cell, (o, *common), tables=("results", "hourly"), label="oracle") for o in oracles),
              *cells(choice_arms(params))]
    skipped = sum(is_done(ctx, c) for c in stage1)
    res1 = run_cells(ctx, stage1, desc="reselection: choices", on_done=on_done)
    choice = choose(_concat([r["results"] for r in res1]), params)
    if params.gpu_cap == "static-peak":
        choice["gpu_cap"] = peak_gpus(_concat([r["instances"] for r in res1 if "instances" in r]), params)
    atomic_write_text(ctx.run_dir / "choices.json", json.dumps(choice, indent=1))
    stage2 = cells(report_arms(params, choice))
    skipped += sum(is_done(ctx, c) for c in stage2)
    res2 = run_cells(ctx, stage2, desc="reselection: report", on_done=on_done)
    frames = {t: _concat([r[t] for r in res1 + res2 if t in r]) for t in TABLES}
    for t, df in frames.items():
        atomic_write_parquet(ctx.run_dir / f"{t}.parquet", df)
    plots(frames, params, ctx.run_dir)
    n = len(stage1) + len(stage2)
    wall = (f"Wall time of this invocation: {time.perf_counter() - t0:.0f} s for {n} cells"
            + (f", {skipped} of them finished by an earlier invocation (resumed: not the full run's time)."
               if skipped else " (the full run)."))
    atomic_write_text(ctx.run_dir / "summary.md", summary_md(frames, params, source, choice, wall,
                                                                  len(cluster.gpus)))
    if params.publish:
        for name in PUBLISHED:
            if (ctx.run_dir / name).exists():
                shutil.copyfile(ctx.run_dir / name, ctx.run_dir.parent / name)
    print((ctx.run_dir / "summary.md").read_text())
