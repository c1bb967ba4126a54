"""fleet_mix's report: the summary (the target check, the mix chosen and why, what FlowMaker's
GB*s plan costs in dollars) and the cost-vs-rate figure; its tables are ``_fleet_tables``' and
``_fleet_pools``'."""
from __future__ import annotations

import math

import pandas as pd

from experiments.glossary import matching
from experiments.kinds._fleet_pools import (budget_pool_table, equal_price_lines, equal_price_per_task,
                                            equal_price_table, pool_table, sized_pool_lines, sized_pool_table)
from experiments.kinds._fleet_tables import (dearer, fleet_table, gb_s_table, per_task_table, seven_table, solved,
                                             totals, type_use, why_not)

COLUMNS = """\
- `usd_per_hour`: US dollars per hour of the GPUs a plan newly reserves (spec section 10's `U`):
  a whole GPU per shard, `replicas x tp x pp` GPUs per stage, each at its type's price.
- `cost_gb_s`: the paper's objective, new GPU memory (GB) x end-to-end latency of one request (s).
- `pool`: the GPUs the plan may use: one type alone (`gpus_per_type` of it); `mixed@T`, the
  equal-price mixed pool of type T (T's pool price split equally in dollars over the types,
  `n_t = floor(gpus_per_type x price_T / (types x price_t))`, 0-GPU types absent); or `mixed`,
  every GPU of every type (the upper reference, priced as all single pools together).
- `pool_usd_per_hour`: the pool's price, every GPU it offers at its type's price.
- `choice`: per stage `model@tpTppP:type xR` (R new replicas on GPUs of that type).
- `saving_pct`: `100 (best single - mixed) / best single`; best single = the cheapest single-type
  pool that serves every task of the row (fleet), or per task the cheapest type for that task;
  `mixed` is the equal-price pool `mixed@T*` of that best type T* in the equal-price table and the
  all-GPU reference elsewhere.
"""


def _md(frame: pd.DataFrame) -> str:
    try:
        return frame.to_markdown(index=False, floatfmt=".4g").replace(" nan ", "  -  ")
    except ImportError:
        return frame.to_string(index=False)


def _prices_md(prices: dict[str, float]) -> str:
    from profiler.catalog import load_prices
    listed = load_prices()
    rows = []
    for t, usd in prices.items():
        p = listed.get(t)
        src = "-" if p is None else ("estimate" if p.on_demand.estimate else p.on_demand.provider)
        rows.append(f"| {t} | {usd:.4g} | {src} |")
    return "| type | $/GPU-hour | on-demand source |\n|---|---|---|\n" + "\n".join(rows)


def target_lines(fleet: pd.DataFrame, tasks: pd.DataFrame) -> list[str]:
    out = []
    for r in fleet.itertuples():
        if math.isnan(r.mixed):
            out.append(f"- {r.family} @ {r.rate_rps:g} rps: the mixed pool has no plan for every task")
        elif math.isnan(r.best_single):
            out.append(f"- {r.family} @ {r.rate_rps:g} rps: no single type serves every task; mixed ${r.mixed:.4g}/h")
        else:
            ok = "MISSED" if dearer(r.mixed, r.best_single) else "met"
            out.append(f"- {r.family} @ {r.rate_rps:g} rps: mixed ${r.mixed:.4g}/h vs best single "
                       f"{r.best_type} ${r.best_single:.4g}/h: {r.saving_pct:.3g}% less ({ok})")
    above = int(tasks["mixed_above_best"].sum()) if len(tasks) else 0
    out.append(f"- per task: the mixed plan costs more than the task's cheapest single type in {above} "
               f"of {int(tasks['tasks'].sum()) if len(tasks) else 0} (task, rate) pairs")
    return out


def mix_lines(df: pd.DataFrame, types: list[str]) -> list[str]:
    """Why a mix: every (task, rate) whose mixed plan uses several types or beats the task's cheapest
    single type, with the stages and where they go."""
    d = solved(df)
    piv = d.pivot_table(index=["task", "rate_rps"], columns="pool", values="usd_per_hour", aggfunc="first")
    best = piv[[c for c in types if c in piv]]
    out = []
    mixed = d[d["pool"] == "mixed"].set_index(["task", "rate_rps"])
    for (task, rate), row in mixed.iterrows():
        if (task, rate) not in best.index or math.isnan(row["usd_per_hour"]):
            continue
        b = best.loc[(task, rate)]
        if b.isna().all():
            continue
        bt, bv = b.idxmin(), b.min()
        if row["usd_per_hour"] < bv * (1 - 1e-9) or "," in row["types"]:
            single = d[(d["task"] == task) & (d["rate_rps"] == rate) & (d["pool"] == bt)]["choice"].iloc[0]
            out.append(f"- {task} @ {rate:g} rps: mixed ${row['usd_per_hour']:.4g}/h = {row['choice']}; "
                       f"best single {bt} ${bv:.4g}/h = {single}")
    return out


def summary_md(df: pd.DataFrame, params, prices: dict[str, float]) -> str:
    types = list(params.types)
    fleet, tasks = fleet_table(df, types), per_task_table(df, types)
    gbs = gb_s_table(df)
    mixes = mix_lines(df[df["family"] == "seven"], types)
    rest = mix_lines(df[df["family"] == "random"], types)
    use = type_use(df)
    ptab = pool_table(params, prices)
    eq = equal_price_table(fleet, df, dict(zip(ptab["pool"], ptab["pool_usd_per_hour"])))
    eq_task = equal_price_per_task(df, types)
    sized = sized_pool_table(fleet, df, params.gpus_per_type, prices)
    budget = budget_pool_table(fleet, df, params.gpus_per_type, prices)
    body = "\n".join([
        f"# fleet_mix: dollars per hour on single-type and mixed GPU pools ({params.pricing} prices)", "",
        f"{df['task'].nunique()} tasks ({(df.drop_duplicates('task')['family'] == 'seven').sum()} of configs/tasks, "
        f"{(df.drop_duplicates('task')['family'] == 'random').sum()} random), rates {params.rates_rps} rps, "
        f"{params.gpus_per_type} GPUs of each type per pool; `{params.solver}` minimises `usd_per_hour`; "
        f"latency SLOs from the standalone latency on {params.reference_gpu}.", "",
        "## Prices", "", _prices_md(prices), "",
        "## Pools (GPUs per type, pool price)", "",
        "`mixed@T`: T's pool price split equally in dollars over the types, `n_t = floor(B / (types x price_t))` "
        "with `B` = T's pool price (a 0-GPU type is absent), so it never costs more than T's pool; `mixed`: "
        "every GPU of every type, the upper reference (its pool price is all single pools' together).", "",
        _md(ptab), "",
        "## Equal price: best single type against the mixed pool at its price", "",
        "Per family and rate, the cheapest single type T* (total over the `tasks` that the all-GPU `mixed` pool "
        "serves at every rate) against `mixed@T*`; `saving_pct_where_served`: the same over the tasks `mixed@T*` "
        "has a plan for (all but `no_plan`'s).", "", _md(eq), "",
        "## Target: the equal-price mixed pool never costs more per hour than the best single type", "",
        *equal_price_lines(eq, eq_task), "",
        "## Mixed pool sized to the workload, at most the best single type's price", "",
        "Of each type, the most GPUs one task's plan on the all-GPU pool reserves (each task is planned alone "
        "on the empty pool): every such plan places on it and a smaller pool only removes variants, so its "
        "$/h are the all-GPU pool's (`mixed`); its price beside `best_type`'s pool.", "", _md(sized), "",
        *sized_pool_lines(sized), "",
        "## Mixed pool within the best single type's price, chosen from both pools' plans", "",
        "Every task starts on its plan from `best_type`'s pool; tasks then move to their all-GPU-pool plan, "
        "largest saving first, while the pool (per type, the most GPUs one picked plan reserves) stays within "
        "`best_type`'s pool price. It never costs more than `best_type` by construction: the evidence is the "
        "saving. `usd_per_hour` is the picked plans' total, an upper bound of the solver's on that pool.", "",
        _md(budget), "",
        *([f"- cheaper than the best single type by {budget['saving_pct'].min():.1f}-{budget['saving_pct'].max():.1f}% "
           f"per hour at a pool price of at most the best single type's pool in every row"] if len(budget) else []), "",
        "## Total $/h per pool (`mixed`: all GPUs, upper reference)", "",
        "Each task alone on the empty pool; the total over the `tasks` of the family that the mixed pool serves at "
        "every rate (`-`: the pool cannot serve one of them).", "", _md(fleet), "",
        "## Each task against its own cheapest single type (`mixed`: all GPUs, upper reference)", "", _md(tasks), "",
        "## Answers without a plan, per pool and first violated constraint (spec section 6)", "",
        _md(why_not(df)) if len(why_not(df)) else "- none", "",
        "## Upper reference: the all-GPU mixed pool never costs more per hour than the best single type", "",
        *target_lines(fleet, tasks), "",
        "## GPUs the mixed pool's plans reserve, per type (all tasks)", "", _md(use) if len(use) else "-", "",
        "## The mix chosen (where it uses several types or beats every single type)", "",
        "The seven tasks' plans on the mixed pool:", "", _md(seven_table(df)), "",
        *(mixes or ["- each of them uses one type, the one of that task's cheapest single pool: the seven "
                    "gain from the mix at fleet level, each task taking its own cheapest type"]), "",
        f"The random tasks ({len(rest)} (task, rate) pairs{', the first 30' if len(rest) > 30 else ''}):", "",
        *(rest[:30] or ["- none"]), "",
        f"## FlowMaker's GB*s plan (`{params.gb_s_solver}`) priced in dollars", "",
        _md(gbs[gbs["pool"] == "mixed"]), "",
        "## Columns", ""])
    return body + "\n" + matching(COLUMNS, body)


def plot(df: pd.DataFrame, path):
    """Cost vs rate: one panel per family; a line per single type, the mixed pool's optimum
    (thick) and FlowMaker's GB*s plan on the mixed pool priced in dollars (dashed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter
    usd, gbs = totals(df, "usd_per_hour"), totals(df, "gb_s")
    fams = list(dict.fromkeys(df["family"]))
    fig, axes = plt.subplots(1, len(fams), figsize=(6.4 * len(fams), 5.2), squeeze=False)
    for ax, fam in zip(axes[0], fams):
        if fam not in usd.index:          # no task of the family is served at every rate
            ax.text(0.5, 0.5, f"{fam}: no task has a plan at every rate", ha="center", transform=ax.transAxes)
            continue
        t = usd.loc[fam]
        singles = [c for c in t.columns if not c.startswith("mixed")]
        for i, pool in enumerate(singles):
            ax.plot(t.index, t[pool], marker="os^vDP"[i % 6], lw=1.2, label=f"{pool} alone")
        best = {r: row.idxmin() for r, row in t[singles].iterrows() if row.notna().any()}
        eq = [t.loc[r, f"mixed@{best[r]}"] if r in best and f"mixed@{best[r]}" in t else math.nan for r in t.index]
        ax.plot(t.index, eq, color="tab:red", lw=2.4, marker="*", ms=9,
                label="mixed pool at the best single type's price")
        ax.plot(t.index, t["mixed"], color="black", lw=3.2, alpha=0.6, marker="o",
                label="mixed pool, all GPUs (upper reference)")
        if fam in gbs.index and "mixed" in gbs.loc[fam]:
            ax.plot(t.index, gbs.loc[fam]["mixed"], color="black", ls="--", lw=1.2,
                    label="mixed pool, FlowMaker GB*s plan in $")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("request rate per task (requests/s)")
        ax.set_ylabel(f"total $/hour of the reserved GPUs ({df[df.family == fam].task.nunique()} tasks)")
        ax.set_title(f"{fam} tasks: cost vs rate (missing point: some task has no plan)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7.5)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

