"""Two ``teola_real_cpu`` runs of the same arrivals (same seed, the same repeats) whose blocks hold a
different number of schemes (stop 41): per scheme both runs have, the same query's latency in each
(matched by repeat and query), and Teola's paired speedup over each common baseline in each run.

    PYTHONPATH=. python experiments/scripts/design_check.py RUN_A RUN_B

The question it answers: does a block's number of schemes (each with its own engines in the one
process, taking turns per arrival segment) move the latencies, or the speedup, of the same queries?
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _queries(run: Path) -> tuple[pd.DataFrame, list[str]]:
    import yaml
    q = pd.read_parquet(run / "queries.parquet")
    params = yaml.safe_load((run / "config.yaml").read_text()).get("params") or {}
    return q[~q.failed], list(params.get("schemes") or sorted(q.scheme.unique()))


def compare(a: pd.DataFrame, b: pd.DataFrame, teola: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per scheme: matched queries, mean latency in a and b, mean of log(b / a) as a ratio;
    per baseline: Teola's median and mean paired speedups in a and b) over the (app, rate, repeat,
    qid) both runs hold."""
    key = ["app", "rate_rps", "repeat", "qid"]
    m = a.merge(b, on=[*key, "scheme"], suffixes=("_a", "_b"))      # only the schemes both runs have
    common = sorted(m.scheme.unique())
    per_scheme = m.groupby("scheme").apply(lambda g: pd.Series({
        "queries": len(g), "mean_a_s": g.latency_s_a.mean(), "mean_b_s": g.latency_s_b.mean(),
        "b_over_a": float(np.exp(np.log(g.latency_s_b / g.latency_s_a).mean()))})).reset_index()
    rows = []
    for base in (s for s in common if s != teola):
        row = {"baseline": base}
        for side in ("a", "b"):
            w = m.pivot_table(index=key, columns="scheme", values=f"latency_s_{side}")[[base, teola]].dropna()
            r = np.log(w[base] / w[teola])
            row |= {f"pairs_{side}": len(r), f"median_{side}": float(np.exp(r.median())),
                    f"mean_ratio_{side}": float(w[base].mean() / w[teola].mean()), f"faster_{side}": float((r > 0).mean())}
        rows.append(row)
    return per_scheme, pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path, help="a teola_real_cpu run directory")
    ap.add_argument("run_b", type=Path, help="another, of the same seed and repeats (other schemes a block)")
    args = ap.parse_args(argv)
    (a, sa), (b, sb) = _queries(args.run_a), _queries(args.run_b)
    if sa[0] != sb[0]:
        ap.error(f"the runs' first scheme (Teola) differs: {sa[0]} / {sb[0]}")
    per_scheme, speedups = compare(a, b, sa[0])
    print(f"# Same arrivals, different blocks: a = {args.run_a.name} ({len(sa)} schemes a block), "
          f"b = {args.run_b.name} ({len(sb)} schemes a block)\n")
    print("| scheme | matched queries | mean a (s) | mean b (s) | b / a (geometric mean of the same query) |")
    print("|---|---|---|---|---|")
    for r in per_scheme.itertuples():
        print(f"| {r.scheme} | {r.queries:.0f} | {r.mean_a_s:.3f} | {r.mean_b_s:.3f} | {r.b_over_a:.2f}x |")
    print("\n| baseline | pairs a / b | Teola faster in a / b | median speedup a / b | mean speedup a / b |")
    print("|---|---|---|---|---|")
    for r in speedups.itertuples():
        print(f"| {r.baseline} | {r.pairs_a} / {r.pairs_b} | {r.faster_a:.0%} / {r.faster_b:.0%} | "
              f"{r.median_a:.3f}x / {r.median_b:.3f}x | {r.mean_ratio_a:.3f}x / {r.mean_ratio_b:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
