"""teola_real_cpu's report: per (app, rate, scheme) the statistics of the real run's queries
(:func:`summarise`: means over repeats, per-repeat ranges, paired bootstrap intervals, the regime)
and summary.md (:func:`markdown`; the direction section is ``_teola_real_direction``'s). ``params``
is ``teola_real_cpu.Params``."""
from __future__ import annotations

from typing import Any

import pandas as pd

from experiments.kinds import _teola_real_direction as direction
from experiments.kinds._intervals import ratio_ci95_paired


def summarise(df: pd.DataFrame, schemes: list[str], isolated: pd.DataFrame | None = None,
              saturation: float = 1.6) -> pd.DataFrame:
    """Per (app, rate, scheme): mean over repeats of each repeat's mean latency, its range,
    whether every answer equals the first scheme's, and the speedup of ``schemes[0]`` (Teola)
    over each scheme and over the best baseline (per-repeat ratio range)."""
    if "repeat" not in df:
        df = df.assign(repeat=0)
    rows = []
    for (app, rate), g in df.groupby(["app", "rate_rps"], sort=False):
        per = g[~g.failed].groupby(["scheme", "repeat"]).latency_s.mean().unstack("repeat")
        ref = g[g.scheme == schemes[0]].sort_values(["repeat", "qid"])
        base = [s for s in schemes[1:] if s in per.index]
        best = per.loc[base].mean(axis=1).idxmin() if base else schemes[0]
        ratio = per.loc[best] / per.loc[schemes[0]]
        iso = None if isolated is None else isolated[(isolated.app == app) & (isolated.scheme == best)].latency_s.mean()
        # the saturation reference: the best baseline's first query of each block, which arrives at idle
        # engines under that block's own machine load (the isolated queries ran at another load)
        first = float(g[(g.scheme == best) & (g.qid == 0) & ~g.failed].latency_s.mean())
        ci = {s: _paired_ci(g, s, schemes[0]) for s in schemes}
        for s in schemes:
            d = g[g.scheme == s].sort_values(["repeat", "qid"])
            mine = per.loc[s] / per.loc[schemes[0]]
            rows.append({"app": app, "rate_rps": rate, "scheme": s, "n_queries": len(d), "failed": int(d.failed.sum()),
                         "mean_latency_s": float(per.loc[s].mean()), "min_repeat_s": float(per.loc[s].min()),
                         "max_repeat_s": float(per.loc[s].max()), "p99_latency_s": float(d.latency_s.quantile(0.99)),
                         "makespan_s": float(d.makespan_s.max()),
                         "same_answers_as_" + schemes[0]: bool(not d.failed.any() and
                                                               list(d.answer_sha) == list(ref.answer_sha)),
                         "speedup_mean_latency": float(per.loc[s].mean() / per.loc[schemes[0]].mean()),
                         "speedup_min": float(mine.min()), "speedup_max": float(mine.max()),
                         "speedup_ci_lo": ci[s][0], "speedup_ci_hi": ci[s][1],
                         "best_baseline": best, "teola_vs_best": float(per.loc[best].mean() / per.loc[schemes[0]].mean()),
                         "teola_vs_best_min": float(ratio.min()), "teola_vs_best_max": float(ratio.max()),
                         "best_isolated_s": float("nan") if iso is None else float(iso),
                         "best_first_query_s": first,
                         "saturated": bool(per.loc[best].mean() > saturation * first)})
    return pd.DataFrame(rows)


def _idle_note(params: Any) -> str:
    if params.idle_gap_s is None or params.runtime == "ray":
        return "the arrivals as drawn"
    return (f"a wait with no query in flight and every engine idle is cut to {params.idle_gap_s:g} s, the later "
            f"arrivals moved as much earlier (each query meets what it would have: idle engines or the same overlap "
            f"with the next ones; `queries.parquet` keeps the drawn arrivals)")


def _paired_ci(g: pd.DataFrame, scheme: str, teola: str) -> tuple[float, float]:
    """95% paired bootstrap interval of ``scheme``'s mean latency over ``teola``'s, the queries paired by
    (repeat, qid): the same question on the same arrivals in one block; resampled within each repeat."""
    ok = g[~g.failed].pivot_table(index=["repeat", "qid"], columns="scheme", values="latency_s")
    pairs = ok[[scheme, teola]].dropna() if {scheme, teola} <= set(ok.columns) else ok.iloc[:0]
    return ratio_ci95_paired(pairs[scheme].to_numpy(), pairs[teola].to_numpy(),
                             pairs.index.get_level_values("repeat").to_numpy())


def _cores_note(params: Any, cores: int) -> str:
    if params.runtime == "ray":
        return "engines as Ray actors, separate processes (no shared-core budget)"
    return (f"the in-process engines share {cores} CPU cores (Teola's runtime starts work on an idle "
            f"instance only while a core is free: engine_scheduler.CoreBudget; the LlamaDist baselines run each "
            f"module as it comes)")


def markdown(summary: pd.DataFrame, blocks: pd.DataFrame, params: Any, wall_s: float, blocks_s: float, *,
             cores: int, embed_batch: int, queries: pd.DataFrame | None = None) -> str:
    """summary.md: the headline per (app, rate), every scheme, the blocks, the direction section
    (with the typical query's statistics given the run's ``queries``)."""
    t = params.schemes[0]
    lines = ["# Teola on real engines (CPU, wall clock)", "",
             f"{params.n_queries} queries per cell, rates {params.rates_rps} req/s, {params.n_paragraphs or 'all'} "
             f"paragraphs per document, fetch_k {params.fetch_k or 'as the app'}, {params.repeats} repeats with the "
             f"scheme order rotated per block; reranker: {params.reranker}; {params.llm_instances} tiny-Llama "
             f"instances; embedder max batch {embed_batch}; torch threads {params.torch_threads}; "
             f"{_cores_note(params, cores)}; start-up objects frozen out of the garbage collector, as vLLM's engine core "
             f"does; {_idle_note(params)}. "
             f"Latency: mean over repeats of each repeat's mean "
             f"[range over repeats]; speedup = best baseline / {t} [range of the per-repeat ratios]. Regime: "
             f"`saturated` when the best baseline's mean exceeds {params.saturation}x the mean latency of its first "
             f"query per block (it arrives at idle engines, under the block's own load; the isolated queries, "
             f"`isolated.parquet`, ran before the blocks at another load). "
             f"Wall time of this invocation {wall_s:.0f} s; the blocks' own {blocks_s:.0f} s (a resumed run "
             f"keeps the finished blocks).", "",
             "| app | rate (req/s) | regime | best baseline | its mean (s) | Teola mean (s) | speedup [per-repeat range] | "
             "95% paired interval | same answers |", "|---|---|---|---|---|---|---|---|---|"]
    for (app, rate), g in summary.groupby(["app", "rate_rps"], sort=False):
        r = g.set_index("scheme")
        b = r.iloc[0]
        same = bool(r["same_answers_as_" + t].all())
        lines.append(f"| {app} | {rate:g} | {'saturated' if b.saturated else 'unsaturated'} | {b.best_baseline} | "
                     f"{r.loc[b.best_baseline].mean_latency_s:.3f} | {r.loc[t].mean_latency_s:.3f} | "
                     f"{b.teola_vs_best:.2f}x [{b.teola_vs_best_min:.2f}-{b.teola_vs_best_max:.2f}] | "
                     f"[{r.loc[b.best_baseline].speedup_ci_lo:.2f}-{r.loc[b.best_baseline].speedup_ci_hi:.2f}] | {same} |")
    lines += ["", "| app | rate (req/s) | scheme | mean (s) | [range over repeats] | p99 (s) | Teola's speedup over it |",
              "|---|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        lines.append(f"| {r.app} | {r.rate_rps:g} | {r.scheme} | {r.mean_latency_s:.3f} | [{r.min_repeat_s:.3f}-"
                     f"{r.max_repeat_s:.3f}] | {r.p99_latency_s:.3f} | {r.speedup_mean_latency:.2f}x "
                     f"[{r.speedup_min:.2f}-{r.speedup_max:.2f}] |")
    lines += ["", "Blocks (load average of the shared 2-core machine before and after each block; CPU time the "
                  "hypervisor gave other machines during it, /proc/stat's steal, all cores):", "",
              "| repeat | rate | app | scheme order | wall (s) | load before (1/5/15 min) | load after | steal (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in blocks.itertuples():
        lines.append(f"| {r.repeat} | {r.rate_rps:g} | {r.app} | {r.order} | {r.wall_s:.1f} | {r.load_before} | "
                     f"{r.load_after} | {getattr(r, 'steal_s', float('nan')):.2f} |")
    if params.simulation is not None:
        lines += direction.markdown(summary, direction.simulate(params.simulation, params.rates_rps, params.schemes),
                                    f"`{params.simulation}`", queries)
    return "\n".join(lines) + "\n"
