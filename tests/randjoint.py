"""Small random task sets (spec section 11) for tests, seeded: 2-4 tasks over a shared model
pool contending for 3-6 GPUs, so later tasks can reuse earlier tasks' instances and an early
task's choice can crowd a later one out."""
from __future__ import annotations

import numpy as np

from selector.joint import TaskSet, parse_task_set

POOL = [("m0", 22.0, 3.0), ("m1", 30.0, 7.6), ("m2", 38.0, 14.7)]      # name, accuracy, params (B)
CONFIGS = [(1, 1), (2, 1), (1, 2)]


def random_task_set(seed: int, *, max_tasks: int = 3, max_gpus: int = 5, sharing: str = "memory",
                    objective: str = "gb_s", max_stages: int = 2) -> TaskSet:
    rng = np.random.default_rng(seed)
    n_gpus = int(rng.integers(3, max_gpus + 1))
    gpu_mem = float(rng.choice([24.0, 40.0, 48.0]))
    mem = {(m, tp, pp): round(2.0 * b * (1 + 0.05 * tp * pp) + float(rng.uniform(1, 6)), 2)
           for m, _, b in POOL for tp, pp in CONFIGS}
    gpus = [{"id": g, "mem_gb": gpu_mem, "used_gb": 0.0} for g in range(n_gpus)]
    instances = []
    if rng.random() < 0.4:
        gpus[0]["used_gb"] = mem[("m0", 1, 1)]
        instances.append({"id": "i0", "model": "m0", "tp": 1, "pp": 1, "gpus": [0],
                          "utilization": round(float(rng.uniform(0, 0.6)), 3)})
    cluster = {"gpus": gpus, "instances": instances, "sharing": sharing}
    if objective == "usd_per_hour":
        cluster["prices"] = {"gpu": 2.0}
    tasks = [_task(rng, k, mem, max_stages) for k in range(int(rng.integers(2, max_tasks + 1)))]
    return parse_task_set({"cluster": cluster, "objective": objective, "tasks": tasks})


def _task(rng, k: int, mem: dict, max_stages: int) -> dict:
    names = ["m0"] + [m for m, _, _ in POOL[1:] if rng.random() < 0.7]
    models = [{"name": m, "accuracy": a, "active_params_b": b} for m, a, b in POOL if m in names]
    picks = sorted(rng.choice(len(CONFIGS), size=int(rng.integers(1, 3)), replace=False))
    configs = [{"tp": CONFIGS[i][0], "pp": CONFIGS[i][1]} for i in picks]
    workflows = []
    for w in range(int(rng.integers(1, 3))):
        stages = [{"name": f"s{s}", "calls": int(rng.integers(1, 3))} for s in range(int(rng.integers(1, max_stages + 1)))]
        workflows.append({"name": f"w{w}", "stages": stages})
    deployments = [{"model": m["name"], "tp": c["tp"], "pp": c["pp"], "mem_gb": mem[(m["name"], c["tp"], c["pp"])]}
                   for m in models for c in configs]
    perf = []
    for w in workflows:
        for s in w["stages"]:
            for m in models:
                for tp, pp in CONFIGS:          # rows for every config: instances of others' configs are reusable
                    if rng.random() < 0.85:
                        lat = m["active_params_b"] * 0.08 * float(rng.uniform(0.6, 1.4)) / tp ** 0.7 + 0.05
                        perf.append({"workflow": w["name"], "stage": s["name"], "model": m["name"], "tp": tp,
                                     "pp": pp, "latency_s": round(lat, 4),
                                     "capacity_rps": round(float(rng.uniform(0.5, 6)), 4)})
    return {"task": {"name": f"t{k}", "accuracy_slo": round(float(rng.uniform(15, 36)), 2),
                     "latency_slo_s": round(float(rng.uniform(0.8, 4.0)), 3),
                     "arrival_rate_rps": round(float(rng.uniform(0.3, 3.0)), 3)},
            "models": models, "configs": configs, "workflows": workflows, "deployments": deployments, "perf": perf}
