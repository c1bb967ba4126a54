"""The small re-selection experiment (issues 19, 25) runs end to end through ``python -m
experiments.run``: both stages (choices on other seeds and days, then the held-out report), every
table, figure and the summary with its targets and generated dependence text are written,
``publish`` copies them beside the run folders, and a rerun with the same run id skips the
finished cells and says it resumed."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.kinds._reselection_depends import cheaper
from experiments.kinds.reselection import Params
from experiments.run import main
from profiler.catalog import load_prices
from tests.experiments.helpers import CONFIGS, run_small

CFG = CONFIGS / "reselection_small.yaml"


def test_small_reselection_writes_tables_plots_publishes_and_resumes(tmp_path, capsys):
    args, cfg, top, run = run_small("reselection_small", tmp_path, publish=True)
    for f in ["results", "tasks", "decisions", "instances", "memory", "hourly"]:
        assert len(pd.read_parquet(run / f"{f}.parquet")), f
    for f in ["memory.png", "migrations.png", "goodput.png"]:
        assert (run / f).stat().st_size > 10_000, f
        assert (top / f).read_bytes() == (run / f).read_bytes()                 # published
    res = pd.read_parquet(run / "results.parquet")
    assert set(res.phase) == {"tune", "rightsize", "report", "sweep", "cap", "uncompressed"}
    rep = res[res.phase == "report"].set_index("policy")
    assert {"static-peak", "adaptive", "oracle-hourly", "static-peak-fixed-workflow",
            "adaptive-fixed-workflow", "static-peak-selector"} <= set(rep.index)
    # the planner's rules (GPU score, smaller TP on every selection) hold no more GPUs than the selector's own plan
    assert rep.loc["static-peak", "gpu_s_held"] <= rep.loc["static-peak-selector", "gpu_s_held"] + 1e-6
    sim = rep[~rep.index.str.startswith("oracle")]
    # the bounds: the packed oracle holds no more GPUs than the oracle; the load shape's bound is finite
    assert rep.loc["oracle-hourly-packed", "gpu_s_held"] <= rep.loc["oracle-hourly", "gpu_s_held"] + 1e-6
    assert rep.loc["oracle-hourly", "fluid_x"] >= 1.0
    assert (sim.requests == sim.requests.iloc[0]).all()                         # one workload per seed
    assert rep.loc["static-peak", "migrations"] == 0 and rep.loc["adaptive", "migrations"] >= 1
    # a fixed workflow may be one whose calls miss their SLO share in the size tail (docs/resolve.md,
    # "Capacity": its rows carry the p99 and a capacity at 1.25x it), so its floor is lower
    fixed = sim.index.str.endswith("fixed-workflow")
    assert (sim.goodput[~fixed] > 0.85).all() and (sim.goodput[fixed] > 0.75).all()
    assert (sim.reserved_gb_s > 0).all() and (sim.busy_gpu_s > 0).all()
    assert (sim.busy_gpu_s <= sim.gpu_s_held + 1e-6).all()                      # busy within held
    a6000 = load_prices()["a6000"].usd_per_hour("on_demand")                  # the cluster's prices are kept
    assert np.allclose(sim.usd, sim.gpu_s_held / 3600.0 * a6000)
    assert rep.loc["oracle-hourly", "reserved_gb_s"] <= rep.loc["static-peak", "reserved_gb_s"]   # a bound
    choices = json.loads((run / "choices.json").read_text())
    assert choices["controller"] in cfg["params"]["controllers"] and choices["rate_x"] in [*cfg["params"]["rightsize"], 1.0]
    assert (res.phase == "uncompressed").sum() == 2 and (res[res.phase == "uncompressed"].compression == 1).all()
    md = (top / "summary.md").read_text()
    assert md == (run / "summary.md").read_text() and "## Targets (issue 25), per seed" in md
    assert "## What the headline depends on (generated" in md and "(the full run)" in md
    for line in ("- planner: static-peak with the selector's own plans", "- oracle bound:", "- hour by hour",
                 "- goodput by task", "- controller settings (tuning days", "- packing (several instances",
                 "- load shape:", "largest loss against static-peak on the same seed"):
        assert line in md, line
    # the fixed-workflow pair is compared on what each serves; ratios below 1 read "dearer", never "0.xx lower"
    fw = rep.loc[["static-peak-fixed-workflow", "adaptive-fixed-workflow"]]
    assert (fw.task_hours_placed <= len(cfg["params"]["tasks"]) * fw.profile_hours + 1e-9).all()
    s = fw.loc["static-peak-fixed-workflow"]
    assert s.task_hours_placed == pytest.approx(s.tasks_placed_start * s.profile_hours)   # static: placed or not
    assert (fw.served_in_slo <= fw.completed).all() and (fw.completed <= fw.requests).all()
    assert "## Fixed workflow against a static plan of the same workflow" in md and "GPU-h per 1000 requests" in md
    assert not re.search(r"\b0\.\d+x (lower|cheaper|dearer)", md)
    assert "| adaptive |" in capsys.readouterr().out
    cells = sorted((run / "cells").glob("*.parquet"))
    stamp = {c: c.stat().st_mtime_ns for c in cells}
    assert main(args) == 0
    assert {c: c.stat().st_mtime_ns for c in cells} == stamp                    # finished cells are skipped
    assert "finished by an earlier invocation (resumed" in (run / "summary.md").read_text()


def test_reported_seeds_must_be_held_out():
    cfg = yaml.safe_load(CFG.read_text())["params"]
    with pytest.raises(ValueError, match="among the reported seeds"):
        Params(**{**cfg, "rightsize_seeds": cfg["report"]["seeds"]})
    with pytest.raises(ValueError, match="curves"):
        Params(**{**cfg, "curves": {"nope": "code"}})


def test_right_size_must_pass_on_every_seed_not_on_the_mean():
    """0.6 passes on seed 1 and on the mean of both seeds but loses 3% on seed 2: 0.8 is chosen."""
    from experiments.kinds.reselection import rightsize
    rows = pd.DataFrame([
        {"policy": p, "seed": s, "goodput": g, "gpu_s_held": c}
        for p, c, gs in (("static-peak", 10.0, (0.99, 0.99)), ("static-x0.6", 6.0, (0.995, 0.96)),
                         ("static-x0.8", 8.0, (0.985, 0.982)))
        for s, g in zip((1, 2), gs)])
    got = rightsize(rows, [0.6, 0.8], 0.01)
    assert got["rate_x"] == 0.8
    worst = {r["policy"]: r["worst_loss"] for r in got["rightsize"]}
    assert worst["static-x0.6"] == pytest.approx(1 - 0.96 / 0.99) and worst["static-peak"] == 0.0
    assert rightsize(rows, [0.6], 0.01)["rate_x"] == 1.0                 # none passes: the peak plan
    assert rightsize(rows[rows.seed == 1], [0.6, 0.8], 0.01)["rate_x"] == 0.6


def test_tuned_controller_must_keep_goodput_on_every_tuning_seed_not_on_the_mean():
    """`lean` is cheapest and within 1% of static-peak on the mean of the two tuning seeds, but loses
    2.5% on seed 2: the next cheapest candidate within 1% on both seeds (`wide`) is chosen."""
    from experiments.kinds.reselection import choose
    rows = pd.DataFrame([
        {"phase": "tune", "policy": p, "seed": s, "goodput": g, "gpu_s_held": c}
        for p, c, gs in (("static-peak", 10.0, (0.99, 0.99)), ("adaptive-lean", 5.0, (1.0, 0.965)),
                         ("adaptive-wide", 6.0, (0.985, 0.982)), ("adaptive-h1.1", 7.0, (0.99, 0.99)))
        for s, g in zip((1, 2), gs)])
    params = Params(**yaml.safe_load(CFG.read_text())["params"])
    got = choose(rows, params)
    assert got["controller"] == "wide"
    worst = {r["policy"]: r["worst_loss"] for r in got["tune"]}
    assert worst["adaptive-lean"] == pytest.approx(1 - 0.965 / 0.99)
    assert choose(rows[rows.seed == 1], params)["controller"] == "lean"     # one seed cannot see it
    # choice_tol 0.5%: `wide` (0.81% on seed 2) is too close to the target, `h1.1` (0%) is chosen
    strict = params.model_copy(update={"choice_tol": 0.005})
    assert choose(rows, strict)["controller"] == "h1.1"


def test_cost_ratios_below_one_are_phrased_as_dearer():
    assert cheaper(2.0) == "2.00x cheaper" and cheaper(0.46) == "2.17x dearer" and cheaper(1.0) == "1.00x cheaper"
    assert cheaper(float("nan")) == "n/a"


def test_targets_are_judged_again_on_the_seeds_not_looked_at():
    """Issue 25: with ``seen_seeds`` (report seeds looked at while the candidates were revised) the
    summary judges the targets again on the other seeds alone: here adaptive fails on a seen seed
    and passes on the fresh ones, and both verdicts are written."""
    from experiments.kinds._reselection_report import fresh_seeds
    rows = pd.DataFrame([
        {"policy": p, "seed": s, "goodput": g, "gpu_s_held": c, "reserved_gb_s": c, "busy_gpu_s": c, "usd": c}
        for s, gs in ((0, (0.99, 0.975)), (1, (0.99, 0.989)), (2, (0.99, 0.985)))
        for p, c, g in (("static-peak", 10.0, gs[0]), ("adaptive", 5.0, gs[1]))])
    lines = fresh_seeds(rows, [0])
    assert lines[0].startswith("- on the 2 seeds not looked at") and "(1, 2; seeds 0 had been)" in lines[0]
    assert lines[1] == "  - adaptive goodput within 1% of static-peak: yes (relative loss 0.10% to 0.51%)"
    assert fresh_seeds(rows, []) == [] and fresh_seeds(rows, [0, 1, 2]) == []


def test_the_fixed_workflow_pair_is_summed_up_over_every_seed_it_ran():
    """``fixed_workflow_seeds``: the pair's ratios as ranges over the seeds both ran (none with one)."""
    from experiments.kinds._reselection_fixed import _over_seeds
    rows = pd.DataFrame([
        {"policy": p, "seed": s, "gpu_s_held": c, "goodput": g, "served_in_slo": n}
        for s, (ca, ga, na) in ((0, (15.0, 0.9, 900)), (1, (20.0, 0.8, 700)))
        for p, c, g, n in (("static-peak-fixed-workflow", 10.0, 0.75, 750), ("adaptive-fixed-workflow", ca, ga, na))])
    line, = _over_seeds(rows)
    assert "over the 2 seeds both ran (0, 1)" in line and "1.50-2.00x" in line and "(mean 1.75x)" in line
    assert "1.25-2.14x per request within SLO" in line and "more requests within SLO on 1 of 2 seeds" in line
    assert _over_seeds(rows[rows.seed == 0]) == []
