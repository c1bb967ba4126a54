"""The paper's end-to-end comparison: deploy the seven tasks in sequence on 8x A6000 with each
selector, replay {code, conv} x load levels on the simulated cluster, measure goodput and cost.

Each cell (selector, trace, load) is written atomically to ``cells/`` when done; a rerun
with ``--run-id`` skips finished cells. Outputs: ``results.parquet`` (one row per cell),
``tasks.parquet`` (per cell and task), ``deployments.parquet``, ``goodput.png``, ``cost.png``
and ``summary.md`` (ratios against the baselines next to the paper's figures).

``sharing`` (spec section 9) lists the cluster sharing modes to deploy under (default: the
cluster file's own, ``sharing:``, else memory); each mode deploys the seven tasks afresh and
replays every cell, rows carry a ``sharing`` column, and a compute-mode cell, deployment file or
plot carries ``compute`` in its name.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, UserError, atomic_write_parquet, atomic_write_text


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: list[str] = Field(min_length=1)
    cluster: str = "a6000x8"
    selectors: list[str] = Field(min_length=1, description="registry names; 'name:setting' for routellm")
    traces: list[str] = Field(default=["code", "conv"])
    loads_pct: list[float] = Field(default=[25, 50, 75, 100])
    requests: dict[str, int] = Field(default={"code": 212, "conv": 484},
                                     description="requests per cell, by trace (first N of the trace)")
    price_per_gb_s: float = Field(default=1e-6, ge=0, description="USD per GB-second of reserved memory")
    time_limit_s: float = Field(default=30.0, gt=0)
    data_dir: str | None = Field(default=None, description="shared data folder; default $FLOWMAKER_SHARED_DATA "
                                                           "or ../shared/data")
    scheduler: str = "vllm"
    sharing: list[Literal["memory", "compute"]] | None = Field(
        default=None, min_length=1, description="cluster sharing modes (spec section 9); default: the cluster file's")


def _solver(spec: str):
    from solvers.registry import get_solver
    name, _, setting = spec.partition(":")
    try:
        return get_solver(name, **({"setting": setting} if setting else {}))
    except (KeyError, TypeError) as exc:
        raise UserError(f"field 'params.selectors': {spec}: {exc}") from None


def _label(spec: str) -> str:
    return spec.replace(":", "-")


def _tag(sharing: str) -> str:
    return "" if sharing == "memory" else f"-{sharing}"


def in_sharing(problems: list, sharing: str) -> list:
    """``problems`` with ``cluster.sharing: sharing``."""
    from selector.problem import parse_problem
    out = []
    for p in problems:
        d = p.to_dict()
        d["cluster"]["sharing"] = sharing
        out.append(parse_problem(d))
    return out


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
        atomic_write_text(ctx.run_dir / "deployments" / f"{_label(spec)}{_tag(mode)}.json",
                          json.dumps({"cluster": cluster.model_dump(mode="json")}, indent=1))
    return out, rows


def resolve_all(params) -> tuple[list, str, list[dict]]:
    """The tasks' resolved problems on ``params.cluster``, its GPU name, and per task
    ``{workflow: [(prompt, output) tokens per stage]}``."""
    from selector.errors import ProblemError
    from selector.resolve import load_catalog, load_cluster_file, resolve_task
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


def run(params: Params, ctx: RunContext) -> None:
    from profiler.engine import EngineConfig
    from harness.replay import replay
    from harness.workload import cell_workload

    problems, gpu, tokens = resolve_all(params)
    deps, dep_rows = {}, []
    for mode in params.sharing or [problems[0].cluster.sharing]:
        deps[mode], rows = _deploy_mode(params, in_sharing(problems, mode), ctx)
        dep_rows += rows
    atomic_write_parquet(ctx.run_dir / "deployments.parquet", pd.DataFrame(dep_rows))
    traces = load_traces(params, ctx.seed)
    cells = [(m, s, k, ld) for m in deps for s in deps[m] for k in params.traces for ld in params.loads_pct]
    engine = EngineConfig(scheduler=params.scheduler)
    rates = [p.task.arrival_rate_rps for p in problems]
    bar = tqdm(total=len(cells), disable=not ctx.progress, desc="cells", unit="cell")
    simulated = 0

    def cell_name(mode: str, label: str, kind: str, load: float) -> str:
        return f"{label}__{kind}__{load:g}" + ("" if mode == "memory" else f"__{mode}")

    for mode, label, kind, load in cells:
        path = ctx.cell_path(cell_name(mode, label, kind, load))
        if path.exists():
            bar.update()
            continue
        trace, source = traces[kind]
        if kind not in params.requests:
            raise UserError(f"field 'params.requests': no request count for trace '{kind}'")
        wl = cell_workload(trace, rates, load=load / 100.0, n_requests=params.requests[kind], seed=ctx.seed)
        seen = [p for p, _ in deps[mode][label]]
        res = replay(seen, [plan.deployment for _, plan in deps[mode][label]], tokens, wl, gpu=gpu,
                     price_per_gb_s=params.price_per_gb_s, engine=engine)
        row = {"sharing": mode, "selector": label, "trace": kind, "load_pct": load, "trace_source": source,
               **res.summary, "per_task": json.dumps(res.per_task)}
        atomic_write_parquet(path, pd.DataFrame([row]))
        simulated += res.summary["requests"]
        bar.set_postfix_str(f"{label} ({mode}) {kind} {load:g}%: {simulated} requests simulated")
        bar.update()
    bar.close()
    df = pd.concat([pd.read_parquet(ctx.cell_path(cell_name(*c))).assign(sharing=c[0]) for c in cells],
                   ignore_index=True)
    atomic_write_parquet(ctx.run_dir / "results.parquet", df.drop(columns=["per_task"]))
    tasks = [dict(sharing=r.sharing, selector=r.selector, trace=r.trace, load_pct=r.load_pct, **t)
             for r in df.itertuples() for t in json.loads(r.per_task)]
    atomic_write_parquet(ctx.run_dir / "tasks.parquet", pd.DataFrame(tasks))
    dep_df = pd.read_parquet(ctx.run_dir / "deployments.parquet")
    parts = []
    for mode in deps:
        plots(df[df.sharing == mode], ctx.run_dir, suffix=_tag(mode))
        text = summary_md(df[df.sharing == mode], dep_df[dep_df.sharing == mode])
        parts.append(text if len(deps) == 1 else text.replace("summary\n", f"summary (sharing: {mode})\n", 1))
    if len(deps) > 1:
        parts.append(by_sharing_md(df))
    atomic_write_text(ctx.run_dir / "summary.md", "\n".join(parts))
    print((ctx.run_dir / "summary.md").read_text())


def by_sharing_md(df: pd.DataFrame, ref: str = "flowmaker") -> str:
    """``ref``'s goodput (and cost) per trace and load, one column per sharing mode."""
    sub = df[df.selector == ref]
    if sub.empty:
        return ""
    good = sub.pivot_table(index=["trace", "load_pct"], columns="sharing", values="goodput", sort=False)
    cost = sub.pivot_table(index=["trace", "load_pct"], columns="sharing", values="cost_usd", sort=False)
    modes = list(good.columns)
    lines = [f"# {ref} by sharing mode (spec section 9)", "",
             "| trace | load % | " + " | ".join(f"goodput ({m})" for m in modes) + " | "
             + " | ".join(f"cost USD ({m})" for m in modes) + " |",
             "|---|---|" + "---|" * (2 * len(modes))]
    for (trace, load), g in good.iterrows():
        c = cost.loc[(trace, load)]
        lines.append(f"| {trace} | {load:g} | " + " | ".join(f"{g[m]:.3f}" for m in modes) + " | "
                     + " | ".join(f"{c[m]:.4g}" for m in modes) + " |")
    return "\n".join(lines) + "\n"



PAPER = {
    "langchain": "goodput 1.13-12.84x higher (mean 5.2x), cost 2.2-4x lower (mean 2.93x); LangChain: 15 instances / "
                 "290 GB for six tasks, seventh not placed; FlowMaker: all seven with 3-5 instances",
    "routellm-max-quality": "RouteLLM max-quality: 5.8% higher mean goodput than FlowMaker, 206-235 GB, "
                            "cost 2.06-3.84x higher (mean 2.95x); meets the accuracy SLO 100%",
    "routellm-balanced": "balanced: accuracy SLO met 62.6-65.6% of the time, goodput 1.52x lower",
    "routellm-min-cost": "min-cost: accuracy SLO met 34.9-36.8% of the time, goodput 2.62x lower",
    "murakkab": "low load: goodput up to 1.46x (mean 1.21x), 1.84-3.15x cheaper (mean 2.23x); high load: goodput "
                "1.45-10.14x (mean 4.73x), cost 1.56-2.77x lower (mean 1.95x)",
    "flowmaker-noreuse": "reuse: low load cost 1.47-1.73x lower (mean 1.61x), high load 1.04-1.42x (mean 1.31x)",
}


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return float("inf") if a > 0 else float("nan")
    return a / b


def _span(xs) -> str:
    xs = [x for x in xs if np.isfinite(x)]
    if not xs:
        return "n/a"
    return f"{min(xs):.2f}-{max(xs):.2f}x (mean {np.mean(xs):.2f}x)"


def ratios(df: pd.DataFrame, ref: str, base: str, loads=None) -> tuple[list[float], list[float]]:
    """Per cell: goodput(ref)/goodput(base) and cost(base)/cost(ref)."""
    g, c = [], []
    a = df[df.selector == ref].set_index(["trace", "load_pct"])
    b = df[df.selector == base].set_index(["trace", "load_pct"])
    for key in a.index.intersection(b.index):
        if loads is not None and key[1] not in loads:
            continue
        g.append(_ratio(a.loc[key, "goodput"], b.loc[key, "goodput"]))
        c.append(_ratio(b.loc[key, "cost_usd"], a.loc[key, "cost_usd"]))
    return g, c


def summary_md(df: pd.DataFrame, deps: pd.DataFrame, ref: str = "flowmaker") -> str:
    lines = ["# Paper goodput/cost experiment: summary", "",
             f"Cells: {len(df)} ({df.selector.nunique()} selectors x {df.trace.nunique()} traces x "
             f"{df.load_pct.nunique()} loads); trace source: {', '.join(sorted(set(df.trace_source)))}.", "",
             "| selector | goodput (mean) | cost USD (mean) | instances | GB reserved | tasks unplaced | "
             "latency mean s | accuracy-SLO share |", "|---|---|---|---|---|---|---|---|"]
    for sel, g in df.groupby("selector", sort=False):
        lines.append(f"| {sel} | {g.goodput.mean():.3f} | {g.cost_usd.mean():.4g} | {int(g.instances.iloc[0])} | "
                     f"{g.gb_reserved.iloc[0]:.1f} | {int(g.tasks_unplaced.iloc[0])} | "
                     f"{g.latency_mean_s.mean():.2f} | {g.accuracy_ok_share.mean():.3f} |")
    if ref in set(df.selector):
        lines += ["", f"## {ref} against each baseline (per cell: goodput ratio {ref}/baseline, cost ratio "
                      f"baseline/{ref})", "", "| baseline | loads | goodput ratio | cost ratio | paper |",
                  "|---|---|---|---|---|"]
        for base in [s for s in df.selector.unique() if s != ref]:
            for name, loads in (("all", None), ("25-50%", (25, 50)), ("75-100%", (75, 100))):
                g, c = ratios(df, ref, base, loads)
                if g:
                    paper = PAPER.get(base, "") if name == "all" else ""
                    lines.append(f"| {base} | {name} | {_span(g)} | {_span(c)} | {paper} |")
    lines += ["", "## Deployments", "", "| selector | task | status | placed | workflow | new instances | "
              "new GB | models | violates spec |", "|---|---|---|---|---|---|---|---|---|"]
    for r in deps.itertuples():
        lines.append(f"| {r.selector} | {r.task} | {r.status} | {r.placed} | {r.workflow} | {r.instances_new} | "
                     f"{r.gb_new:.1f} | {r.models} | {r.spec_violation or ''} |")
    lines += ["", "Ratios use per-cell values; `inf` cells (baseline goodput 0) are left out of the spans. "
              "Why our numbers differ from the paper's: docs/baselines.md."]
    return "\n".join(lines) + "\n"


def plots(df: pd.DataFrame, out, suffix: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for metric, ylabel, fname in (("goodput", "goodput (share of requests)", "goodput.png"),
                                  ("cost_usd", "cost (USD)", "cost.png")):
        traces = list(df.trace.unique())
        fig, axes = plt.subplots(1, len(traces), figsize=(5.5 * len(traces), 4), squeeze=False)
        for ax, tr in zip(axes[0], traces):
            sub = df[df.trace == tr]
            sels = list(sub.selector.unique())
            loads = sorted(sub.load_pct.unique())
            width = 0.8 / len(sels)
            for i, sel in enumerate(sels):
                v = sub[sub.selector == sel].set_index("load_pct").reindex(loads)[metric]
                ax.bar(np.arange(len(loads)) + i * width, v.to_numpy(), width, label=sel)
            ax.set_xticks(np.arange(len(loads)) + 0.4 - width / 2, [f"{ld:g}%" for ld in loads])
            ax.set_title(f"{tr} trace")
            ax.set_xlabel("load")
            ax.set_ylabel(ylabel)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        fig.savefig(out / fname.replace(".png", f"{suffix}.png"), dpi=120)
        plt.close(fig)
