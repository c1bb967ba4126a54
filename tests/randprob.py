"""Small random selection problems for tests (seeded), with optional deployed instances; typed
ones (spec section 10: GPU types, prices, either objective) from :func:`random_typed_problem`."""
from __future__ import annotations

import numpy as np

from selector.problem import Problem, parse_problem


def random_problem(seed: int, *, max_models: int = 3, max_stages: int = 3, max_workflows: int = 2,
                   max_gpus: int = 4) -> Problem:
    rng = np.random.default_rng(seed)
    n_models = int(rng.integers(1, max_models + 1))
    models = [{"name": f"m{i}", "accuracy": round(float(rng.uniform(10, 45)), 2),
               "active_params_b": round(float(rng.choice([1.2, 3.0, 7.6, 8.0, 14.7, 32.5])), 2)}
              for i in range(n_models)]
    all_cfgs = [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)]
    picks = rng.choice(len(all_cfgs), size=int(rng.integers(1, 4)), replace=False)
    configs = [{"tp": all_cfgs[i][0], "pp": all_cfgs[i][1]} for i in sorted(picks)]
    n_gpus = int(rng.integers(2, max_gpus + 1))
    gpu_mem = float(rng.choice([24.0, 48.0, 80.0, 80.0]))
    workflows = []
    for w in range(int(rng.integers(1, max_workflows + 1))):
        stages = [{"name": f"s{s}", "calls": int(rng.integers(1, 3))} for s in range(int(rng.integers(1, max_stages + 1)))]
        workflows.append({"name": f"w{w}", "stages": stages})
    deployments = []
    for m in models:
        for c in configs:
            if rng.random() < 0.85:
                deployments.append({"model": m["name"], "tp": c["tp"], "pp": c["pp"],
                                    "mem_gb": round(float(2.2 * m["active_params_b"] * (1 + 0.05 * c["tp"] * c["pp"])
                                                          + rng.uniform(1, 8)), 2)})
    instances, gpus = _instances(rng, models, n_gpus, gpu_mem)
    inst_cfgs = {(i["tp"], i["pp"]) for i in instances}
    perf = []
    for w in workflows:
        for s in w["stages"]:
            for m in models:
                for tp, pp in sorted({(c["tp"], c["pp"]) for c in configs} | inst_cfgs):
                    if rng.random() < 0.8:
                        lat = m["active_params_b"] * 0.08 * rng.uniform(0.5, 1.5) / (tp ** 0.7) * (1 + 0.1 * (pp - 1))
                        perf.append({"workflow": w["name"], "stage": s["name"], "model": m["name"], "tp": tp, "pp": pp,
                                     "latency_s": round(float(lat) + 0.05, 4),
                                     "capacity_rps": round(float(rng.uniform(0.5, 12)), 4)})
    total_lat = float(rng.uniform(0.5, 8.0))
    return parse_problem({
        "task": {"name": f"rand{seed}", "accuracy_slo": round(float(rng.uniform(10, 40)), 2),
                 "latency_slo_s": round(total_lat, 3), "arrival_rate_rps": round(float(rng.uniform(0.2, 3)), 3)},
        "models": models, "configs": configs, "workflows": workflows, "deployments": deployments,
        "perf": perf, "cluster": {"gpus": gpus, "instances": instances}})


def with_sharing(problem: Problem, sharing: str) -> Problem:
    """``problem`` under ``cluster.sharing: sharing`` (spec section 9)."""
    if problem.cluster.sharing == sharing:
        return problem
    d = problem.to_dict()
    d["cluster"]["sharing"] = sharing
    return parse_problem(d)


def _instances(rng, models, n_gpus: int, gpu_mem: float):
    used = [0.0] * n_gpus
    instances = []
    for k in range(int(rng.integers(0, 4))):
        tp = int(rng.choice([1, 2]))
        if tp > n_gpus:
            continue
        ids = sorted(int(x) for x in rng.choice(n_gpus, size=tp, replace=False))
        mem = float(rng.uniform(3, 20))
        if any(used[g] + mem / tp > gpu_mem for g in ids):
            continue
        for g in ids:
            used[g] += mem / tp
        m = models[int(rng.integers(0, len(models)))]["name"]
        instances.append({"id": f"i{k}", "model": m, "tp": tp, "pp": 1, "gpus": ids,
                          "utilization": round(float(rng.uniform(0, 0.9)), 3)})
    gpus = [{"id": g, "mem_gb": gpu_mem, "used_gb": round(used[g], 4)} for g in range(n_gpus)]
    return instances, gpus


#: GPU types of the typed random problems: (memory GB, speed factor, price range $/GPU-hour)
TYPES = {"small": (24.0, 0.6, (0.4, 1.2)), "mid": (48.0, 1.0, (1.0, 2.5)), "big": (80.0, 1.8, (2.0, 5.0))}


def random_typed_problem(seed: int, objective: str = "usd_per_hour", *, n_types: int = 3, **kw) -> Problem:
    """:func:`random_problem` ``seed`` spread over ``n_types`` GPU types (section 10): each GPU gets
    a type (and that type's memory), each config is offered on one to ``n_types`` types, deployment
    and perf rows exist per type (latency and capacity scaled by the type's speed, so the faster,
    pricier type is not always worth it), instances keep GPUs of one type (a mixed one is dropped
    and its memory freed), and every type is priced. A second generator seeded from ``seed`` draws
    all of it, so the untyped problem of the same seed is unchanged."""
    base = random_problem(seed, **kw).to_dict()
    rng = np.random.default_rng([seed, 10])
    names = list(TYPES)[:n_types]
    gpus = base["cluster"]["gpus"]
    kinds = [names[int(k)] for k in rng.integers(0, n_types, size=len(gpus))]
    insts = [i for i in base["cluster"]["instances"] if len({kinds[g] for g in i["gpus"]}) == 1]
    used = [0.0] * len(gpus)
    for g, gpu in enumerate(gpus):
        gpu["type"], gpu["mem_gb"] = kinds[g], TYPES[kinds[g]][0]
    for i in insts:
        for g in i["gpus"]:
            used[g] += float(rng.uniform(3, 20)) / len(i["gpus"])
    for g, gpu in enumerate(gpus):
        gpu["used_gb"] = round(min(used[g], gpu["mem_gb"]), 4)
    for t in names:             # a few more, empty GPUs of each type
        for _ in range(int(rng.integers(0, 3))):
            gpus.append({"id": len(gpus), "mem_gb": TYPES[t][0], "used_gb": 0.0, "type": t})
    configs = []
    for c in base["configs"]:
        for t in rng.choice(names, size=int(rng.integers(1, n_types + 1)), replace=False):
            configs.append({**c, "gpu_type": str(t)})
    deployments = [{**d, "gpu_type": t, "mem_gb": round(d["mem_gb"] * float(rng.uniform(0.95, 1.1)), 2)}
                   for d in base["deployments"] for t in names if rng.random() < 0.85]
    perf = []
    for r in base["perf"]:
        for t in names:
            if rng.random() < 0.8:
                speed = TYPES[t][1] * float(rng.uniform(0.85, 1.15))
                perf.append({**r, "gpu_type": t, "latency_s": round(r["latency_s"] / speed, 4),
                             "capacity_rps": round(r["capacity_rps"] * speed, 4)})
    prices = {t: round(float(rng.uniform(*TYPES[t][2])), 3) for t in names}
    base.update(configs=configs, deployments=deployments, perf=perf, objective=objective)
    base["cluster"].update(instances=insts, prices=prices)
    return parse_problem(base)
