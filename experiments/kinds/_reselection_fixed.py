"""The re-selection summary's fixed-workflow section (issue 25, must-have 5): the fixed-workflow
controller against a static plan of the same workflow, compared on what each serves (tasks
placed, task-hours, requests served and within their SLO), not only on what each holds
(``experiments.kinds.reselection``; docs/reselection.md)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.kinds._reselection_depends import FIXED, cheaper


def fixed_workflow(res: pd.DataFrame, tasks: pd.DataFrame | None, instances: pd.DataFrame | None,
                   decisions: pd.DataFrame | None) -> list[str]:
    """The section's lines (report phase rows; empty without both fixed-workflow rows)."""
    rows = res[(res.phase == "report") & res.policy.isin(FIXED)]
    if set(rows.policy) != set(FIXED) or "task_hours_placed" not in rows.columns:
        return []
    seed = int(rows.seed.min())
    r = rows[rows.seed == seed].set_index("policy")
    s, a = r.loc[FIXED[0]], r.loc[FIXED[1]]
    n_tasks = len(tasks[(tasks.policy == FIXED[0]) & (tasks.seed == seed)]) if tasks is not None else 0
    hours = n_tasks * s.profile_hours
    tail = {p: _after(instances, p, seed, r.loc[p]) for p in FIXED}
    out = ["", f"## Fixed workflow against a static plan of the same workflow (seed {seed})", "",
           "| policy | tasks placed (start / ever, of "
           f"{n_tasks}) | task-hours placed (of {hours:g}) | requests served / offered | within SLO / offered | GPU-h held "
           "| of it after the day | GPU-h per 1000 requests within SLO | re-selections | infeasible (slo) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for p in FIXED:
        x = r.loc[p]
        out.append(f"| {p} | {x.tasks_placed_start:.0f} / {x.tasks_placed:.0f} | {x.task_hours_placed:.1f} | "
                   f"{x.completed:.0f} / {x.requests:.0f} | {x.served_in_slo:.0f} / {x.requests:.0f} | "
                   f"{x.gpu_s_held / 3600:.4g} | {tail[p] / 3600:.3g} | {_per_k(x):.3g} | {x.reselections:.0f} | "
                   f"{x.infeasible:.0f} ({x.infeasible_slo:.0f}) |")
    out.append("")
    out.append(f"- {FIXED[1]} is {cheaper(s.gpu_s_held / a.gpu_s_held)} than {FIXED[0]} in GPU-h held "
               f"({cheaper(s.reserved_gb_s / a.reserved_gb_s)} in GB*s), goodput {a.goodput:.4f} vs {s.goodput:.4f}; "
               f"but they serve different work: the static plan places {s.tasks_placed_start:.0f} of {n_tasks} tasks "
               + _unplaced(tasks, seed)
               + f", the adaptive one places tasks as their load allows ({a.task_hours_placed:.1f} of {hours:g} "
               f"task-hours against {s.task_hours_placed:.1f}). Per 1000 requests served within their SLO it is "
               f"{cheaper(_per_k(s) / _per_k(a))} ({_per_k(a):.3g} vs {_per_k(s):.3g} GPU-h)")
    out += _common(tasks, seed)
    out.append(f"- held until the last request finished: {FIXED[1]} {a.residency_s:.0f} s, {FIXED[0]} "
               f"{s.residency_s:.0f} s (the day: {a.day_s:.0f} s); GPU-h held after the day: {tail[FIXED[1]] / 3600:.3g} "
               f"and {tail[FIXED[0]] / 3600:.3g} (a backlog keeps every instance held)")
    out += _retries(decisions, seed) + _probes(a)
    return out + _over_seeds(rows)


def _over_seeds(rows: pd.DataFrame) -> list[str]:
    """The pair's comparison on every seed both ran (the section above details the first)."""
    r = rows.pivot_table(index="seed", columns="policy", values=["gpu_s_held", "goodput", "served_in_slo"])
    r = r.dropna()
    if len(r) < 2:
        return []
    s, a = FIXED
    cost = r.gpu_s_held[a] / r.gpu_s_held[s]
    per_k = (r.gpu_s_held[a] / r.served_in_slo[a]) / (r.gpu_s_held[s] / r.served_in_slo[s])
    more = int((r.served_in_slo[a] > r.served_in_slo[s]).sum())
    return [f"- over the {len(r)} seeds both ran ({', '.join(map(str, r.index))}): {a} holds {cost.min():.2f}-"
            f"{cost.max():.2f}x {s}'s GPU-h (mean {cost.mean():.2f}x), {per_k.min():.2f}-{per_k.max():.2f}x per "
            f"request within SLO; goodput {r.goodput[a].min():.4f}-{r.goodput[a].max():.4f} against "
            f"{r.goodput[s].min():.4f}-{r.goodput[s].max():.4f}; more requests within SLO on {more} of {len(r)} seeds"]


def _per_k(x: pd.Series) -> float:
    return x.gpu_s_held / 3600 / (x.served_in_slo / 1000) if x.served_in_slo > 0 else float("nan")


def _unplaced(tasks: pd.DataFrame | None, seed: int) -> str:
    if tasks is None or "placed_from_h" not in tasks.columns:
        return ""
    t = tasks[(tasks.policy == FIXED[0]) & (tasks.seed == seed)]
    miss = list(t.task[t.placed_from_h.isna()])
    return f"(no plan of the developer's workflow at the peak rate for {', '.join(miss)})" if miss else ""


def _common(tasks: pd.DataFrame | None, seed: int) -> list[str]:
    """GPU-h and goodput on the tasks both rows place from the start."""
    if tasks is None or "gpu_s_owned" not in tasks.columns:
        return []
    t = tasks[tasks.policy.isin(FIXED) & (tasks.seed == seed)]
    both = sorted(set.intersection(*(set(g.task[g.placed_from_h == 0]) for _, g in t.groupby("policy"))))
    if not both:
        return []
    c = t[t.task.isin(both)].assign(good=lambda x: x.goodput * x.requests).groupby("policy")[
        ["gpu_s_owned", "good", "requests"]].sum()
    c = pd.DataFrame({"gpu_h": c.gpu_s_owned / 3600, "good": c.good / c.requests})
    s, a = c.loc[FIXED[0]], c.loc[FIXED[1]]
    return [f"- on the {len(both)} tasks both place from the start ({', '.join(both)}): GPU-h of the instances they "
            f"start (each instance its GPUs, a GPU two share counted twice) {a.gpu_h:.3g} vs {s.gpu_h:.3g} "
            f"({cheaper(s.gpu_h / a.gpu_h)}), goodput {a.good:.4f} vs {s.good:.4f}"]


def _after(instances: pd.DataFrame | None, policy: str, seed: int, row: pd.Series) -> float:
    """GPU-seconds the run's instances held after the day ended (until the last request finished)."""
    if instances is None or not len(instances):
        return float("nan")
    i = instances[(instances.policy == policy) & (instances.seed == seed)]
    end = i.released_s.fillna(row.residency_s).clip(upper=row.residency_s)
    span = (end - np.maximum(i.start_s, row.day_s)).clip(lower=0.0)
    return float((span * i.gpus.astype(str).str.count(",").add(1)).sum())


def _retries(decisions: pd.DataFrame | None, seed: int) -> list[str]:
    """Where the infeasible re-selections come from (the back-off: first try, after the load fell,
    after the cluster offered more room)."""
    if decisions is None or "retry" not in decisions.columns:
        return []
    d = decisions[(decisions.policy == FIXED[1]) & (decisions.seed == seed) & (decisions.outcome == "infeasible")]
    if not len(d):
        return [f"- {FIXED[1]}: no infeasible re-selection"]
    kind = d.retry.fillna("").replace({"": "first try", "lower": "after its load fell", "room": "after more room",
                                       "reuse": "after the instances it may reuse changed"})
    by = ", ".join(f"{n} {k}" for k, n in kind.value_counts().items())
    tasks = ", ".join(f"{t} {n}" for t, n in d.task.value_counts().items())
    out = [f"- {FIXED[1]}'s {len(d)} infeasible re-selections: {by} (the back-off, docs/reselection.md); by task: "
           f"{tasks}"]
    if "block" in d.columns:
        blocks = d.block.fillna("").replace({"room": "room-bound (a plan on the emptied or the bare cluster)",
                                             "rate": "rate-bound (a plan on neither)", "never": "never feasible"})
        out.append("- blocks they left: " + ", ".join(f"{n} {k}" for k, n in blocks.value_counts().items()))
        never = sorted(set(d.task[d.block == "never"]))
        out.append(f"- never feasible under this policy (no plan at the least rate on the empty cluster, nothing to "
                   f"reuse ever; blocked for the rest of the run): {', '.join(never) if never else 'none'}")
    return out


def _probes(a: pd.Series) -> list[str]:
    """What the back-off's feasibility probes cost (selections on the emptied and the bare cluster)."""
    if "probe_s" not in a.index or pd.isna(a.probe_s):
        return []
    return [f"- the back-off's feasibility probes: {a.probes:.0f} probes (each the selections of one re-selection "
            f"on the bare or the emptied cluster, cached), "
            f"{a.probe_s:.1f} s, against {a.select_s:.1f} s in the re-selections themselves"]
