"""``python -m experiments.bench_selectors``: selection time on the paper-sized space.

Prints, per registered solver, the median wall time over ``--repeats`` runs, the variants
evaluated per second and the plan's cost; targets (issue 2) on a 2-core machine:
exhaustive <= 0.5 s and flowmaker <= 20 ms (the paper: ~1 s heuristic, 6.5-40 s exhaustive).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from selector.deploy import deploy_task, with_cluster
from selector.index import NEW, compile_problem
from selector.problem import Problem
from selector.resolve import load_catalog, load_cluster_file, resolve_task
from selector.synthetic import paper_problem


def paper_sized_problem() -> Problem:
    """``selector.synthetic.paper_problem`` (24,310 new-deployment variants) on 8x A6000 after
    three quickstart tasks were deployed with flowmaker, so reuse options exist too."""
    from solvers.registry import get_solver

    catalog = load_catalog()
    cluster, gpu = load_cluster_file()
    for warm in ("code-completion", "chat", "rag-qa"):
        p = resolve_task(warm, catalog=catalog, cluster=cluster, gpu=gpu)
        _, cluster = deploy_task(with_cluster(p, cluster), get_solver("flowmaker"))
    return with_cluster(paper_problem(), cluster)


def main(argv: list[str] | None = None) -> int:
    from solvers.registry import get_solver, names

    ap = argparse.ArgumentParser(prog="python -m experiments.bench_selectors", description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", nargs="*", default=None, help=f"default: all ({', '.join(names())})")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=120.0)
    args = ap.parse_args(argv)
    problem = paper_sized_problem()
    cp = compile_problem(problem)
    new_only = sum(math.prod(sum(1 for o in st.options if o.kind == NEW) for st in wf.stages) for wf in cp.workflows)
    print(f"paper-sized space: {cp.variant_space} variants ({new_only} new-deployment only), "
          f"workflows {[w.radices for w in cp.workflows]}, {len(problem.cluster.instances)} reusable instances")
    print(f"{'solver':<20}{'status':<11}{'median_s':>10}{'min_s':>10}{'variants/s':>14}{'cost_gb_s':>12}")
    for name in args.solvers or names():
        try:
            solver = get_solver(name)
        except KeyError as exc:
            print(f"error: --solvers: {exc.args[0]}", file=sys.stderr)
            return 2
        times, plan = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            plan = solver.select(problem, time_limit_s=args.time_limit)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rate = plan.variants_evaluated / med if med > 0 else float("inf")
        cost = f"{plan.cost_gb_s:.6g}" if plan.solved else "-"
        print(f"{name:<20}{plan.status:<11}{med:>10.4f}{min(times):>10.4f}{rate:>14.0f}{cost:>12}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
