"""Selection and primitive-level execution together: deploy the tasks with a selector (as the paper
experiment does), then run every request of the orchestrated tasks through the orchestrator
(``harness.orchestration``) under each ``orchestration`` (``chain`` | ``teola``), with arrivals
from the task's trace replay (``harness.workload.cell_workload``, same cells as the paper
experiment).

Each cell (selector, trace, load, task, orchestration) is run by ``experiments.executor`` (local
processes or Ray) and written atomically to ``cells/`` (resumable with ``--run-id``). Outputs: ``results.parquet`` (one row per cell),
``requests.parquet`` (per request), ``deployments.parquet``, ``summary.md`` (chain vs teola).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from experiments.executor import Cell, run_cells
from selector.problem import TOL
from selector.taskspec import TaskList


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList = Field(description="deployed in this order (each sees the cluster "
                                                       "the previous ones left)")
    orchestrated: NameList = Field(description="tasks whose requests run through the "
                                                              "orchestrator; each needs orchestration: in its task file")
    cluster: str = "a6000x8"
    selectors: list[str] = Field(default=["flowmaker"], min_length=1)
    orchestrations: list[str] = Field(default=["chain", "teola"], min_length=1)
    chain_scheme: str = Field("llamadist-to", description="the scheme 'chain' runs (orchestrator.schemes)")
    traces: list[str] = Field(default=["conv"])
    loads_pct: list[float] = Field(default=[50, 100])
    requests: dict[str, int] = Field(default={"code": 212, "conv": 484},
                                     description="trace requests per cell (all tasks); the orchestrated "
                                                 "task gets its share")
    dispatch_overhead_s: float = Field(0.002, ge=0, description="per engine call (orchestrator docs)")
    time_limit_s: float = Field(default=30.0, gt=0)
    data_dir: str | None = None


def _check(params: Params) -> None:
    from harness.orchestration import OrchestrationError, scheme_for
    for o in params.orchestrations:
        try:
            scheme_for(o, chain_scheme=params.chain_scheme)
        except OrchestrationError as exc:
            raise UserError(f"field 'params.orchestrations': {exc}") from None
    extra = sorted(set(params.orchestrated) - set(params.tasks))
    if extra:
        raise UserError(f"field 'params.orchestrated': {', '.join(extra)} not in params.tasks")
    for k in params.traces:
        if k not in params.requests:
            raise UserError(f"field 'params.requests': no request count for trace '{k}'")


def cell_frame(params, bound, k, trace, rates, gpu, slo, acc_ok, key, orch, load_pct: float,
               seed: int) -> pd.DataFrame:
    """One (selector, trace, load, task, orchestration) cell: the task's requests of the cell's
    workload run on its plan's instances."""
    from harness.orchestration import run_requests
    from harness.workload import cell_workload
    sel, tr, load, task = key
    wl = cell_workload(trace, rates, load=load_pct / 100.0, n_requests=params.requests[tr], seed=seed)
    mask = wl.task == k
    arrivals = wl.arrival_s[mask]
    if bound is None:   # the task was not placed: every request fails
        res, lat = [], np.full(len(arrivals), np.nan)
    else:
        res = run_requests(bound, arrivals, gpu=gpu, orchestration=orch, chain_scheme=params.chain_scheme,
                           seed=seed, dispatch_overhead_s=params.dispatch_overhead_s)
        lat = np.array([r.latency_s for r in res])
    return pd.DataFrame({"selector": sel, "trace": tr, "load_pct": load, "task": task,
                       "workflow": bound.workflow if bound else "-", "app": bound.app.name if bound else "-",
                       "orchestration": orch, "request": np.flatnonzero(mask), "arrival_s": arrivals,
                       "latency_s": lat, "latency_slo_s": slo, "good": acc_ok & (lat <= slo + TOL),
                       "n_primitives": [r.n_primitives for r in res] if res else 0,
                       "output": [repr(sorted(r.outputs.items())) for r in res] if res else ""})


def run(params: Params, ctx: RunContext) -> None:
    from experiments.kinds.paper_goodput_cost import deploy_all
    from harness.orchestration import OrchestrationError, bind
    from harness.workload import azure_or_synthetic
    from selector.errors import ProblemError
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import load_task

    _check(params)
    try:
        cluster0, gpu = load_cluster_file(params.cluster)   # a name or a path
        catalog = load_catalog()
        problems = [resolve_task(t, catalog=catalog, cluster=cluster0, gpu=gpu) for t in params.tasks]
        specs = {t: load_task(t) for t in params.tasks}
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    deps = deploy_all(params, problems, ctx)
    bound = {}
    for label, seq in deps.items():
        insts = {i.id: i for _, plan in seq if plan.deployment is not None for i in plan.deployment.instances}
        for k, (p, plan) in enumerate(seq):
            if p.task.name in params.orchestrated and plan.deployment is None:
                bound[(label, p.task.name)] = (k, None, p.task.latency_slo_s, False)
            elif p.task.name in params.orchestrated:
                try:
                    b = bind(specs[p.task.name], plan.deployment, insts)
                except OrchestrationError as exc:
                    raise UserError(f"{label}: {exc}") from None
                acc = {m.name: m.accuracy >= p.task.accuracy_slo - TOL for m in p.models}
                ok = all(acc[i.model] for ins in b.stage_instances.values() for i in ins)
                bound[(label, p.task.name)] = (k, b, p.task.latency_slo_s, ok)
    traces = {}
    for kind in params.traces:
        try:
            traces[kind] = azure_or_synthetic(kind, data_dir=params.data_dir, seed=ctx.seed)
        except KeyError as exc:
            raise UserError(f"field 'params.traces': {exc.args[0]}") from None
    rates = [p.task.arrival_rate_rps for p in problems]
    cells = []
    for s in deps:
        for tr in params.traces:
            for ld in params.loads_pct:
                for t in params.orchestrated:
                    k, b, slo, ok = bound[(s, t)]
                    key = (s, tr, f"{ld:g}", t)
                    cells += [Cell("__".join(key + (o,)), cell_frame,
                                   (params, b, k, traces[tr][0], rates, gpu, slo, ok, key, o, ld, ctx.seed))
                              for o in params.orchestrations]
    req = pd.concat(run_cells(ctx, cells), ignore_index=True)
    req["load_pct"] = req.load_pct.astype(float)
    atomic_write_parquet(ctx.run_dir / "requests.parquet", req.drop(columns="output"))
    res = summarise(req, bound, problems[0].cluster.prices)
    atomic_write_parquet(ctx.run_dir / "results.parquet", res)
    md = summary_md(res, bound, params, {k: v[1] for k, v in traces.items()})
    atomic_write_text(ctx.run_dir / "summary.md", md)
    print(md)


def summarise(req: pd.DataFrame, bound: dict, prices: dict[str, float] | None) -> pd.DataFrame:
    """Per (selector, trace, load, task, orchestration): latency, goodput and the dollars of the
    GPUs the task's plan instances hold over the cell (``harness.billing.gpu_bill``; residency =
    last completion or arrival, the cell's first arrival at 0)."""
    from harness.billing import gpu_bill
    keys = ["selector", "trace", "load_pct", "task", "workflow", "app", "orchestration"]
    g = req.groupby(keys, sort=False)
    out = g.latency_s.agg(requests="count", latency_mean_s="mean", latency_p50_s="median",
                          latency_p99_s=lambda x: float(np.percentile(x, 99))).reset_index()
    out["goodput"] = g.good.mean().to_numpy()
    out["latency_slo_s"] = g.latency_slo_s.first().to_numpy()
    bills = []
    for key, cell in g:
        b = bound[(key[0], key[3])][1]
        insts = {i.id: i for ins in b.stage_instances.values() for i in ins}.values() if b is not None else ()
        end = float(np.nanmax(np.append((cell.arrival_s + cell.latency_s).to_numpy(), cell.arrival_s.max())))
        bills.append(gpu_bill(((i, 0.0, end) for i in insts), prices))
    out["gpu_s_held"] = [x for x, _ in bills]
    out["usd"] = [y for _, y in bills]
    return out


def summary_md(res: pd.DataFrame, bound: dict, params: Params, sources: dict) -> str:
    from harness.billing import usd_cell
    lines = ["# Plan orchestration: chain vs teola on deployed plans", "",
             f"Selectors {', '.join(params.selectors)}; `chain` = `{params.chain_scheme}`, `teola` = `teola`; "
             f"trace source: {', '.join(f'{k}: {v}' for k, v in sources.items())}.", "", "## Plans", "",
             "| selector | task | workflow | app | stage: instances (model tp x pp) | reused stages |",
             "|---|---|---|---|---|---|"]
    for (sel, task), (_, b, _, _) in bound.items():
        if b is None:
            lines.append(f"| {sel} | {task} | not placed | - | - | - |")
            continue
        st = "; ".join(f"{s}: " + ", ".join(f"{i.model} {i.tp}x{i.pp}" for i in ins)
                       for s, ins in b.stage_instances.items())
        lines.append(f"| {sel} | {task} | {b.workflow} | {b.app.name} | {st} | {', '.join(b.reused) or '-'} |")
    lines += ["", "## Latency and goodput", "",
              "| selector | task | trace | load | requests | orchestration | mean (s) | p50 (s) | p99 (s) | "
              "goodput | SLO (s) | GPU-s held | USD |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.itertuples():
        lines.append(f"| {r.selector} | {r.task} | {r.trace} | {r.load_pct:g}% | {r.requests} | {r.orchestration} | "
                     f"{r.latency_mean_s:.3f} | {r.latency_p50_s:.3f} | {r.latency_p99_s:.3f} | {r.goodput:.3f} | "
                     f"{r.latency_slo_s:.2f} | {r.gpu_s_held:.4g} | {usd_cell(r.usd)} |")
    if {"chain", "teola"} <= set(res.orchestration):
        lines += ["", "## Teola speedup over chain (same requests, same instances)", "",
                  "| selector | task | trace | load | mean | p99 |", "|---|---|---|---|---|---|"]
        idx = ["selector", "task", "trace", "load_pct"]
        c = res[res.orchestration == "chain"].set_index(idx)
        t = res[res.orchestration == "teola"].set_index(idx)
        for key in c.index.intersection(t.index):
            lines.append(f"| {' | '.join(str(x) for x in key[:3])} | {key[3]:g}% | "
                         f"{c.loc[key, 'latency_mean_s'] / t.loc[key, 'latency_mean_s']:.2f}x | "
                         f"{c.loc[key, 'latency_p99_s'] / t.loc[key, 'latency_p99_s']:.2f}x |")
    lines += ["", "GPU-s held = whole GPUs the task's plan instances occupy (a shared GPU once) x the cell's "
              "residency (first arrival to last completion or arrival); USD = those GPU-hours x the cluster's "
              "price per GPU-hour (configs/prices.yaml; `-` without one; docs/metrics.md)."]
    lines += ["", "Only the orchestrated tasks' requests run (on their plan's instances); see docs/harness.md, "
              "\"Orchestrated requests\", for what this leaves out."]
    return "\n".join(lines) + "\n"
