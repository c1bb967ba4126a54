"""Stress problems for time limits and memory: many deployed, reusable instances.

:func:`many_instances_problem` takes :func:`selector.synthetic.synthetic_problem` (one deep
workflow over a large catalog) and adds ``n_instances`` deployed instances of the models that
meet the accuracy SLO and have tp1/pp1 perf rows on every stage, each on a GPU of its own.
With ``utilization`` 0.5 every reuse overloads its instance (one stage alone adds about 0.65),
so no reuse is feasible, yet a heuristic that enumerates reuse assignments sees
``n_instances ** n_stages`` of them at reuse-aware size 0 (12 instances, 6 stages: ~3 million).
That is the shape that made ``flowmaker`` materialise every assignment before its first
deadline check (issue 14). Lower ``utilization`` (e.g. 0.1) makes single reuses feasible. :func:`long_workflow_problem` is
the other extreme: 200 stages over one model and one reusable instance.
"""
from __future__ import annotations

from selector.problem import Problem, parse_problem
from selector.synthetic import synthetic_problem


def many_instances_problem(*, n_instances: int = 12, n_stages: int = 6, n_models: int = 25, seed: int = 0,
                           utilization: float = 0.5, instance_gpu_gb: float = 80.0) -> Problem:
    """A synthetic problem plus ``n_instances`` reusable instances (round-robin over the kept
    models with a tp1/pp1 row on every stage), one per extra GPU of ``instance_gpu_gb`` GB."""
    d = synthetic_problem(n_stages=n_stages, n_models=n_models, seed=seed).to_dict()
    slo = d["task"]["accuracy_slo"]
    stages = {st["name"] for st in d["workflows"][0]["stages"]}
    kept = {m["name"] for m in d["models"] if m["accuracy"] >= slo}
    covered: dict[str, set[str]] = {}
    for r in d["perf"]:
        if (r["tp"], r["pp"]) == (1, 1) and r["model"] in kept:
            covered.setdefault(r["model"], set()).add(r["stage"])
    mem = {r["model"]: r["mem_gb"] for r in d["deployments"] if (r["tp"], r["pp"]) == (1, 1)}
    usable = [m["name"] for m in d["models"] if covered.get(m["name"]) == stages and m["name"] in mem]
    if not usable:
        raise ValueError("no accurate model has tp1/pp1 rows on every stage")
    gpus = list(d["cluster"]["gpus"])
    first = max(g["id"] for g in gpus) + 1
    instances = []
    for k in range(n_instances):
        model = usable[k % len(usable)]
        gpus.append({"id": first + k, "mem_gb": instance_gpu_gb, "used_gb": min(instance_gpu_gb, mem[model])})
        instances.append({"id": f"i{k}", "model": model, "tp": 1, "pp": 1, "gpus": [first + k],
                          "utilization": utilization})
    d["cluster"] = {**d["cluster"], "gpus": gpus, "instances": instances}
    d["task"] = {**d["task"], "name": f"{d['task']['name']}-i{n_instances}"}
    return parse_problem(d)


def long_workflow_problem(*, n_stages: int = 200, utilization: float = 0.1) -> Problem:
    """One model, one config, two GPUs, one deployed reusable instance, and a workflow of
    ``n_stages`` stages: ``2 ** n_stages`` variants, each block of which is wide (issue 28: the
    per-block work grew with stages squared and blew every time limit)."""
    stages = [{"name": f"s{i}", "calls": 1} for i in range(n_stages)]
    return parse_problem({
        "task": {"name": f"long-{n_stages}", "accuracy_slo": 10.0, "latency_slo_s": 10.0 * n_stages,
                 "arrival_rate_rps": 0.1},
        "models": [{"name": "m", "accuracy": 50.0, "active_params_b": 7.0}],
        "configs": [{"tp": 1, "pp": 1}],
        "workflows": [{"name": "w", "stages": stages}],
        "deployments": [{"model": "m", "tp": 1, "pp": 1, "mem_gb": 16.0}],
        "perf": [{"workflow": "w", "stage": s["name"], "model": "m", "tp": 1, "pp": 1, "latency_s": 1.0,
                  "capacity_rps": 100.0} for s in stages],
        "cluster": {"gpus": [{"id": 0, "mem_gb": 48.0, "used_gb": 16.0}, {"id": 1, "mem_gb": 48.0, "used_gb": 0.0}],
                    "instances": [{"id": "i0", "model": "m", "tp": 1, "pp": 1, "gpus": [0],
                                   "utilization": utilization}]}})


#: the benchmark's problems by name (python -m experiments.run bench_time_limits, params.problems)
STRESS_PROBLEMS = {
    "instances-12": lambda: many_instances_problem(n_instances=12),
    "instances-24": lambda: many_instances_problem(n_instances=24),
    "instances-24-low": lambda: many_instances_problem(n_instances=24, utilization=0.1),
    "long-200": lambda: long_workflow_problem(n_stages=200),
}
