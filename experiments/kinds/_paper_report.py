"""``summary.md`` and plots of ``paper_goodput_cost``: per scenario, goodput and cost per load with
95% confidence intervals over seeds, FlowMaker against each baseline per load band next to the
paper's figures, the reuse saving, RouteLLM's accuracy-SLO shares, per-GPU utilisation,
deployments per load and the sensitivity rows.

Intervals: a cell (trace, load) has one value per seed (its arrival window); ratios are paired
(the same window for both selectors). A band's figure per seed is the mean over its cells of the
per-cell ratio (cells where the baseline's goodput is 0 are left out and counted); the interval is
Student's t over seeds (``mean +- t(0.975, n-1) * sd / sqrt(n)``).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.context import Execution, atomic_write_text
from experiments.kinds._intervals import BOUNDS, ci95, error_bars, fmt
from experiments.kinds._reference import reference

BANDS = (("low", (25, 50)), ("high", (75, 100)), ("overload", (200, 400)))

PAPER = reference("flowmaker")["baselines"]     # selector -> the paper's figure (configs/reference)
COST = "cost_window_usd"


@dataclass(frozen=True)
class Resumed:
    """What a resumed run reused: ``cells`` finished by earlier invocations and the sum of their
    own wall times (``cell_wall_s``: each cell's replay as its worker timed it)."""
    cells: int = 0
    cell_wall_s: float = 0.0

    @classmethod
    def of(cls, frames: list[pd.DataFrame]) -> Resumed:
        walls = [float(f["cell_wall_s"].iloc[0]) if "cell_wall_s" in f else float("nan") for f in frames]
        return cls(cells=len(frames), cell_wall_s=float(sum(walls)))

    def describe(self, wall_s: float) -> str:
        """The run's own wall time: this invocation's, plus the earlier cells' own when resumed."""
        if not self.cells:
            return f"wall time {wall_s:.0f} s"
        return (f"wall time {wall_s + self.cell_wall_s:.0f} s (a resumed run: this invocation {wall_s:.0f} s, "
                f"plus the {self.cells} cells (plans and replays) of earlier invocations, {self.cell_wall_s:.0f} s "
                "of their own wall time summed over cells)")


IDX = ["trace", "load_pct", "seed"]


def series(df: pd.DataFrame, selector: str, metric: str) -> pd.Series:
    """``metric`` of ``selector``'s rows indexed by (trace, load, seed), copying only that column."""
    return df.loc[df.selector == selector, IDX + [metric]].set_index(IDX)[metric]


def paired(df: pd.DataFrame, ref: str, base: str, metric: str, *, cost: bool) -> pd.Series:
    """Per (trace, load, seed): ``metric(ref) / metric(base)`` (goodput) or ``metric(base) / metric(ref)``
    (cost); inf where the denominator is 0."""
    a, b = series(df, ref, metric), series(df, base, metric)
    a, b = a.align(b, join="inner")
    num, den = (b, a) if cost else (a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (num / den).replace(np.nan, np.inf) if len(num) else num


def band(ratios: pd.Series, loads) -> tuple[float, float, str, int]:
    """(mean, half-width) over seeds of the per-seed band mean; the min-max span of the per-cell
    means; how many (cell, seed) ratios were infinite (baseline goodput 0)."""
    r = ratios[ratios.index.get_level_values("load_pct").isin(loads)]
    if r.empty:
        return float("nan"), float("nan"), "n/a", 0
    inf = int((~np.isfinite(r)).sum())
    fin = r[np.isfinite(r)]
    per_seed = fin.groupby(level="seed").mean()
    cells = fin.groupby(level=["trace", "load_pct"]).mean()
    span = f"{cells.min():.2f}-{cells.max():.2f}x" if len(cells) else "n/a"
    return (*ci95(per_seed), span, inf)


def _bands(df: pd.DataFrame) -> list[tuple[str, tuple]]:
    present = set(df.load_pct)
    out = [(n, tuple(x for x in ls if x in present)) for n, ls in BANDS]
    rest = tuple(sorted(present - {x for _, ls in BANDS for x in ls}))
    out = [(f"{n} ({'/'.join(f'{x:g}' for x in ls)}%)", ls) for n, ls in out if ls]
    return out + ([("other (" + "/".join(f"{x:g}" for x in rest) + "%)", rest)] if rest else [])


def ratio_table(df: pd.DataFrame, ref: str, paper: bool = True) -> list[str]:
    lines = ["| baseline | load band | goodput ratio (FlowMaker / baseline) | cost ratio, window (baseline / FlowMaker) "
             "| cost ratio, makespan | cost per served request ratio | paper |", "|---|---|---|---|---|---|---|"]
    for base in [s for s in df.selector.unique() if s != ref]:
        g = paired(df, ref, base, "goodput", cost=False)
        cw = paired(df, ref, base, COST, cost=True)
        cm = paired(df, ref, base, "cost_usd", cost=True)
        cs = paired(df, ref, base, "cost_window_per_served_usd", cost=True)
        for i, (name, loads) in enumerate(_bands(df)):
            gm, gh, gspan, ginf = band(g, loads)
            cells = [f"{fmt(gm, gh)}x (cells {gspan}" + (f"; {ginf} with baseline goodput 0)" if ginf else ")")]
            for r in (cw, cm, cs):
                m, h, span, _ = band(r, loads)
                cells.append(f"{fmt(m, h)}x ({span})")
            note = PAPER.get(base, "") if paper and i == 0 else ""
            lines.append(f"| {base} | {name} | " + " | ".join(cells) + f" | {note} |")
    return lines


def by_load_table(df: pd.DataFrame, metric: str, digits: int = 3) -> list[str]:
    loads = sorted(df.load_pct.unique())
    lines = ["| selector | trace | " + " | ".join(f"{x:g}%" for x in loads) + " |", "|---|---|" + "---|" * len(loads)]
    for (sel, tr), g in df.groupby(["selector", "trace"], sort=False):
        vals = [fmt(*ci95(g[g.load_pct == x][metric]), digits=digits, bounds=BOUNDS.get(metric)) for x in loads]
        lines.append(f"| {sel} | {tr} | " + " | ".join(vals) + " |")
    return lines


def not_below(df: pd.DataFrame, ref: str) -> tuple[int, list[str]]:
    """Cells (baseline, trace, load) and where ``ref``'s goodput is below the baseline's beyond the
    interval (the paired difference's 95% interval lies below 0)."""
    n, worse = 0, []
    for base in [s for s in df.selector.unique() if s != ref]:
        d = (series(df, ref, "goodput") - series(df, base, "goodput")).dropna()
        for (tr, ld), x in d.groupby(level=["trace", "load_pct"]):
            n += 1
            m, h = ci95(x)
            if m + (h if np.isfinite(h) else 0.0) < 0:
                worse.append(f"{base} {tr} {ld:g}% ({fmt(m, h, 3)})")
    return n, worse


def gpu_table(gpus: pd.DataFrame) -> list[str]:
    ids = sorted(gpus.gpu.unique())
    lines = ["| selector | load | " + " | ".join(f"GPU {g}" for g in ids) + " | mean | max |",
             "|---|---|" + "---|" * (len(ids) + 2)]
    for (sel, ld), g in gpus.groupby(["selector", "load_pct"], sort=False):
        per = g.groupby("gpu").busy_share.mean().reindex(ids, fill_value=0.0)
        lines.append(f"| {sel} | {ld:g}% | " + " | ".join(f"{v:.2f}" for v in per) + f" | {per.mean():.2f} | "
                     f"{per.max():.2f} |")
    return lines


def deployments_table(deps: pd.DataFrame) -> list[str]:
    lines = ["| selector | planned load | instances | GB | tasks placed | multi-stage workflows | reused stages "
             "| models |", "|---|---|---|---|---|---|---|---|"]
    for (sel, ld), g in deps.groupby(["selector", "plan_load_pct"], sort=False):
        wfs = [json.loads(d) for d in g.deployment.dropna()]
        multi = sum(len(d["stages"]) > 1 for d in wfs)
        reused = sum(len(d["reuse"]) for d in wfs)
        models = ",".join(sorted({m for ms in g.models for m in ms.split(",") if m}))
        lines.append(f"| {sel} | {ld:g}% | {int(g.instances_new.sum())} | {g.gb_new.sum():.1f} | "
                     f"{int(g.placed.sum())}/{len(g)} | {multi} | {reused} | {models} |")
    return lines


def scenario_deps(deps: pd.DataFrame, sc, selectors) -> pd.DataFrame:
    """The deployment records of ``selectors`` in scenario ``sc``: its sharing mode and SLO set and,
    per selector, its placement, objective and fair-share check where it has records under them (a
    selector that ignores one was planned under the default, ``_paper_plan.plan_key``)."""
    d = deps[(deps.sharing == sc.sharing) & (deps.slo_set == sc.slo_set) & deps.selector.isin(set(selectors))]
    parts = []
    for _, g in d.groupby("selector", sort=False):
        for col, default in (("placement", "own"), ("objective", "gb_s"), ("fair_share", False)):
            if col in g:
                want = getattr(sc, col)
                g = g[g[col] == (want if (g[col] == want).any() else default)]
        parts.append(g)
    return pd.concat(parts) if parts else d


def _step(task: str, dep: str | None) -> str:
    """One task's deployment in a sequence: the new instances (model, TP, count) and the owners of reused ones."""
    if not isinstance(dep, str):       # None, or NaN: pandas 3 stores a missing string as NaN
        return f"{task}: not placed"
    d = json.loads(dep)
    new: dict[str, int] = {}
    for i in d["instances"]:
        k = f"{i['model']} TP{i['tp']}" + (f"PP{i['pp']}" if i.get("pp", 1) > 1 else "")
        new[k] = new.get(k, 0) + 1
    parts = [k + (f" x{n}" if n > 1 else "") for k, n in new.items()]
    owners = sorted({r["instance"].split("/")[0] for r in d["reuse"]})
    parts += [f"reuses {', '.join(owners)}"] if owners else []
    return f"{task}: " + " + ".join(parts or ["nothing new"])


def sequence_table(deps: pd.DataFrame) -> list[str]:
    """Per selector and planned load, the tasks in deployment order with what each deployed or reused."""
    lines = ["| selector | planned load | sequence (task: new instances, reused instances' tasks) |", "|---|---|---|"]
    for (sel, ld), g in deps.groupby(["selector", "plan_load_pct"], sort=False):
        steps = "; ".join(_step(t, d) for t, d in zip(g.task, g.deployment))
        lines.append(f"| {sel} | {ld:g}% | {steps} |")
    return lines


def routellm_shares(df: pd.DataFrame) -> list[str]:
    """RouteLLM's accuracy-SLO share per SLO set, sharing mode and setting; a share that the SLO set
    makes true by construction (:func:`by_construction`) is marked, not counted as evidence."""
    sub = df[df.selector.str.startswith("routellm")]
    if sub.empty:
        return []
    lines = ["| SLO set | sharing | setting | strong share (router) | accuracy-SLO share, mean [95% CI] | min-max "
             "over cells | paper | mean in the paper's range | evidence |", "|---|---|---|---|---|---|---|---|---|"]
    strong = {"routellm-max-quality": 1.0, "routellm-balanced": 0.65, "routellm-min-cost": 0.35, "routellm-paper": 1.0}
    paper = reference("flowmaker")["routellm_accuracy_share"]
    for (slo, mode, sel), g in sub.groupby(["slo_set", "sharing", "selector"], sort=False):
        per_seed = g.groupby("seed").accuracy_ok_share.mean()
        cells = g.groupby(["trace", "load_pct"]).accuracy_ok_share.mean()
        m, h = ci95(per_seed)
        lo, hi = paper.get(sel, paper.get("routellm-max-quality") if sel == "routellm-paper" else (float("nan"),) * 2)
        inside = "yes" if round(lo, 3) <= round(m, 3) <= round(hi, 3) else "no"
        why = by_construction(slo)
        lines.append(f"| {slo} | {mode} | {sel} | {strong.get(sel, float('nan')):.0%} | {fmt(m, h, digits=3)} | "
                     f"{cells.min():.3f}-{cells.max():.3f} | {lo:.1%}-{hi:.1%} | {inside} | "
                     f"{'none: ' + why if why else 'yes'} |")
    return lines


def by_construction(slo_set: str, weak: str = "qwen2.5-7b", strong: str = "qwen2.5-14b") -> str | None:
    """Why RouteLLM's accuracy-SLO share is true by construction under ``slo_set`` (every task's SLO
    lies above the weak model's accuracy and at most the strong one's, so the share is the
    router's strong share whatever happens), or None when some SLO lies outside that interval."""
    from experiments.kinds._paper_plan import load_slo_set
    from profiler.catalog import load_accuracy
    acc = load_accuracy(None)
    slos = load_slo_set(slo_set).accuracy_slo.values()
    if all(acc[weak] < v <= acc[strong] for v in slos):
        return f"every SLO of `{slo_set}` is in ({acc[weak]:g}, {acc[strong]:g}]: the share is the router's"
    return None


def reuse_lines(df: pd.DataFrame, ref: str) -> list[str]:
    if "flowmaker-noreuse" not in set(df.selector):
        return []
    out = []
    for metric, what in ((COST, "window cost"), ("cost_usd", "makespan cost")):
        r = paired(df, ref, "flowmaker-noreuse", metric, cost=True)
        parts = [f"{name}: {fmt(*band(r, loads)[:2])}x" for name, loads in _bands(df)]
        out.append(f"- reuse saving ({what}, FlowMakerNoReuse / FlowMaker): " + "; ".join(parts))
    return out


def sensitivity_table(df: pd.DataFrame, params, ref: str) -> list[str]:
    """One row per scenario and baseline at 25-100% load: FlowMaker's ratios per band, the scenario's
    settings (overload-only scenarios are reported apart)."""
    df = df[df.load_pct <= 100]
    bands = _bands(df)
    lines = ["| scenario | sharing | SLO set | colocation | plans | arrivals | baseline placement | objective | "
             "baseline | " + " | ".join(f"goodput ratio {n.split()[0]}" for n, _ in bands) + " | "
             + " | ".join(f"cost ratio {n.split()[0]}" for n, _ in bands) + " |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * (2 * len(bands))]
    for sc in params.scenarios:
        sub = df[df.scenario == sc.name]
        plans = "per load" if sc.replan else f"once at {params.plan_load_pct:g}%"
        head = (f"| {sc.name} | {_sharing(sc)} | {sc.slo_set} | {'on' if sc.colocation else 'off'} | {plans} | "
                f"{sc.arrivals or params.arrivals} | {sc.placement} | {sc.objective} | ")
        for base in [s for s in sub.selector.unique() if s != ref]:
            g = paired(sub, ref, base, "goodput", cost=False)
            c = paired(sub, ref, base, COST, cost=True)
            lines.append(head + f"{base} | " + " | ".join(fmt(*band(g, ls)[:2]) for _, ls in bands) + " | "
                         + " | ".join(fmt(*band(c, ls)[:2]) for _, ls in bands) + " |")
    return lines


def _sharing(sc) -> str:
    """The scenario's sharing mode, and FlowMaker's fair-share check where it plans with it."""
    return f"{sc.sharing} (FlowMaker: + fair share)" if sc.sharing == "compute" and sc.fair_share else sc.sharing


def _scenario_md(sub: pd.DataFrame, deps: pd.DataFrame, gpus: pd.DataFrame, sc, ref: str, main: bool) -> list[str]:
    from experiments.kinds._paper_costs import units_by_load, units_ratio_table
    lines = [f"## Scenario `{sc.name}`: sharing {_sharing(sc)}, SLO set `{sc.slo_set}`, colocation "
             f"{'on' if sc.colocation else 'off'}, {'re-planned per load' if sc.replan else 'planned once'}, "
             f"baselines placed by {'their own rules' if sc.placement == 'own' else 'FlowMaker' + chr(39) + 's rule'}, "
             f"objective {sc.objective}"]
    if sc.description:
        lines += ["", sc.description]
    lines += ["", "### Goodput per load (mean [95% CI] over seeds)", "", *by_load_table(sub, "goodput"),
              "", f"### {ref} against each baseline, per load band", "", *ratio_table(sub, ref)]
    n, worse = not_below(sub, ref)
    lines += ["", f"{ref}'s goodput is below a baseline's beyond the interval in {len(worse)} of {n} "
                  "(baseline, trace, load) cells" + (": " + "; ".join(worse) if worse else ".")]
    lines += reuse_lines(sub, ref)
    lines += ["", "### Cost four ways: ratio baseline / FlowMaker per load band (window; mean [95% CI] over seeds)",
              "", *units_ratio_table(sub, ref)]
    if main:
        lines += ["", "### Cost four ways per selector and load (window; mean [95% CI] over traces and seeds)", "",
                  *units_by_load(sub)]
        lines += ["", "### Per-GPU utilisation (busy share of the residency window, mean over traces and seeds)",
                  "", *gpu_table(gpus[gpus.scenario == sc.name])]
    keyed = scenario_deps(deps, sc, set(sub.selector))
    keyed = keyed[keyed.plan_load_pct.isin(set(sub.plan_load_pct))]
    lines += ["", "### Deployments per planned load (sequence from the empty cluster; per task: deployments.parquet)",
              "", *deployments_table(keyed)]
    if main:
        lines += ["", "### Deployment sequence per planned load (tasks in the order deployed)", "",
                  *sequence_table(keyed)]
    return lines + [""]


def write_report(params, out, df: pd.DataFrame, deps: pd.DataFrame, gpus: pd.DataFrame, *, drain_cap_s: float,
                 clock: Callable[[], tuple[float, float]], execution: Execution = Execution(),
                 resumed: Resumed = Resumed()) -> None:
    """``summary.md`` and the plots: the first scenario's as goodput.png and cost.png, every other
    scenario in ``params.plots`` (default: all) as goodput-<scenario>.png and cost-<scenario>.png.
    ``clock()``: this invocation's (wall, CPU) seconds so far, read once every section and plot is
    done, so the reported wall time is the whole run's but for writing the file; ``resumed``: what
    earlier invocations of a resumed run computed (the run's own wall time adds their cells' own)."""
    from experiments.kinds._paper_costs import MAX_HEADLINE_LOAD, overload_md
    from experiments.kinds._paper_dependence import dependence_md
    from experiments.kinds._paper_differences import differences_md
    from experiments.kinds._paper_targets import headline, targets_md
    ref = params.reference
    df, deps, gpus = _plain(df), _plain(deps), _plain(gpus)
    ptm = df.groupby(["trace", "load_pct"]).peak_to_mean.mean()
    keys = ['selector', 'sharing', 'slo_set', 'colocation', 'plan_load_pct', 'unplaced', 'arrivals', 'trace',
            'load_pct', 'seed'] + [k for k in ("placement", "objective", "fair_share") if k in df]
    body = [*dependence_md(df, params, headline(params)),
            "## RouteLLM: accuracy-SLO share of served requests", "", *routellm_shares(df), "",
            "## Sensitivity rows at 25-100% (goodput ratio FlowMaker / baseline, window cost ratio baseline / "
            "FlowMaker in reserved GB x s)", "", *sensitivity_table(df, params, ref), ""]
    for i, sc in enumerate(params.scenarios):
        sub = df[df.scenario == sc.name]
        if sub.load_pct.min() > MAX_HEADLINE_LOAD:
            body += overload_md(sub, deps, sc)
        else:
            body += _scenario_md(sub, deps, gpus, sc, ref, main=i == 0)
        if i == 0:
            plots(sub, out)                       # the headline: goodput.png, cost.png
        elif params.plots is None or sc.name in params.plots:
            plots(sub, out, suffix=f"-{sc.name}")
    body += differences_md(df, deps, params)
    body += ["More on why our numbers differ: docs/baselines.md (\"Why our numbers differ from the paper's\")."]
    wall_s, cpu_s = clock()
    total_s = wall_s + resumed.cell_wall_s
    lines = ["# Paper goodput/cost experiment: summary", "",
             f"Cells: {df.cell.nunique() if 'cell' in df else df.drop_duplicates(keys).shape[0]} simulated "
             f"({df.drop_duplicates(keys).shape[0]} plan-key cells, {len(df)} scenario rows); {len(params.scenarios)} "
             f"scenarios; seeds per cell: {df.groupby(['scenario', 'selector', 'trace', 'load_pct']).seed.nunique().min()}"
             f"-{df.groupby(['scenario', 'selector', 'trace', 'load_pct']).seed.nunique().max()}; arrivals "
             f"{params.arrivals} over a {params.window_s:g} s window; cost window = window + min(drain, "
             f"{drain_cap_s:.1f} s); trace source: {', '.join(sorted(set(df.trace_source)))}; "
             f"{resumed.describe(wall_s)} (CPU {cpu_s:.0f} s, {execution.describe()}; the whole run up to writing "
             "this file: plans, replays, tables and plots).", "",
             "Peak-to-mean of the arrivals (10 s bins, mean over cells): "
             + "; ".join(f"{tr} {ld:g}% {v:.2f}" for (tr, ld), v in ptm.items()), "",
             "Intervals: 95% t intervals over seeds (paired ratios); `[lo, hi]` after each mean; spans in "
             "parentheses are min-max over (trace, load) cells. Paper figures: shared/reference/flowmaker.md.", "",
             *targets_md(df, params, wall_s=total_s, cpu_s=cpu_s, workers=execution.describe(),
                         wall_text=resumed.describe(wall_s)), *body]
    atomic_write_text(out / "summary.md", "\n".join(lines) + "\n")


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """String columns as Python objects: pandas 3 backs them by pyarrow, whose take and factorize
    made a third of the report's CPU time (thousands of small selections and groupings)."""
    cols = [c for c in df.columns if pd.api.types.is_string_dtype(df[c]) and df[c].dtype != object]
    return df.astype({c: object for c in cols}) if cols else df


def plots(df: pd.DataFrame, out, suffix: str = "") -> None:
    """Goodput and window cost against load, one panel per trace, 95% intervals as error bars
    (a share's clipped to [0, 1], as in the tables)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for metric, ylabel, fname in (("goodput", "goodput (share of requests)", "goodput"),
                                  (COST, "cost over the residency window (USD)", "cost")):
        traces = list(df.trace.unique())
        fig, axes = plt.subplots(1, len(traces), figsize=(5.5 * len(traces), 4), squeeze=False)
        for ax, tr in zip(axes[0], traces):
            sub = df[df.trace == tr]
            for sel, g in sub.groupby("selector", sort=False):
                stats = [ci95(g[g.load_pct == x][metric]) for x in sorted(g.load_pct.unique())]
                m = np.array([s[0] for s in stats])
                ax.errorbar(sorted(g.load_pct.unique()), m, yerr=error_bars(stats, BOUNDS.get(metric)), marker="o",
                            ms=3, capsize=2, label=sel)
            ax.set_xscale("log")
            loads = sorted(sub.load_pct.unique())
            ax.set_xticks(loads, [f"{x:g}%" for x in loads])
            ax.minorticks_off()
            ax.set_title(f"{tr} trace (error bars: 95% CI over {sub.seed.nunique()} seeds)", fontsize=10)
            ax.set_xlabel("load (x the planned rate)")
            ax.set_ylabel(ylabel)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
        fig.tight_layout(rect=(0, 0.14, 1, 1))
        fig.savefig(out / f"{fname}{suffix}.png", dpi=110)
        plt.close(fig)
