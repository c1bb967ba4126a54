"""The tables and figure of ``joint_vs_sequential`` (column meanings in its module docstring)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.context import atomic_write_text
from experiments.glossary import matching

COLUMNS = """\
- `cluster`: `a6000x8` (the cluster file) or `mixed` (the same 8 GPUs as three priced types).
- `objective`: `gb_s` (new GB x latency) or `usd_per_hour` (US dollars per hour of new GPUs).
- `load`: every arrival rate of the set times this factor.
- `set`: `given` (the tasks in the order given) or `random-<size>-<k>` (a seeded random set).
- `n_tasks`: tasks in the set.
- `served joint` / `served given`: tasks served of the set (section 11's first criterion) by the
  joint `milp` and by section 8's greedy (`sequential`, `exhaustive` per task) in the order given.
- `total joint` / `total given`: the sum of the served tasks' cost, GB*s under `gb_s`, US dollars
  per hour under `usd_per_hour`.
- `saving % given`: `100 x (greedy total - joint total) / greedy total` where both serve as many
  tasks (0 when both cost 0), the greedy taking the tasks in the order given.
- `saving % best order` / `saving % worst order`: the same against the best and the worst of the
  greedy in random orders (most served, then least total cost).
- `served best/worst`: tasks served by the greedy's best / worst random order.
- `milp`: the joint milp's status (`optimal` = proved, `feasible` = stopped at the cap).
- `milp_s`: the joint milp's wall time per set (s).
- `gap`: the joint milp's relative gap at the cap (blank where it proved the optimum).
- `sets`: random sets of that size; `proved`: those where the joint milp proved the optimum.
- `mean_milp_s` / `max_milp_s`: mean and largest joint milp wall time over those sets (s).
- `more_served`: tasks the joint plan serves beyond the greedy in the order given, summed over the sets.
- `mean_saving_pct` / `max_saving_pct`: mean and largest `saving % given` over the sets.
"""


def _table(df: pd.DataFrame) -> str:
    try:
        return df.to_markdown(index=False, floatfmt=".4g")
    except ImportError:
        return df.to_string(index=False)


def wide(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (cluster, objective, load, set): served and total per solver, saving, milp status."""
    keys = ["cluster", "objective", "load", "set", "n_tasks"]
    served = df.pivot_table(index=keys, columns="solver", values="served", aggfunc="first")
    cost = df.pivot_table(index=keys, columns="solver", values="total_cost", aggfunc="first")
    save = df.pivot_table(index=keys, columns="solver", values="saving_pct", aggfunc="first")
    joint = df[df["solver"] == "joint"].set_index(keys)
    out = pd.DataFrame({"served joint": served["joint"], "served given": served["given"],
                        "total joint": cost["joint"], "total given": cost["given"],
                        "saving % given": save["given"]})
    if "best_order" in served:
        out["saving % best order"] = save["best_order"]
        out["saving % worst order"] = save["worst_order"]
        out["served best/worst"] = [f"{b}/{w}" for b, w in zip(served["best_order"], served["worst_order"])]
    out["milp"] = joint["status"]
    out["milp_s"] = joint["elapsed_s"]
    out["gap"] = joint["gap"].astype(object).where(joint["gap"].notna(), None)   # blank where proved
    return out.reset_index()


def summary_md(df: pd.DataFrame, params) -> str:
    w = wide(df)
    seven = w[w["set"] == "given"].drop(columns=["set"])
    rand = w[w["set"] != "given"].copy()
    rand["+served"] = rand["served joint"] - rand["served given"]
    by_size = rand.groupby("n_tasks").agg(sets=("set", "size"), proved=("milp", lambda s: int((s == "optimal").sum())),
                                          mean_milp_s=("milp_s", "mean"), max_milp_s=("milp_s", "max"),
                                          more_served=("+served", "sum"),
                                          mean_saving_pct=("saving % given", "mean"),
                                          max_saving_pct=("saving % given", "max")).reset_index()
    zero = w[(w["saving % given"] == 0) & (w["served joint"] == w["served given"])]
    lines = [f"# Joint vs sequential deployment (spec section 11; milp cap {params.time_limit_s:g} s)", "",
             f"Clusters {', '.join(params.clusters)}; objectives {', '.join(params.objectives)}; loads "
             f"{', '.join(f'{x:g}' for x in params.loads)} (arrival rates x load).", "",
             "## The tasks in the order given", "", _table(seven), "",
             "## Random task sets, per size", "", _table(by_size), "",
             "## Every random set", "", _table(rand.drop(columns=["+served"])), "",
             f"Sets where the joint plan serves as many tasks for the same total as the greedy in the order "
             f"given: {len(zero)} of {len(w)}.", "", "## Columns", ""]
    body = "\n".join(lines) + "\n"
    return body + matching(COLUMNS, body)


def write_summary(folder: Path, params) -> Path:
    """Rebuild ``folder/summary.md`` from ``folder/joint.parquet`` (no solve): how a published
    report takes a new report format without re-running its cells."""
    path = Path(folder) / "summary.md"
    atomic_write_text(path, summary_md(pd.read_parquet(Path(folder) / "joint.parquet"), params))
    return path


def plot_time(df: pd.DataFrame, path: Path, time_limit_s: float) -> Path:
    """The joint milp's wall time vs the number of tasks, per cluster and objective; open markers
    where it did not prove the optimum."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    j = df[df["solver"] == "joint"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for (cluster, obj), part in j.groupby(["cluster", "objective"]):
        mean = part.groupby("n_tasks")["elapsed_s"].mean()
        line, = ax.plot(mean.index, mean.values, marker="o", label=f"{cluster}, {obj}")
        bad = part[part["status"] != "optimal"]
        ax.scatter(bad["n_tasks"], bad["elapsed_s"], facecolors="none", edgecolors=line.get_color(), s=80)
    ax.axhline(time_limit_s, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("tasks in the set")
    ax.set_ylabel("joint milp wall time (s, log; mean per size)")
    ax.set_title("Joint milp solve time (open circles: not proved at the cap)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
