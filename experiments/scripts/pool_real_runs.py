"""Pool several ``teola_real_cpu`` runs of the same apps, rates and schemes (stop 39): every
(run, repeat) becomes one repeat of a single run, so each speedup's paired bootstrap interval rests
on all the runs' paired queries (resampled within each run's repeat), then the direction section
against the simulation, as each run's own summary has it (``_teola_real_report.summarise``,
``_teola_real_direction.markdown``).

    PYTHONPATH=. python experiments/scripts/pool_real_runs.py RUN_DIR [RUN_DIR ...] [--against APP:RATE=SCHEME ...] [--alpha A]

The typical-query section (stop 40, ``_teola_real_typical``) judges each unsaturated cell against the
pooled data's best baseline, or against the baselines named by ``--against`` (fixed in advance, as the
confirmatory runs' rule in ``docs/orchestrator.md`` fixes them), Holm-corrected over those cells.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import yaml


def pooled(run_dirs: list[Path]) -> tuple[pd.DataFrame, dict]:
    """All runs' queries with ``repeat`` renumbered over (run, repeat), and the first run's params."""
    frames = []
    for i, d in enumerate(run_dirs):
        q = pd.read_parquet(d / "queries.parquet")
        frames.append(q.assign(repeat=q.repeat + 1000 * i, run=d.name))
    params = yaml.safe_load((run_dirs[0] / "config.yaml").read_text()).get("params") or {}
    return pd.concat(frames, ignore_index=True), params


def main(argv: list[str]) -> int:
    import argparse

    from experiments.kinds import _teola_real_direction as direction
    from experiments.kinds import _teola_real_report as report
    from experiments.kinds.teola_real_cpu import Params
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="teola_real_cpu run directories")
    ap.add_argument("--against", action="append", default=[], metavar="APP:RATE=SCHEME",
                    help="the typical-query test's baseline for one (app, rate), fixed in advance")
    ap.add_argument("--alpha", type=float, default=0.05,
                    help="the typical-query test's family-wise level (a follow-up's, fixed in advance)")
    args = ap.parse_args(argv)
    if not 0 < args.alpha < 1:
        ap.error(f"--alpha: expected a level in (0, 1), got {args.alpha}")
    try:
        against = {(c.split(":")[0], float(c.split(":")[1])): s for c, s in (a.split("=") for a in args.against)}
    except (ValueError, IndexError):
        ap.error(f"--against: expected APP:RATE=SCHEME, got {args.against}")
    df, raw = pooled(args.runs)
    p = Params(**raw)
    summary = report.summarise(df, p.schemes, None, p.saturation)
    n = df.groupby(["app", "rate_rps"]).apply(lambda g: g[["run", "repeat", "qid"]].drop_duplicates().shape[0])
    print(f"# Pooled real runs: {', '.join(d.name for d in args.runs)}\n")
    print("Paired queries per (app, rate): " + ", ".join(f"{a} {r:g} req/s: {k}" for (a, r), k in n.items())
          + f"; {df.groupby(['run', 'repeat']).ngroups} repeats in all.")
    sim = (direction.simulate(p.simulation, p.rates_rps, p.schemes) if p.simulation
           else pd.DataFrame(columns=direction.SIM_COLUMNS))
    if against:
        print("\nTypical-query cells judged against baselines fixed in advance: "
              + ", ".join(f"{a} at {r:g} req/s: {s}" for (a, r), s in against.items()))
    print("\n".join(direction.markdown(summary, sim, f"`{p.simulation}`", df, against or None, args.alpha)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
