"""Seeded random selection problems (spec section 1) for tests and benchmarks.

``random_problem(seed)`` draws a *shape* (workflows, stages, models, configs, GPUs, deployed
instances) and then the numbers, all from ``np.random.default_rng(seed)``, so a seed names
one problem forever (for a given version of this file). The numbers follow the physics
loosely, which keeps the problems realistic for a selector: bigger models are more accurate,
use more memory and are slower; tensor parallelism cuts latency with an overhead; pipeline
parallelism raises capacity more than it cuts latency; some perf rows are missing; deployed
instances sit on the GPUs they list and already use part of their capacity.

SLOs are drawn relative to what the drawn options can reach, so most problems are feasible
while a share (about one in six) is infeasible by accuracy, latency, reuse capacity or
placement. ``Shape`` bounds are keyword arguments so tests can ask for tiny or larger ones;
``variant_space`` stays below ``max_space`` (default 50,000) so ``exhaustive`` proves every
generated problem in well under a second.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from selector.index import compile_problem
from selector.problem import Problem, parse_problem

CONFIG_POOL = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (2, 4), (4, 2), (8, 1), (1, 8))


@dataclass(frozen=True)
class Shape:
    """Bounds of a random problem's shape (inclusive)."""

    workflows: tuple[int, int] = (1, 3)
    stages: tuple[int, int] = (1, 3)
    models: tuple[int, int] = (2, 7)
    configs: tuple[int, int] = (1, 5)
    gpus: tuple[int, int] = (2, 10)
    instances: tuple[int, int] = (0, 4)
    max_space: int = 50_000


def random_problem(seed: int, *, shape: Shape = Shape(), name: str | None = None) -> Problem:
    """One seeded random problem; the same seed always gives the same problem."""
    rng = np.random.default_rng(seed)
    for _ in range(50):   # redraw shapes until the variant space fits max_space
        data = _draw(rng, shape, name or f"rand-{seed}")
        problem = parse_problem(data)
        if compile_problem(problem).variant_space <= shape.max_space:
            return problem
        shape = Shape(shape.workflows, shape.stages, (shape.models[0], max(shape.models[0], shape.models[1] - 1)),
                      shape.configs, shape.gpus, shape.instances, shape.max_space)
    return problem


def _draw(rng: np.random.Generator, shape: Shape, name: str) -> dict:
    def pick(lo_hi: tuple[int, int]) -> int:
        return int(rng.integers(lo_hi[0], lo_hi[1] + 1))

    n_models, n_configs, n_gpus = pick(shape.models), pick(shape.configs), pick(shape.gpus)
    gpu_gb = float(rng.choice([24.0, 48.0, 48.0, 80.0, 80.0]))
    params = np.sort(np.exp(rng.uniform(math.log(1.0), math.log(72.0), n_models)))
    acc = np.round(8.0 + 7.0 * np.log(params) + rng.normal(0, 3.0, n_models), 2).clip(1.0, 80.0)
    models = [{"name": f"m{i}", "accuracy": float(acc[i]), "active_params_b": round(float(params[i]), 2)}
              for i in range(n_models)]
    order = rng.permutation(len(CONFIG_POOL))[:n_configs]
    configs = [CONFIG_POOL[i] for i in sorted(order)]
    if rng.random() < 0.5 and (1, 1) not in configs:
        configs[0] = (1, 1)
        configs = sorted(set(configs), key=CONFIG_POOL.index)
    if rng.random() < 0.8:    # most clusters can host every config
        n_gpus = max(n_gpus, max(tp * pp for tp, pp in configs))
    deployments = {}
    for i, p in enumerate(params):
        for tp, pp in configs:
            if rng.random() < 0.08:
                continue          # some deployments are not offered
            mem = 2.0 * p * (1.0 + rng.uniform(0.05, 0.3)) + 1.5 * tp * pp
            deployments[(i, tp, pp)] = round(float(mem), 2)
    workflows = _workflows(rng, shape, pick)
    perf = _perf(rng, workflows, params, configs, deployments, n_models)
    gpus, instances = _cluster(rng, shape, pick, n_gpus, gpu_gb, params, configs, deployments, n_models)
    # reuse needs a perf row for the instance's model and config
    inst_cfgs = {(inst["model"], inst["tp"], inst["pp"]) for inst in instances}
    for (m, tp, pp) in inst_cfgs:
        mi = int(m[1:])
        if (tp, pp) not in configs:
            perf.extend(_rows(rng, workflows, [mi], [(tp, pp)], params, {}, force=True))
    task = _task(rng, name, models, workflows, perf)
    return {"task": task, "models": models, "configs": [{"tp": tp, "pp": pp} for tp, pp in configs],
            "workflows": workflows,
            "deployments": [{"model": f"m{m}", "tp": tp, "pp": pp, "mem_gb": mem}
                            for (m, tp, pp), mem in deployments.items()],
            "perf": perf, "cluster": {"gpus": gpus, "instances": instances}}


def _workflows(rng, shape: Shape, pick) -> list[dict]:
    out = []
    for w in range(pick(shape.workflows)):
        n = pick(shape.stages)
        out.append({"name": f"w{w}", "stages": [{"name": f"s{s}", "calls": int(rng.choice([1, 1, 1, 2, 3]))}
                                                for s in range(n)]})
    return out


def _rows(rng, workflows, model_ids, configs, params, deployments, *, force: bool = False) -> list[dict]:
    rows = []
    for w in workflows:
        for st in w["stages"]:
            work = float(np.exp(rng.normal(0.0, 0.6)))          # this stage's token mix
            for m in model_ids:
                for tp, pp in configs:
                    if not force and ((m, tp, pp) not in deployments or rng.random() < 0.06):
                        continue
                    base = 0.05 * work * params[m] ** 0.85 + 0.1
                    lat = base / (tp * pp ** 0.25) + 0.02 * (tp - 1) + 0.03 * (pp - 1)
                    lat *= float(np.exp(rng.normal(0, 0.1)))
                    cap = (1.0 / lat) * pp ** 0.7 * float(np.exp(rng.normal(0.8, 0.4)))
                    rows.append({"workflow": w["name"], "stage": st["name"], "model": f"m{m}", "tp": tp, "pp": pp,
                                 "latency_s": round(lat, 4), "capacity_rps": round(cap, 4)})
    return rows


def _perf(rng, workflows, params, configs, deployments, n_models) -> list[dict]:
    return _rows(rng, workflows, list(range(n_models)), configs, params, deployments)


def _cluster(rng, shape: Shape, pick, n_gpus, gpu_gb, params, configs, deployments, n_models):
    used = np.zeros(n_gpus)
    instances = []
    n_inst = pick(shape.instances) if rng.random() < 0.6 else 0    # many clusters start empty
    for k in range(n_inst):
        m = int(rng.integers(n_models))
        cands = [(tp, pp) for tp, pp in configs if (m, tp, pp) in deployments and tp * pp <= n_gpus]
        if not cands:
            continue
        tp, pp = cands[int(rng.integers(len(cands)))]
        shard = deployments[(m, tp, pp)] / (tp * pp)
        ids = [int(g) for g in np.argsort(used, kind="stable")[: tp * pp]]
        if any(used[g] + shard > gpu_gb for g in ids):
            continue
        used[ids] += shard
        instances.append({"id": f"i{k}", "model": f"m{m}", "tp": tp, "pp": pp, "gpus": sorted(ids),
                          "utilization": round(float(rng.uniform(0.2, 0.95)), 3)})
    gpus = [{"id": g, "mem_gb": gpu_gb, "used_gb": round(float(min(gpu_gb, used[g])), 4)} for g in range(n_gpus)]
    return gpus, instances


def _task(rng, name, models, workflows, perf) -> dict:
    accs = sorted(m["accuracy"] for m in models)
    roll = rng.random()
    if roll < 0.05:
        acc_slo = accs[-1] + 1.0                                     # unreachable accuracy
    else:
        acc_slo = float(accs[int(rng.integers(0, max(1, len(accs) - 1)))]) - 0.01
    acc_of = {m["name"]: m["accuracy"] for m in models}
    best = math.inf
    for w in workflows:
        total = 0.0
        for st in w["stages"]:
            lats = [r["latency_s"] for r in perf if r["workflow"] == w["name"] and r["stage"] == st["name"]
                    and acc_of[r["model"]] >= acc_slo]
            total += st["calls"] * min(lats) if lats else math.inf
        best = min(best, total)
    if not math.isfinite(best):
        best = 1.0
    factor = 0.9 if rng.random() < 0.06 else float(rng.uniform(1.2, 6.0))   # some too tight
    return {"name": name, "accuracy_slo": round(acc_slo, 2), "latency_slo_s": round(best * factor, 4),
            "arrival_rate_rps": round(float(np.exp(rng.uniform(math.log(0.1), math.log(3.0)))), 3)}
