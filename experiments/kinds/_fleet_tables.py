"""fleet_mix's tables from its rows (one per task, rate, pool and objective): what the all-GPU
mixed pool serves, totals per pool and rate, each task against its cheapest single type, the
GPUs the mixed plans reserve, the answers without a plan and the GB*s plan priced in dollars."""
from __future__ import annotations

import pandas as pd


def solved(df: pd.DataFrame, objective: str = "usd_per_hour") -> pd.DataFrame:
    """The rows of one objective (every task, rate and pool: NaN where no plan)."""
    return df[df["objective"] == objective]


def dearer(cost, than):
    """``cost`` above ``than`` by more than rounding (1e-9 relative and 1e-9 $/h): scalars or
    Series alike (NaN is never dearer)."""
    return cost > than * (1 + 1e-9) + 1e-9


def served(df: pd.DataFrame) -> pd.Series:
    """The tasks the mixed pool serves under usd_per_hour at every rate (a single type can serve
    no more: the mixed pool offers its GPUs too), so that totals compare across rates."""
    d = df[(df["objective"] == "usd_per_hour") & (df["pool"] == "mixed")]
    ok = d.groupby("task")["usd_per_hour"].apply(lambda v: bool(v.notna().all()))
    return pd.Series(ok[ok].index, name="task")


def served_rows(df: pd.DataFrame, objective: str = "usd_per_hour") -> pd.DataFrame:
    """The rows of one objective for the tasks :func:`served` keeps."""
    return solved(df, objective).merge(served(df), on="task")


def totals(df: pd.DataFrame, objective: str = "usd_per_hour") -> pd.DataFrame:
    """Per family, rate and pool: total $/h over the tasks :func:`served` keeps; NaN when the
    pool has no plan for one of them."""
    d = served_rows(df, objective)
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


def per_task_table(df: pd.DataFrame, types: list[str]) -> pd.DataFrame:
    """Per family and rate, each task against its own cheapest single type: summed, and the largest
    per-task saving (with its task)."""
    d = solved(df).pivot_table(index=["family", "rate_rps", "task"], columns="pool",
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
                     "mixed_above_best": int(dearer(g["mixed"], g["best"]).sum())})
    return pd.DataFrame(rows)


def gb_s_table(df: pd.DataFrame) -> pd.DataFrame:
    """FlowMaker's GB*s plan priced in dollars beside the usd_per_hour optimum, per family, rate and
    pool (totals; NaN where a task has no plan)."""
    usd, gbs = totals(df, "usd_per_hour"), totals(df, "gb_s")
    out = pd.concat({"usd_opt": usd.stack(future_stack=True), "gb_s_plan_usd": gbs.stack(future_stack=True)}, axis=1)
    out["ratio"] = out["gb_s_plan_usd"] / out["usd_opt"]
    return out.reset_index()


def type_use(df: pd.DataFrame) -> pd.DataFrame:
    """GPUs the mixed pool's usd_per_hour plans reserve, per rate and type (all tasks)."""
    d = solved(df)
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
    d = solved(df)
    d = d[(d["pool"] == "mixed") & (d["family"] == "seven")]
    cell = d["choice"].where(d["usd_per_hour"].isna(), d["choice"] + " ($" + d["usd_per_hour"].map("{:.4g}".format)
                                                                       + "/h)").replace("", "-")
    return d.assign(cell=cell).pivot_table(index="task", columns="rate_rps", values="cell", aggfunc="first") \
        .rename(columns=lambda r: f"{r:g} rps").reset_index()


def why_not(df: pd.DataFrame) -> pd.DataFrame:
    """Per pool, the usd_per_hour answers without a plan by the constraint the exact solver names
    first (``placement``: the pool has too few GPUs of the type, or too little memory on them)."""
    d = solved(df)
    d = d[d["usd_per_hour"].isna()]
    if d.empty:
        return pd.DataFrame()
    first = d["reason"].str.split(":").str[0].str.strip()
    return d.assign(constraint=first).pivot_table(index="pool", columns="constraint", values="task",
                                                  aggfunc="count", fill_value=0).reset_index()

