"""fleet_mix's report: totals per pool and rate, the target check, the mix chosen and why, what
FlowMaker's GB*s plan costs in dollars, and the cost-vs-rate figure."""
from __future__ import annotations

import math
import re

import pandas as pd

from experiments.glossary import matching

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


def _solved(df: pd.DataFrame, objective: str) -> pd.DataFrame:
    return df[df["objective"] == objective]


def served(df: pd.DataFrame) -> pd.Series:
    """The tasks the mixed pool serves under usd_per_hour at every rate (a single type can serve
    no more: the mixed pool offers its GPUs too), so that totals compare across rates."""
    d = df[(df["objective"] == "usd_per_hour") & (df["pool"] == "mixed")]
    ok = d.groupby("task")["usd_per_hour"].apply(lambda v: bool(v.notna().all()))
    return pd.Series(ok[ok].index, name="task")


def totals(df: pd.DataFrame, objective: str = "usd_per_hour") -> pd.DataFrame:
    """Per family, rate and pool: total $/h over the tasks :func:`served` keeps; NaN when the
    pool has no plan for one of them."""
    d = _solved(df, objective).merge(served(df), on="task")
    g = d.groupby(["family", "rate_rps", "pool"], sort=False)["usd_per_hour"]
    out = g.sum(min_count=1).where(g.count() == g.size())
    return out.unstack("pool")


def fleet_table(df: pd.DataFrame, types: list[str]) -> pd.DataFrame:
    """Per family and rate: each single pool's total, the best single type, the all-GPU mixed pool
    (the upper reference), the saving."""
    t = totals(df)
    single = t[[c for c in types if c in t]]
    out = single.copy()
    n = served(df).to_frame().merge(df[["task", "family"]].drop_duplicates(), on="task")
    out.insert(0, "tasks", n.groupby("family").size().reindex(out.index.get_level_values(0)).fillna(0)
               .astype(int).to_numpy())
    out["best_single"] = single.min(axis=1)
    out["best_type"] = [r.idxmin() if r.notna().any() else "-" for _, r in single.iterrows()]
    out["mixed"] = t["mixed"]
    out["saving_pct"] = 100 * (out["best_single"] - out["mixed"]) / out["best_single"]
    return out.reset_index()


def pool_table(params, prices: dict[str, float]) -> pd.DataFrame:
    """Each pool's GPUs per type and price ($/h of every GPU it offers)."""
    from experiments.kinds.fleet_mix import pools
    rows = [{"pool": name, **{t: counts.get(t, 0) for t in params.types},
             "pool_usd_per_hour": sum(n * prices[t] for t, n in counts.items())}
            for name, counts in pools(list(params.types), params.gpus_per_type, prices)]
    return pd.DataFrame(rows)


def equal_price_table(fleet: pd.DataFrame, df: pd.DataFrame, pool_price: dict[str, float]) -> pd.DataFrame:
    """Per family and rate: the best single type T*, its total $/h, the total of ``mixed@T*`` (the
    mixed pool at T*'s pool price), the saving, and the tasks ``mixed@T*`` has no plan for."""
    t = totals(df)
    d = _solved(df, "usd_per_hour").merge(served(df), on="task")
    rows = []
    for r in fleet.itertuples():
        eq = f"mixed@{r.best_type}"
        m = t.loc[(r.family, r.rate_rps), eq] if eq in t else math.nan
        here = d[(d["family"] == r.family) & (d["rate_rps"] == r.rate_rps)]
        lost = here[(here["pool"] == eq) & here["usd_per_hour"].isna()]
        kept = here[~here["task"].isin(lost["task"])]
        s_best = kept[kept["pool"] == r.best_type]["usd_per_hour"].sum()
        s_eq = kept[kept["pool"] == eq]["usd_per_hour"].sum()
        rows.append({"family": r.family, "rate_rps": r.rate_rps, "tasks": r.tasks, "best_type": r.best_type,
                     "best_single": r.best_single, "equal_price_pool": eq if r.best_type != "-" else "-",
                     "mixed_eq": m, "saving_pct": 100 * (r.best_single - m) / r.best_single,
                     "pool_price_single": pool_price.get(r.best_type, math.nan),
                     "pool_price_mixed_eq": pool_price.get(eq, math.nan),
                     "saving_pct_where_served": 100 * (s_best - s_eq) / s_best if s_best > 0 else math.nan,
                     "no_plan": ", ".join(f"{x.task} ({x.reason.split(':')[0].strip()})" for x in lost.itertuples())})
    return pd.DataFrame(rows)


def equal_price_per_task(df: pd.DataFrame, types: list[str]) -> pd.DataFrame:
    """Per (task, rate) some single type serves: its cheapest type T, that $/h and ``mixed@T``'s
    (NaN: no plan on the equal-price pool, with the solver's reason)."""
    d = _solved(df, "usd_per_hour")
    piv = d.pivot_table(index=["family", "task", "rate_rps"], columns="pool", values="usd_per_hour", aggfunc="first")
    reason = d.set_index(["task", "rate_rps", "pool"])["reason"]
    single = piv[[c for c in types if c in piv]].dropna(how="all")
    rows = []
    for (fam, task, rate), r in single.iterrows():
        bt = r.idxmin()
        eq = piv.loc[(fam, task, rate)].get(f"mixed@{bt}", math.nan)
        rows.append({"family": fam, "task": task, "rate_rps": rate, "best_type": bt, "best": r.min(), "mixed_eq": eq,
                     "reason": reason.get((task, rate, f"mixed@{bt}"), "") if math.isnan(eq) else ""})
    return pd.DataFrame(rows)


def equal_price_lines(eq: pd.DataFrame, per_task: pd.DataFrame) -> list[str]:
    """The target measured on the equal-price pools: per family and rate, then per task."""
    out = []
    for r in eq.itertuples():
        head = f"- {r.family} @ {r.rate_rps:g} rps:"
        if r.best_type == "-":
            out.append(f"{head} no single type serves every task (no equal-price pool to compare)")
        elif math.isnan(r.mixed_eq):
            out.append(f"{head} {r.equal_price_pool} (${r.pool_price_mixed_eq:.4g}/h pool) has no plan for "
                       f"{r.no_plan} (first violated constraint in brackets); best single {r.best_type} "
                       f"${r.best_single:.4g}/h: MISSED")
        else:
            ok = "met" if r.mixed_eq <= r.best_single * (1 + 1e-9) + 1e-9 else "MISSED"
            out.append(f"{head} {r.equal_price_pool} ${r.mixed_eq:.4g}/h vs best single {r.best_type} "
                       f"${r.best_single:.4g}/h: {r.saving_pct:.3g}% less ({ok})")
    if len(per_task):
        none = per_task[per_task["mixed_eq"].isna()]
        dear = per_task[per_task["mixed_eq"] > per_task["best"] * (1 + 1e-9) + 1e-9]
        out.append(f"- per task (against `mixed@T` of the task's own cheapest type T): no plan in {len(none)}, "
                   f"dearer in {len(dear)}, of {len(per_task)} (task, rate) pairs some single type serves")
        for r in [*none.itertuples(), *dear.itertuples()][:20]:
            what = f"no plan ({r.reason[:110]})" if math.isnan(r.mixed_eq) else f"${r.mixed_eq:.4g}/h"
            out.append(f"  - {r.task} @ {r.rate_rps:g} rps: {r.best_type} ${r.best:.4g}/h; mixed@{r.best_type} {what}")
    return out


STAGE = re.compile(r"@tp(\d+)pp(\d+):(\S+) x(\d+)")


def plan_gpus(choice: str, cap: int | None = None) -> dict[str, int]:
    """GPUs per type a plan reserves, from its ``choice`` (``model@tpTppP:type xR > ...``): GPU
    slots, at most ``cap`` per type (the pool's GPUs of a type: instances that share a GPU under
    memory sharing count once each in the slots, and the choice does not name the GPUs)."""
    out: dict[str, int] = {}
    for tp, pp, gtype, reps in STAGE.findall(choice):
        out[gtype] = out.get(gtype, 0) + int(tp) * int(pp) * int(reps)
    return out if cap is None else {t: min(n, cap) for t, n in out.items()}


def sized_pool_table(fleet: pd.DataFrame, df: pd.DataFrame, per_type: int,
                     prices: dict[str, float]) -> pd.DataFrame:
    """Per family and rate, the mixed pool sized to the workload: of each type, the most GPUs any
    one task's plan on the all-GPU pool reserves (each task is planned alone on the empty pool).
    Every such plan still places on it, and a smaller pool only removes variants, so each task's
    optimum and its $/h are the all-GPU pool's (the small config's test re-plans to check). Its
    price beside the best single type's pool price (``per_type`` GPUs of T*)."""
    d = _solved(df, "usd_per_hour").merge(served(df), on="task")
    d = d[d["pool"] == "mixed"]
    rows = []
    for r in fleet.itertuples():
        if r.best_type == "-":
            continue
        counts: dict[str, int] = {}
        for c in d[(d["family"] == r.family) & (d["rate_rps"] == r.rate_rps)]["choice"]:
            for t, n in plan_gpus(c, per_type).items():
                counts[t] = max(counts.get(t, 0), n)
        price = sum(n * prices[t] for t, n in counts.items())
        single = per_type * prices[r.best_type]
        rows.append({"family": r.family, "rate_rps": r.rate_rps, "best_type": r.best_type,
                     "best_single": r.best_single, "single_pool_usd_per_hour": single,
                     "sized_pool": ", ".join(f"{n} {t}" for t, n in sorted(counts.items())),
                     "sized_pool_usd_per_hour": round(price, 4), "pool_price_ok": price <= single + 1e-9,
                     "mixed": r.mixed, "saving_pct": r.saving_pct})
    return pd.DataFrame(rows)


def sized_pool_lines(sized: pd.DataFrame) -> list[str]:
    """The target, judged on the workload-sized pool (at most the best single type's pool price)."""
    if not len(sized):
        return ["- no (family, rate) with a single type that serves every task"]
    dear = sized[~sized["pool_price_ok"]]
    worse = sized[sized["mixed"] > sized["best_single"] + 1e-9]
    out = [f"- the workload-sized mixed pool costs at most the best single type's pool in {len(sized) - len(dear)} "
           f"of {len(sized)} (family, rate) rows"
           + ("" if dear.empty else "; dearer in: " + ", ".join(f"{r.family} {r.rate_rps:g} rps"
                                                               for r in dear.itertuples()))]
    ok = sized[sized["pool_price_ok"]]
    if worse.empty and len(ok):
        out.append(f"- met: its plans never cost more per hour than the best single type's; cheaper by "
                   f"{ok['saving_pct'].min():.1f}-{ok['saving_pct'].max():.1f}% in those rows (Mélange reports up "
                   f"to 77% for one model's request-size mix; docs/fleet.md)")
    else:
        out.append("- MISSED in: " + ", ".join(f"{r.family} {r.rate_rps:g} rps" for r in worse.itertuples()))
    return out


def budget_pool_table(fleet: pd.DataFrame, df: pd.DataFrame, per_type: int,
                      prices: dict[str, float]) -> pd.DataFrame:
    """Per family and rate, a mixed pool at most the best single type T*'s pool price, chosen
    greedily from the plans both pools gave: every task starts on its T*-only plan (that pool
    holds them all), then tasks move to their all-GPU-pool plan, largest saving first, while the
    pool (per type, the most GPUs one picked plan reserves) stays within T*'s pool price. Each
    picked plan places on that pool, so its total is an upper bound of what the solver finds there."""
    d = _solved(df, "usd_per_hour").merge(served(df), on="task")
    rows = []
    for r in fleet.itertuples():
        if r.best_type == "-":
            continue
        here = d[(d["family"] == r.family) & (d["rate_rps"] == r.rate_rps)]
        single = here[here["pool"] == r.best_type].set_index("task")
        mixed = here[here["pool"] == "mixed"].set_index("task")
        budget = per_type * prices[r.best_type]
        pick = {t: single.loc[t] for t in single.index}
        order = sorted(single.index, key=lambda t: mixed.loc[t, "usd_per_hour"] - single.loc[t, "usd_per_hour"])
        for t in order:
            if mixed.loc[t, "usd_per_hour"] >= single.loc[t, "usd_per_hour"] - 1e-9:
                break
            trial = {**pick, t: mixed.loc[t]}
            if _pool_price(trial, prices, per_type) <= budget + 1e-9:
                pick = trial
        counts = _pool_counts(pick, per_type)
        cost = float(sum(p["usd_per_hour"] for p in pick.values()))
        rows.append({"family": r.family, "rate_rps": r.rate_rps, "best_type": r.best_type,
                     "best_single": r.best_single, "single_pool_usd_per_hour": budget,
                     "pool": ", ".join(f"{n} {t}" for t, n in sorted(counts.items())),
                     "pool_usd_per_hour": round(_pool_price(pick, prices, per_type), 4),
                     "tasks_moved": sum(pick[t]["pool"] == "mixed" for t in pick), "usd_per_hour": cost,
                     "saving_pct": 100 * (r.best_single - cost) / r.best_single})
    return pd.DataFrame(rows)


def _pool_counts(pick: dict, cap: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for plan in pick.values():
        for t, n in plan_gpus(plan["choice"], cap).items():
            counts[t] = max(counts.get(t, 0), n)
    return counts


def _pool_price(pick: dict, prices: dict[str, float], cap: int) -> float:
    return sum(n * prices[t] for t, n in _pool_counts(pick, cap).items())


def per_task_table(df: pd.DataFrame, types: list[str]) -> pd.DataFrame:
    """Per family and rate, each task against its own cheapest single type: summed, and the largest
    per-task saving (with its task)."""
    d = _solved(df, "usd_per_hour").pivot_table(index=["family", "rate_rps", "task"], columns="pool",
                                               values="usd_per_hour", aggfunc="first")
    best = d[[c for c in types if c in d]].min(axis=1)
    frame = pd.DataFrame({"best": best, "mixed": d["mixed"]}).dropna()
    frame["saving_pct"] = 100 * (frame["best"] - frame["mixed"]) / frame["best"]
    rows = []
    for (fam, rate), g in frame.groupby(level=[0, 1], sort=False):
        top = g["saving_pct"].idxmax()
        rows.append({"family": fam, "rate_rps": rate, "tasks": len(g), "best_single_sum": g["best"].sum(),
                     "mixed_sum": g["mixed"].sum(),
                     "saving_pct": 100 * (g["best"].sum() - g["mixed"].sum()) / g["best"].sum(),
                     "max_task_saving_pct": g["saving_pct"].max(), "max_task": top[2],
                     "mixed_above_best": int((g["mixed"] > g["best"] * (1 + 1e-9) + 1e-9).sum())})
    return pd.DataFrame(rows)


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
            ok = "met" if r.mixed <= r.best_single * (1 + 1e-9) + 1e-9 else "MISSED"
            out.append(f"- {r.family} @ {r.rate_rps:g} rps: mixed ${r.mixed:.4g}/h vs best single "
                       f"{r.best_type} ${r.best_single:.4g}/h: {r.saving_pct:.3g}% less ({ok})")
    above = int(tasks["mixed_above_best"].sum()) if len(tasks) else 0
    out.append(f"- per task: the mixed plan costs more than the task's cheapest single type in {above} "
               f"of {int(tasks['tasks'].sum()) if len(tasks) else 0} (task, rate) pairs")
    return out


def mix_lines(df: pd.DataFrame, types: list[str]) -> list[str]:
    """Why a mix: every (task, rate) whose mixed plan uses several types or beats the task's cheapest
    single type, with the stages and where they go."""
    d = _solved(df, "usd_per_hour")
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


def type_use(df: pd.DataFrame) -> pd.DataFrame:
    """GPUs the mixed pool's usd_per_hour plans reserve, per rate and type (all tasks)."""
    d = _solved(df, "usd_per_hour")
    d = d[(d["pool"] == "mixed") & d["usd_per_hour"].notna()]
    counts: dict[tuple[float, str], int] = {}
    for r in d.itertuples():
        for part in r.choice.split(" > "):
            cfg, reps = part.rsplit(" x", 1)
            tp, pp = cfg.split("@tp")[1].split(":")[0].split("pp")
            key = (r.rate_rps, cfg.rsplit(":", 1)[1])
            counts[key] = counts.get(key, 0) + int(reps) * int(tp) * int(pp)
    s = pd.Series(counts, dtype=float)
    return s.unstack(fill_value=0).astype(int).reset_index(names="rate_rps") if len(s) else pd.DataFrame()


def seven_table(df: pd.DataFrame) -> pd.DataFrame:
    """The mixed pool's usd_per_hour plan of each of the seven tasks per rate: where it goes."""
    d = _solved(df, "usd_per_hour")
    d = d[(d["pool"] == "mixed") & (d["family"] == "seven")]
    cell = d["choice"].where(d["usd_per_hour"].isna(), d["choice"] + " ($" + d["usd_per_hour"].map("{:.4g}".format)
                                                                       + "/h)").replace("", "-")
    return d.assign(cell=cell).pivot_table(index="task", columns="rate_rps", values="cell", aggfunc="first") \
        .rename(columns=lambda r: f"{r:g} rps").reset_index()


def why_not(df: pd.DataFrame) -> pd.DataFrame:
    """Per pool, the usd_per_hour answers without a plan by the constraint the exact solver names
    first (``placement``: the pool has too few GPUs of the type, or too little memory on them)."""
    d = _solved(df, "usd_per_hour")
    d = d[d["usd_per_hour"].isna()]
    if d.empty:
        return pd.DataFrame()
    first = d["reason"].str.split(":").str[0].str.strip()
    return d.assign(constraint=first).pivot_table(index="pool", columns="constraint", values="task",
                                                  aggfunc="count", fill_value=0).reset_index()


def gb_s_table(df: pd.DataFrame) -> pd.DataFrame:
    """FlowMaker's GB*s plan priced in dollars beside the usd_per_hour optimum, per family, rate and
    pool (totals; NaN where a task has no plan)."""
    usd, gbs = totals(df, "usd_per_hour"), totals(df, "gb_s")
    out = pd.concat({"usd_opt": usd.stack(future_stack=True), "gb_s_plan_usd": gbs.stack(future_stack=True)}, axis=1)
    out["ratio"] = out["gb_s_plan_usd"] / out["usd_opt"]
    return out.reset_index()


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
