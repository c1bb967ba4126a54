"""fleet_mix's mixed pools at the best single type's price: the equal-price pools ``mixed@T``,
the pool sized to the workload, and the pool chosen within the budget from both pools' plans;
the GPUs a plan reserves (:func:`plan_gpus`)."""
from __future__ import annotations

import math
import re
from collections.abc import Iterable

import pandas as pd

from experiments.kinds._fleet_tables import dearer, served_rows, solved, totals


def pool_table(params, prices: dict[str, float]) -> pd.DataFrame:
    """Each pool's GPUs per type and price ($/h of every GPU it offers)."""
    from experiments.kinds.fleet_mix import pools
    rows = [{"pool": name, **{t: counts.get(t, 0) for t in params.types},
             "pool_usd_per_hour": _price(counts, prices)}
            for name, counts in pools(list(params.types), params.gpus_per_type, prices)]
    return pd.DataFrame(rows)


def equal_price_table(fleet: pd.DataFrame, df: pd.DataFrame, pool_price: dict[str, float]) -> pd.DataFrame:
    """Per family and rate: the best single type T*, its total $/h, the total of ``mixed@T*`` (the
    mixed pool at T*'s pool price), the saving, and the tasks ``mixed@T*`` has no plan for."""
    t = totals(df)
    d = served_rows(df)
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
    d = solved(df)
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
            ok = "MISSED" if dearer(r.mixed_eq, r.best_single) else "met"
            out.append(f"{head} {r.equal_price_pool} ${r.mixed_eq:.4g}/h vs best single {r.best_type} "
                       f"${r.best_single:.4g}/h: {r.saving_pct:.3g}% less ({ok})")
    if len(per_task):
        none = per_task[per_task["mixed_eq"].isna()]
        dear = per_task[dearer(per_task["mixed_eq"], per_task["best"])]
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
    d = served_rows(df)
    d = d[d["pool"] == "mixed"]
    rows = []
    for r in fleet.itertuples():
        if r.best_type == "-":
            continue
        counts = _pool_counts(d[(d["family"] == r.family) & (d["rate_rps"] == r.rate_rps)]["choice"], per_type)
        price = _price(counts, prices)
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
    d = served_rows(df)
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
        counts = _pool_counts((p["choice"] for p in pick.values()), per_type)
        cost = float(sum(p["usd_per_hour"] for p in pick.values()))
        rows.append({"family": r.family, "rate_rps": r.rate_rps, "best_type": r.best_type,
                     "best_single": r.best_single, "single_pool_usd_per_hour": budget,
                     "pool": ", ".join(f"{n} {t}" for t, n in sorted(counts.items())),
                     "pool_usd_per_hour": round(_pool_price(pick, prices, per_type), 4),
                     "tasks_moved": sum(pick[t]["pool"] == "mixed" for t in pick), "usd_per_hour": cost,
                     "saving_pct": round(100 * (r.best_single - cost) / r.best_single, 9) + 0.0})   # no -1e-14
    return pd.DataFrame(rows)


def _pool_counts(choices: Iterable[str], cap: int) -> dict[str, int]:
    """The pool that holds each of the plans (their ``choice``) alone: per type, the most GPUs
    one of them reserves (at most ``cap``)."""
    counts: dict[str, int] = {}
    for choice in choices:
        for t, n in plan_gpus(choice, cap).items():
            counts[t] = max(counts.get(t, 0), n)
    return counts


def _price(counts: dict[str, int], prices: dict[str, float]) -> float:
    """$/h of a pool's GPUs (``counts`` per type)."""
    return sum(n * prices[t] for t, n in counts.items())


def _pool_price(pick: dict, prices: dict[str, float], cap: int) -> float:
    return _price(_pool_counts((p["choice"] for p in pick.values()), cap), prices)

