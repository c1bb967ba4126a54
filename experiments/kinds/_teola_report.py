"""Tables, plots and the markdown summary of the Teola apps experiment (``teola_apps``).

Per cell (app, rate, scheme, seed): mean and p99 latency. Across seeds: a scheme's latency is
the mean of its per-seed means; a speedup is the best baseline's over Teola's (the baseline with
the lowest mean over seeds), and its spread is the range of the per-seed ratios (each seed
against its own best baseline).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.kinds._reference import reference
from orchestrator import BASELINES
from orchestrator.schemes import DEFAULT_BASELINES, get_scheme

PAPER_SPEEDUP = reference("teola")["speedup"]     # app -> the paper's (or Ayo's) speedup (configs/reference)
CLAIMS = reference("teola")["claims"]
#: Teola without passes on Teola's runtime: the "unoptimised DAG" the Ayo README compares against
UNOPTIMISED = "teola-no-par-pipe"
PREFIX = "teola+prefix-cache"
#: Teola with cost-model-guided pass application (``orchestrator.guided``): Teola's figure where run
GUIDED = "teola-guided"
PREFIX_GUIDED = "teola+prefix-cache-guided"
ALL_PASSES = "teola"
_GUIDES = {GUIDED: ALL_PASSES, PREFIX_GUIDED: PREFIX}


def guided_base(scheme: str) -> str | None:
    """The scheme a guided one applies its passes from (None: not a guided scheme)."""
    return _GUIDES.get(scheme)


def prefix_of(schemes: Any) -> str:
    """The scheme that gives Teola-with-prefix-cache's figure: the guided one where it runs."""
    return PREFIX_GUIDED if PREFIX_GUIDED in schemes else PREFIX


def teola_of(schemes: Any) -> str:
    """The scheme that gives Teola's figure: the guided one where it runs, else all passes."""
    return GUIDED if GUIDED in schemes else ALL_PASSES


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and p99 latency per (app, rate, scheme, seed, capped)."""
    g = df.groupby(["app", "rate_rps", "scheme", "seed", "capped", "n_queries"], sort=False)["latency_s"]
    return g.agg(mean_latency_s="mean", p99_latency_s=lambda x: float(np.percentile(x, 99)),
                 n=("count")).reset_index()


def _pooled(s: pd.DataFrame, keys: list[str], col: str = "mean_latency_s") -> pd.Series:
    return s.groupby(keys, sort=False)[col].mean()


def _per_seed_ratio(grp: pd.DataFrame, base: list[str], scheme: str) -> pd.Series:
    by = grp.pivot_table(index="seed", columns="scheme", values="mean_latency_s")
    return by[base].min(axis=1) / by[scheme]


def like_for_like(baseline: str, schemes: Any) -> str:
    """The Teola scheme with ``baseline``'s engine features (its LLM prefix cache or none): the
    headline Teola against it, :func:`prefix_of` or :func:`teola_of` the schemes run (the latter
    where no prefix-cache Teola was run)."""
    pre = prefix_of(schemes)
    return pre if get_scheme(baseline).prefix_caching and pre in schemes else teola_of(schemes)


def speedups(summary: pd.DataFrame, isolated: pd.DataFrame, p: Any,
             passes: dict[tuple[str, float, str], str] | None = None) -> pd.DataFrame:
    """Teola vs the best baseline per (app, rate), with each rate's regime: ``low`` (the
    smallest), ``high`` (the largest below saturation), ``mid``, or ``saturated`` (the best
    baseline's mean above ``p.saturation`` x its isolated mean). The headline Teola
    (``teola_scheme``) has the best baseline's engine features (:func:`like_for_like`); the paper's
    engines (no prefix cache, :func:`teola_of`) and prefix caching (:func:`prefix_of`) are given
    beside it. ``passes``: what each guided scheme applied per (app, rate, scheme)."""
    base = [s for s in p.schemes if s in BASELINES]
    iso = _pooled(isolated, ["app", "scheme"])
    rows = []
    for (app, rate), grp in summary.groupby(["app", "rate_rps"], sort=False):
        mean, p99 = _pooled(grp, ["scheme"]), _pooled(grp, ["scheme"], "p99_latency_s")
        best = mean[base].idxmin()
        t = like_for_like(best, mean.index)
        r = _per_seed_ratio(grp, base, t)
        dflt = [b for b in base if b in DEFAULT_BASELINES and b in mean.index]
        best_d = mean[dflt].idxmin() if dflt else best
        t_d = like_for_like(best_d, mean.index)
        row = {"app": app, "rate_rps": rate, "teola_scheme": t, "teola_mean_s": mean[t], "best_baseline": best,
               "best_default": best_d, "speedup_vs_default": mean[best_d] / mean[t_d], "default_teola": t_d,
               "best_baseline_mean_s": mean[best], "speedup_mean": mean[best] / mean[t],
               "speedup_min": r.min(), "speedup_max": r.max(), "n_seeds": len(r),
               "speedup_p99": p99[best] / p99[t], "passes": (passes or {}).get((app, rate, t), ""),
               "saturated": bool(mean[best] > p.saturation * iso[(app, best)]),
               "best_isolated_s": iso[(app, best)], "paper_speedup": PAPER_SPEEDUP.get(app, "")}
        if UNOPTIMISED in mean.index:
            row["speedup_vs_unoptimised"] = mean[UNOPTIMISED] / mean[teola_of(mean.index)]
        for col, s in [("all_passes", ALL_PASSES), ("no_cache", teola_of(mean.index)), ("prefix_cache", prefix_of(mean.index))]:
            if s in mean.index:
                rs = _per_seed_ratio(grp, base, s)
                row.update({f"{col}_speedup": mean[best] / mean[s], f"{col}_min": rs.min(), f"{col}_max": rs.max(),
                            f"{col}_scheme": s})
        rows.append(row)
    return _regimes(pd.DataFrame(rows))


def _regimes(sp: pd.DataFrame) -> pd.DataFrame:
    sp = sp.sort_values(["app", "rate_rps"], kind="stable").reset_index(drop=True)
    sp["regime"] = np.where(sp.saturated, "saturated", "mid")
    for app, grp in sp.groupby("app", sort=False):
        low = grp.rate_rps.idxmin()
        ok = grp[~grp.saturated]
        high = ok.rate_rps.idxmax() if len(ok) else None
        if high is not None and high != low:
            sp.loc[high, "regime"] = "high"
        sp.loc[low, "regime"] = "low" if not sp.loc[low, "saturated"] else "low (saturated)"
    return sp


def ablation(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting (one query / load) and scheme: mean over seeds and slowdown vs Teola."""
    s = summarise(df)
    s["setting"] = np.where(s.n_queries == 1, "one_query", "load")
    rows = []
    for setting, grp in s.groupby("setting", sort=False):
        by = grp.pivot_table(index="seed", columns="scheme", values="mean_latency_s")
        for scheme in dict.fromkeys(grp.scheme):
            ratio = by[scheme] / by["teola"]
            rows.append({"setting": setting, "rate_rps": 0.0 if setting == "one_query" else grp.rate_rps.iloc[0],
                         "scheme": scheme, "mean_latency_s": by[scheme].mean(),
                         "slowdown_vs_teola": by[scheme].mean() / by["teola"].mean(),
                         "slowdown_min": ratio.min(), "slowdown_max": ratio.max()})
    return pd.DataFrame(rows)


def blind_of(scheme: str) -> str:
    """The FIFO-batching counterpart of a scheme (same passes): ``teola`` -> ``teola-blind``."""
    base = scheme.removesuffix("-topo-lowest").removesuffix("-blind")
    return f"{base}-blind"


def batch_cap(df: pd.DataFrame) -> pd.DataFrame:
    """Per cap setting and scheme: mean/p99 over seeds, and the reduction vs blind batching on
    the same graph (:func:`blind_of`)."""
    s = summarise(df)
    rows = []
    for (_, capped), grp in s.groupby(["app", "capped"], sort=False):
        mean, p99 = _pooled(grp, ["scheme"]), _pooled(grp, ["scheme"], "p99_latency_s")
        by = grp.pivot_table(index="seed", columns="scheme", values="mean_latency_s")
        for scheme in mean.index:
            blind = blind_of(scheme)
            red = 1 - by[scheme] / by[blind] if blind in by else pd.Series([np.nan])
            rows.append({"app": grp.app.iloc[0], "rate_rps": grp.rate_rps.iloc[0], "capped": bool(capped),
                         "scheme": scheme, "mean_latency_s": mean[scheme], "p99_latency_s": p99[scheme],
                         "lower_vs_blind": (1 - mean[scheme] / mean[blind]) if blind in mean else np.nan,
                         "lower_min": red.min(), "lower_max": red.max()})
    return pd.DataFrame(rows)


def plot(summary: pd.DataFrame, ab: pd.DataFrame, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    apps = list(dict.fromkeys(summary["app"]))
    schemes = list(dict.fromkeys(summary["scheme"]))
    # one colour, marker and dash per scheme in every panel, so overlapping lines stay legible
    markers, dashes = "osD^vP*Xh<>", ["-", "--", ":", "-."]
    style = {sc: dict(color=f"C{i % 10}", marker=markers[i % len(markers)], linestyle=dashes[i % len(dashes)],
                      markersize=5 + 2 * (i % 3), markerfacecolor="none" if i % 2 else None)
             for i, sc in enumerate(schemes)}
    fig, axes = plt.subplots(1, len(apps), figsize=(4.2 * len(apps), 3.8), squeeze=False)
    for ax, app in zip(axes[0], apps):
        s = summary[summary.app == app].groupby(["scheme", "rate_rps"], sort=False).mean_latency_s.mean().reset_index()
        for scheme, grp in s.groupby("scheme", sort=False):
            ax.plot(grp.rate_rps, grp.mean_latency_s, label=scheme, **style[scheme])
        ax.set(title=app, xlabel="request rate (req/s, Poisson)", ylabel="mean end-to-end latency (s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.savefig(out / "latency_vs_rate.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    a = ab[ab.setting == "load"]
    ax.barh(a.scheme, a.mean_latency_s)
    ax.set(xlabel="mean latency (s)", title="ablation (load)")
    fig.tight_layout()
    fig.savefig(out / "ablation.png", dpi=120)
    plt.close(fig)


def _x(v: float, lo: float, hi: float) -> str:
    return f"{v:.2f}x [{lo:.2f}-{hi:.2f}]"


def _col(r: Any, col: str) -> str:
    v = getattr(r, f"{col}_speedup", float("nan"))
    return "-" if v != v else _x(v, getattr(r, f"{col}_min"), getattr(r, f"{col}_max"))


def markdown(sp: pd.DataFrame, ab: pd.DataFrame, cap: pd.DataFrame, p: Any) -> str:
    seeds = ", ".join(map(str, p.seeds))
    t, pre = teola_of(p.schemes), prefix_of(p.schemes)
    lines = ["# Teola apps (simulation)", "",
             f"LLM latency source: `{p.llm_latency}`; {p.n_queries} queries per cell; seeds {seeds}; mean "
             "end-to-end latency (mean over seeds); speedup = best baseline mean / Teola mean, [range of the "
             f"per-seed ratios]. Regime: `high` = the largest rate where the best baseline's mean stays under "
             f"{p.saturation}x its isolated-query mean; `saturated` rates only measure queue length.", "",
             "Best baseline: the fastest of all baselines, LlamaIndex's defaults (`llamadist*-po/to`) and "
             "the same with in-module concurrency opened (`llamadist*-open-*`); the last columns give the "
             "speedup over the fastest default one alone (against Teola with that baseline's engine features).", "",
             "Teola (the headline columns): Teola on the same engines as the best baseline, so that the speedup "
             f"measures the passes and scheduling, not an engine feature one side lacks: `{pre}` where the best "
             f"baseline's LLM engines have a prefix cache (`llamadistpc*`), `{t}` where they have none (`llamadist-*`). "
             f"Beside it: `{t}`, the paper's Teola (its engines prefill every prompt in full, no prefix cache), "
             f"against the same best baseline, and `{ALL_PASSES}`, every pass always, no prefix cache."
             + (f" A guided scheme applies the passes its optimiser chooses at each rate (`orchestrator/guided.py`, on a "
                f"calibration workload of {p.guide_queries} queries, seed {p.guide_seed}: a pass is applied unless "
                f"dropping it lowers the simulated mean latency by more than {100 * p.guide_min_gain:g}%)."
                if t == GUIDED else "")
             + ("" if getattr(p, "engine_prefix_cache", True) else
                " In this run no scheme's LLM engines cache prefixes (`engine_prefix_cache: false`), so every Teola "
                "and every baseline runs on the same engines."), "",
             "| app | rate (req/s) | regime | Teola (same engine features) | its mean (s) | passes applied | "
             "best baseline | its mean (s) | speedup (mean) | speedup (p99) | "
             f"{t} (no prefix cache) | {pre} | {ALL_PASSES} (every pass, no cache) | vs unoptimised DAG "
             f"({UNOPTIMISED}) | best default baseline | speedup vs it | paper |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sp.itertuples():
        un = f"{r.speedup_vs_unoptimised:.2f}x" if hasattr(r, "speedup_vs_unoptimised") else "-"
        lines.append(f"| {r.app} | {r.rate_rps:g} | {r.regime} | {r.teola_scheme} | {r.teola_mean_s:.3f} | "
                     f"{r.passes or 'all'} | {r.best_baseline} | {r.best_baseline_mean_s:.3f} | "
                     f"{_x(r.speedup_mean, r.speedup_min, r.speedup_max)} | {r.speedup_p99:.2f}x | "
                     f"{_col(r, 'no_cache')} | {_col(r, 'prefix_cache')} | {_col(r, 'all_passes')} | {un} | "
                     f"{r.best_default} | {r.speedup_vs_default:.2f}x | {r.paper_speedup} |")
    lines += ["", f"## Ablation ({p.ablation_app})", "",
              "| setting | scheme | mean (s) | slowdown vs Teola [per-seed range] |", "|---|---|---|---|"]
    for r in ab.itertuples():
        lines.append(f"| {r.setting} | {r.scheme} | {r.mean_latency_s:.3f} | "
                     f"{_x(r.slowdown_vs_teola, r.slowdown_min, r.slowdown_max)} |")
    lines += _claims(ab, cap, p)
    return "\n".join(lines) + "\n"


def _claims(ab: pd.DataFrame, cap: pd.DataFrame, p: Any) -> list[str]:
    one = ab[(ab.setting == "one_query") & (ab.scheme == UNOPTIMISED)]
    one_s = _x(one.slowdown_vs_teola.iloc[0], one.slowdown_min.iloc[0], one.slowdown_max.iloc[0]) if len(one) else "not run"
    load = ab[ab.setting == "load"].set_index("scheme")
    topo = (f"{100 * (1 - load.mean_latency_s['teola'] / load.mean_latency_s['teola-blind']):.1f}% lower"
            if "teola-blind" in load.index else "not run")
    out = ["", "| claim | paper | ours |", "|---|---|---|",
           f"| without parallelisation and pipelining (one query) | {CLAIMS['without_parallelisation_one_query']} | "
           f"{one_s} slower |",
           f"| topology-aware vs blind batching, mean latency under load (profiled cap) | "
           f"{CLAIMS['topology_aware_batching']} | {topo} |"]
    if len(cap):
        out += ["", f"## Batch cap (each app at its rate in `batch_cap_rates`; cap {dict(p.batch_cap)} "
                "items in flight per instance vs the profiled max efficient batch; 2 LLM instances)", "",
                "Lower than blind: against FIFO batching on the same graph (`<scheme>-blind`). With Teola's "
                "prompt splitting a refine step's full prefill continues its partial prefill (one vLLM "
                "request, placed whatever the cap), so the cap only holds back first prompts, which arrive "
                "in query order: no policy has anything to reorder. Without splitting, refine prompts start "
                "new sequences that the cap holds back beside new queries' first prompts, and Algorithm 2 "
                "serves the older queries' work first.", "",
                "| app | rate (req/s) | cap | scheme | mean (s) | p99 (s) | lower than blind [per-seed range] |",
                "|---|---|---|---|---|---|---|"]
        for r in cap.itertuples():
            cap_s = "binding" if r.capped else "profiled"
            out.append(f"| {r.app} | {r.rate_rps:g} | {cap_s} | {r.scheme} | {r.mean_latency_s:.3f} | {r.p99_latency_s:.3f} | "
                       f"{100 * r.lower_vs_blind:.1f}% [{100 * r.lower_min:.1f} to {100 * r.lower_max:.1f}] |")
    return out
