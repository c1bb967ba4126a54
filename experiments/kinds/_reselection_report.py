"""Plots and summary of the re-selection experiment (``experiments.kinds.reselection``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.billing import COLUMNS as DOLLARS, usd_cell

REF = "static-peak"
COLORS = {"static-peak": "#1f77b4", "static-mean": "#ff7f0e", "adaptive": "#2ca02c",
          "adaptive-fixed-workflow": "#d62728"}
#: static-peak dashed and drawn on top, so it shows where adaptive runs at the same value
STYLES = {"static-peak": {"ls": "--", "zorder": 3}}
REASONS = {"up": ("^", "up: load above the plan's capacity"), "down": ("v", "down: load fell and stayed low"),
           "slo": ("x", "slo: SLO misses above the share")}


def plots(frames: dict[str, pd.DataFrame], params, out) -> None:
    """``memory.png`` (GB held over the day, load curve behind), ``migrations.png`` (every
    migration by task and hour, per adaptive policy) and ``goodput.png`` (per profile hour)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    prof = params.profile
    seed = frames["results"].seed.min()
    mem = frames["memory"][frames["memory"].seed == seed]
    fig, ax = plt.subplots(figsize=(9, 4))
    load = ax.twinx()
    t = np.linspace(0, prof.duration_s, 400)
    load.fill_between(prof.hour_at(t), prof.multiplier(t), color="0.9", step=None, zorder=0)
    load.set_ylim(0, 1.05)
    load.set_ylabel("arrival rate (share of peak)", color="0.5")
    ax.set_zorder(load.get_zorder() + 1)
    ax.patch.set_visible(False)
    res = frames["results"][frames["results"].seed == seed].set_index("policy")
    for policy, g in mem.groupby("policy", sort=False):
        cost = f" ({res.reserved_gb_s[policy]:.3g} GB*s)" if policy in res.index else ""
        ax.step(prof.hour_at(g.t_s.to_numpy()), g.gb.to_numpy(), where="post", label=policy + cost,
                color=COLORS.get(policy), lw=1.4, **STYLES.get(policy, {}))
    ax.set_xlabel(f"hour of the day (profile; 1 h = {prof.hour_s:g} simulated s)")
    ax.set_ylabel("GPU memory held (GB)")
    ax.set_title(f"memory held over the day, loading and draining instances included (seed {seed}); "
                 "legend: cost", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", title="policy (cost = GB x s held)", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "memory.png", dpi=120)
    plt.close(fig)

    dec = frames["decisions"]
    dec = dec[(dec.seed == seed) & (dec.outcome == "migrate")] if len(dec) else dec
    pols = [p for p in params.policies if p.startswith("adaptive")]
    if pols:
        fig, axes = plt.subplots(1, len(pols), figsize=(6 * len(pols), 3.6), squeeze=False, sharey=True)
        for ax, policy in zip(axes[0], pols):
            d = dec[dec.policy == policy] if len(dec) else dec
            for (reason, (m, label)), color in zip(REASONS.items(), ("#1f77b4", "#ff7f0e", "#2ca02c")):
                sub = d[d.reason == reason] if len(d) else d
                ax.scatter(prof.hour_at(sub.t_s.to_numpy()) if len(sub) else [],
                           [params.tasks.index(x) for x in sub.task] if len(sub) else [],
                           marker=m, label=label, s=30, color=color)
            ax.set_yticks(range(len(params.tasks)), params.tasks, fontsize=8)
            ax.set_ylim(-0.5, len(params.tasks) - 0.5)
            ax.set_xlim(prof.start_hour, prof.start_hour + prof.hours)
            ax.set_xlabel("hour of the day (profile)")
            ax.set_title(f"{policy}: {len(d)} migrations (seed {seed}), by trigger", fontsize=9)
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(out / "migrations.png", dpi=120)
        plt.close(fig)

    hourly = frames["hourly"]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for policy, g in hourly.groupby("policy", sort=False):
        m = g.groupby("hour").goodput.mean()
        ax.plot(m.index, m.to_numpy(), marker="o", ms=3, label=policy, color=COLORS.get(policy),
                **STYLES.get(policy, {}))
    ax.set_xlabel("hour of the day (profile): requests arriving in that hour")
    ax.set_ylabel("goodput (share of requests\nwithin SLO)")
    ax.set_title(f"goodput per profile hour (mean over seeds {sorted(hourly.seed.unique().tolist())})", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out / "goodput.png", dpi=120)
    plt.close(fig)


def summary_md(frames: dict[str, pd.DataFrame], params, source: str) -> str:
    """Per policy (mean over seeds): goodput, cost, memory, migrations; against static-peak."""
    res = frames["results"].reindex(columns=list(dict.fromkeys([*frames["results"].columns, *DOLLARS])))
    prof = params.profile
    agg = res.groupby("policy", sort=False).agg(
        seeds=("seed", "nunique"), requests=("requests", "mean"), goodput=("goodput", "mean"),
        goodput_min=("goodput", "min"), reserved_gb_s=("reserved_gb_s", "mean"),
        gpu_h=("gpu_s_held", lambda x: x.mean() / 3600.0), usd=("usd", "mean"), gb_mean=("gb_mean", "mean"),
        gb_peak=("gb_peak", "max"), gb_min=("gb_min", "min"), migrations=("migrations", "mean"),
        mig_rate=("migrations_per_task_hour", "mean"), mig_rate_max=("migrations_per_task_hour", "max"),
        reselections=("reselections", "mean"), wall_s=("wall_s", "max"), events=("events", "mean"))
    lines = ["# Re-selection when load shifts: summary", "",
             f"Tasks: {', '.join(params.tasks)}; cluster {params.cluster} x {params.nodes} nodes; selector "
             f"{params.selector}; trace sizes from {source}.",
             f"Day: {prof.hours:g} profile hours compressed {prof.compression:g}x into {prof.duration_s:g} simulated s; "
             f"peak rate = {prof.peak_x:g} x each task's arrival_rate_rps; mean rate {prof.mean_multiplier():.3f} "
             f"of the peak; seeds {sorted(res.seed.unique().tolist())}.", "",
             "| policy | goodput (mean / min) | cost GB*s | static-peak cost / cost | GPU-hours held | USD | "
             "GB mean / peak / min | migrations | per task per hour | re-selections | wall s (max) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ref = agg.loc[REF] if REF in agg.index else None
    for policy, r in agg.iterrows():
        ratio = f"{ref.reserved_gb_s / r.reserved_gb_s:.2f}x" if ref is not None else "-"
        lines.append(f"| {policy} | {r.goodput:.4f} / {r.goodput_min:.4f} | {r.reserved_gb_s:.4g} | {ratio} | "
                     f"{usd_cell(r.gpu_h)} | {usd_cell(r.usd)} | "
                     f"{r.gb_mean:.1f} / {r.gb_peak:.1f} / {r.gb_min:.1f} | {r.migrations:.1f} | "
                     f"{r.mig_rate:.3f} (max {r.mig_rate_max:.3f}) | {r.reselections:.0f} | {r.wall_s:.1f} |")
    if ref is not None and "adaptive" in agg.index:
        a = agg.loc["adaptive"]
        per_seed = res.set_index(["policy", "seed"])
        ratios = [per_seed.loc[(REF, s), "reserved_gb_s"] / per_seed.loc[("adaptive", s), "reserved_gb_s"]
                  for s in res.seed.unique() if (REF, s) in per_seed.index and ("adaptive", s) in per_seed.index]
        gaps = [1 - per_seed.loc[("adaptive", s), "goodput"] / per_seed.loc[(REF, s), "goodput"]
                for s in res.seed.unique() if (REF, s) in per_seed.index and ("adaptive", s) in per_seed.index]
        lines += ["", "## Targets (issue 19)", "",
                  f"- adaptive goodput within 2% of static-peak: {'yes' if max(gaps) <= 0.02 else 'NO'} "
                  f"(relative gap {min(gaps):.2%}-{max(gaps):.2%} over seeds)",
                  f"- cost >= 1.5x lower than static-peak: {'yes' if min(ratios) >= 1.5 else 'NO'} "
                  f"({min(ratios):.2f}-{max(ratios):.2f}x over seeds)",
                  f"- fewer than one migration per task per hour: {'yes' if a.mig_rate_max < 1 else 'NO'} "
                  f"(max {a.mig_rate_max:.3f})",
                  f"- a day simulated in <= 60 s: {'yes' if agg.wall_s.max() <= 60 else 'NO'} "
                  f"(slowest policy {agg.wall_s.max():.1f} s)"]
    tasks = frames["tasks"]
    if len(tasks):
        piv = tasks.groupby(["task", "policy"], sort=False).agg(goodput=("goodput", "mean"),
                                                                migrations=("migrations", "mean")).reset_index()
        pols = list(agg.index)
        lines += ["", "## Per task (mean over seeds): goodput / migrations", "",
                  "| task | " + " | ".join(pols) + " |", "|---|" + "---|" * len(pols)]
        for task in params.tasks:
            cells = []
            for p in pols:
                r = piv[(piv.task == task) & (piv.policy == p)]
                cells.append(f"{r.goodput.iloc[0]:.3f} / {r.migrations.iloc[0]:.1f}" if len(r) else "-")
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
    lines += ["", "Cost = GB x seconds every instance held, from its start (loading included) to its release "
              "(static: GB x residency). GPU-hours held = whole GPUs any instance occupies over the same spans "
              "(a shared GPU once); USD = those GPU-hours x the cluster's price per GPU-hour (configs/prices.yaml; "
              "`-` without one; results: `gpu_s_held`, `usd`). Figures: memory.png, migrations.png, goodput.png; "
              "docs/reselection.md explains the control loop and its parameters."]
    return "\n".join(lines) + "\n"
