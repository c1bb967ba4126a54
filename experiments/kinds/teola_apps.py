"""Teola apps experiment: apps x Poisson rates x schemes in simulation, plus ablations.

Writes per-request latencies (one parquet cell per app/rate/scheme, resumable), ``summary.parquet``
(mean/p99 per cell), ``speedups.parquet`` (Teola vs the best baseline), ``ablation.parquet``,
PNG plots and ``summary.md`` with the paper's figures beside ours.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from orchestrator import BASELINES, get_scheme, load_app, simulate
from orchestrator.engines import profiler_llm_instances

PAPER_SPEEDUP = {"search_gen": "1.79x", "naive_rag": "1.62x (low) / 1.67x (high)",
                 "advanced_rag": "2.09x (low) / 2.03x (high)", "contextual_rag": "1.06-1.59x",
                 # the public Ayo code's own examples: optimised vs unoptimised DAG, one query (configs/apps/*_ayo.yaml)
                 "naive_rag_ayo": "Ayo README: 3.72 s -> 1.97 s = 1.89x vs its unoptimised DAG",
                 "advanced_rag_ayo": "Ayo logs: 7.415 s -> 3.171 s = 2.34x vs its unoptimised DAG"}
#: Teola without passes on Teola's runtime: the "unoptimised DAG" the Ayo README compares against
UNOPTIMISED = "teola-no-par-pipe"
ABLATION_SCHEMES = ("teola", "teola-no-prune", "teola-no-stage", "teola-no-prefill_split",
                    "teola-no-decode_pipeline", "teola-no-par-pipe", "teola-blind", "teola-topo-lowest")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    apps: tuple[str, ...] = ("search_gen", "naive_rag", "advanced_rag", "contextual_rag")
    # "high" = the largest rate on a 1-2-4 grid (0.25-0.5-1 for the slow apps) at which the best
    # baseline's mean stays under 1.6x its one-query latency; beyond it the iteration-level LLM
    # engines saturate and every scheme's latency grows with the run length (ratios then only
    # measure queue length). Chosen from the baselines alone, never from Teola's numbers.
    rates_rps: dict[str, tuple[float, ...]] = Field(default_factory=lambda: {
        "search_gen": (1.0, 4.0), "naive_rag": (1.0, 2.0), "advanced_rag": (0.5, 2.0), "contextual_rag": (0.25, 0.5)})
    n_queries: int = Field(150, ge=1, description="queries per cell")
    schemes: tuple[str, ...] = ("teola",) + BASELINES
    ablation_app: str = "advanced_rag"
    ablation_rate_rps: float = Field(2.0, gt=0)
    ablation_schemes: tuple[str, ...] = ABLATION_SCHEMES
    dispatch_overhead_s: float = Field(0.002, ge=0, description="per batch dispatch (communication)")
    llm_latency: Literal["table", "profiler"] = "table"
    profiler_gpu: str = Field("a6000", description="stand-in for the paper's RTX 3090 (not in the catalog)")


def _engines(app, scheme, p: Params):
    over = {}
    if p.llm_latency == "profiler":
        from orchestrator.engines import load_engine_spec
        for name, b in app.engines.items():
            spec = load_engine_spec(b.spec)
            if spec.kind == "llm" and spec.model in ("llama-2-7b", "llama-2-13b"):
                tp = 2 if spec.model == "llama-2-13b" else 1
                cfg = spec.engine.model_copy(update={"prefix_caching": scheme.prefix_caching})
                over[name] = profiler_llm_instances(spec.model, p.profiler_gpu, tp=tp, n_instances=b.instances,
                                                    kv_capacity_tokens=cfg.kv_capacity_tokens, config=cfg)
    return app.build_engines(prefix_caching=scheme.prefix_caching, overrides=over)


def _cell(ctx: RunContext, p: Params, app_name: str, rate: float, scheme_name: str, n: int) -> pd.DataFrame:
    path = ctx.cell_path(f"{app_name}__{rate:g}rps__{scheme_name}__n{n}")
    if path.exists():
        return pd.read_parquet(path)
    app, scheme = load_app(app_name), get_scheme(scheme_name)
    seed = ctx.seed
    rng = np.random.default_rng([seed, abs(int(rate * 1000)), len(app_name)])
    cfgs = app.query_configs(n, rng)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n)) if n > 1 else np.zeros(1)
    res = simulate(app.template(), cfgs, arrivals, _engines(app, scheme, p), scheme=scheme, seed=seed,
                   dispatch_overhead_s=p.dispatch_overhead_s)
    df = pd.DataFrame({"app": app_name, "rate_rps": rate, "scheme": scheme_name, "qid": [r.qid for r in res],
                       "arrival_s": [r.arrival_s for r in res], "latency_s": [r.latency_s for r in res],
                       "n_primitives": [r.n_primitives for r in res], "doc_tokens": [c.doc_tokens for c in cfgs]})
    atomic_write_parquet(path, df)
    return df


def _summarise(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby(["app", "rate_rps", "scheme"], sort=False)["latency_s"]
    return g.agg(mean_latency_s="mean", p99_latency_s=lambda x: float(np.percentile(x, 99)),
                 n_queries="count").reset_index()


def _speedups(summary: pd.DataFrame, schemes: tuple[str, ...]) -> pd.DataFrame:
    rows = []
    base = [s for s in schemes if s in BASELINES]
    for (app, rate), grp in summary.groupby(["app", "rate_rps"], sort=False):
        by = grp.set_index("scheme")
        best = by.loc[base, "mean_latency_s"].idxmin()
        rows.append({"app": app, "rate_rps": rate, "teola_mean_s": by.loc["teola", "mean_latency_s"],
                     "best_baseline": best, "best_baseline_mean_s": by.loc[best, "mean_latency_s"],
                     "speedup_mean": by.loc[best, "mean_latency_s"] / by.loc["teola", "mean_latency_s"],
                     "speedup_p99": by.loc[best, "p99_latency_s"] / by.loc["teola", "p99_latency_s"],
                     "speedup_vs_unoptimised": (by.loc[UNOPTIMISED, "mean_latency_s"] / by.loc["teola", "mean_latency_s"]
                                                if UNOPTIMISED in by.index else float("nan")),
                     "paper_speedup": PAPER_SPEEDUP.get(app, "")})
    return pd.DataFrame(rows)


def _plot(summary: pd.DataFrame, ablation: pd.DataFrame, ctx: RunContext) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    apps = list(dict.fromkeys(summary["app"]))
    fig, axes = plt.subplots(1, len(apps), figsize=(4.2 * len(apps), 3.4), squeeze=False)
    for ax, app in zip(axes[0], apps):
        s = summary[summary.app == app]
        for scheme, grp in s.groupby("scheme", sort=False):
            ax.plot(grp.rate_rps, grp.mean_latency_s, marker="o", label=scheme)
        ax.set(title=app, xlabel="request rate (req/s)", ylabel="mean latency (s)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.run_dir / "latency_vs_rate.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    a = ablation[ablation.setting == "load"]
    ax.barh(a.scheme, a.mean_latency_s)
    ax.set(xlabel="mean latency (s)", title="ablation (load)")
    fig.tight_layout()
    fig.savefig(ctx.run_dir / "ablation.png", dpi=120)
    plt.close(fig)


def _ablation(ctx: RunContext, p: Params, bar) -> pd.DataFrame:
    rows = []
    for setting, rate, n in [("one_query", 1.0, 1), ("load", p.ablation_rate_rps, p.n_queries)]:
        for s in p.ablation_schemes:
            df = _cell(ctx, p, p.ablation_app, rate, s, n)
            bar.update()
            rows.append({"setting": setting, "rate_rps": rate if n > 1 else 0.0, "scheme": s,
                         "mean_latency_s": df.latency_s.mean(), "p99_latency_s": float(np.percentile(df.latency_s, 99))})
    ab = pd.DataFrame(rows)
    for setting in ("one_query", "load"):
        m = ab.setting == setting
        ref = ab[m & (ab.scheme == "teola")].mean_latency_s.iloc[0]
        ab.loc[m, "slowdown_vs_teola"] = ab[m].mean_latency_s / ref
    return ab


def _markdown(sp: pd.DataFrame, ab: pd.DataFrame, p: Params) -> str:
    lines = ["# Teola apps (simulation)", "", f"LLM latency source: `{p.llm_latency}`; {p.n_queries} queries per cell; "
             "mean end-to-end latency; speedup = best baseline mean / Teola mean.", "",
             "| app | rate (req/s) | Teola mean (s) | best baseline | its mean (s) | speedup (mean) | speedup (p99) | "
             f"vs unoptimised DAG ({UNOPTIMISED}) | paper |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sp.itertuples():
        unopt = "-" if np.isnan(r.speedup_vs_unoptimised) else f"{r.speedup_vs_unoptimised:.2f}x"
        lines.append(f"| {r.app} | {r.rate_rps:g} | {r.teola_mean_s:.3f} | {r.best_baseline} | "
                     f"{r.best_baseline_mean_s:.3f} | {r.speedup_mean:.2f}x | {r.speedup_p99:.2f}x | {unopt} | "
                     f"{r.paper_speedup} |")
    lines += ["", f"## Ablation ({p.ablation_app})", "",
              "| setting | scheme | mean (s) | slowdown vs Teola |", "|---|---|---|---|"]
    for r in ab.itertuples():
        lines.append(f"| {r.setting} | {r.scheme} | {r.mean_latency_s:.3f} | {r.slowdown_vs_teola:.2f}x |")
    one = ab[(ab.setting == "one_query") & (ab.scheme == "teola-no-par-pipe")].slowdown_vs_teola.iloc[0]
    load = ab[ab.setting == "load"].set_index("scheme").mean_latency_s
    topo = (f"{100 * (1 - load['teola'] / load['teola-blind']):.1f}% lower" if "teola-blind" in load
            else "not run (no teola-blind in this config)")
    lines += ["", "| claim | paper | ours |", "|---|---|---|",
              f"| without parallelisation and pipelining (one query) | 1.73x slower | {one:.2f}x slower |",
              f"| topology-aware vs blind batching, mean latency under load | up to 19.2% lower | {topo} |"]
    return "\n".join(lines) + "\n"


def run(params: Params, ctx: RunContext) -> None:
    cells = [(a, r, s) for a in params.apps for r in params.rates_rps.get(a, (1.0,)) for s in params.schemes]
    bar = tqdm(total=len(cells) + 2 * len(params.ablation_schemes), disable=not ctx.progress, desc="teola cells")
    frames = []
    for a, r, s in cells:
        bar.set_postfix_str(f"{a} {r:g}rps {s}")
        frames.append(_cell(ctx, params, a, r, s, params.n_queries))
        bar.update()
    ab = _ablation(ctx, params, bar)
    bar.close()
    summary = _summarise(pd.concat(frames, ignore_index=True))
    sp = _speedups(summary, params.schemes)
    for name, df in [("summary", summary), ("speedups", sp), ("ablation", ab)]:
        atomic_write_parquet(ctx.run_dir / f"{name}.parquet", df)
    _plot(summary, ab, ctx)
    md = _markdown(sp, ab, params)
    atomic_write_text(ctx.run_dir / "summary.md", md)
    print(md)
