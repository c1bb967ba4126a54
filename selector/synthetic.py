"""Problems built from the real catalog, for the benchmark suite and the scalability study.

* :func:`paper_problem`: the paper's example space, exactly: 3 workflows of 1, 2 and 2 stages
  (the ``chat`` task), 11 models, 10 configs, 24,310 new-deployment variants. It starts from
  ``selector.resolve.resolve_task("chat")`` on 8x A6000 and completes the 11 (model, config)
  pairs that resolve leaves out because a shard exceeds 48 GB: each gets the memory and the
  perf rows of the same model's nearest offered config with the same GPU count (or else the
  fewest GPUs), so they are in the space and can never be placed, as in the paper's count.
* :func:`synthetic_problem`: one workflow of ``n_stages`` stages over a catalog of
  ``n_models`` models. Stage ``k`` takes the perf table of the base task's ``k mod K``-th
  (workflow, stage) pair (``K`` = all of ``code-review``'s stages). Models beyond the 11 real
  ones are *interpolated*: a synthetic model picks two real models adjacent in parameter count
  and ``t ~ U(0, 1)``; its parameters, memory, latency and capacity are geometric
  interpolations (``a^(1-t) b^t``) and its accuracy the linear one, per config and stage
  where both neighbours have a row. The latency SLO is ``latency_slo_factor`` times the
  workflow's latency on ``reference_model`` at tp1/pp1, so the SLO scales with depth.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from selector.problem import Problem, parse_problem


@lru_cache(maxsize=8)
def _resolved(task: str) -> dict:
    from selector.resolve import resolve_task
    return resolve_task(task).to_dict()


def paper_problem(seed: int | None = None) -> Problem:
    """The paper-sized example space (24,310 variants); see the module docstring.

    With a ``seed``, the same space under other requirements: the accuracy SLO just below a
    random catalog model's accuracy, the latency SLO 1.2-4x its own value, the arrival rate
    0.2-5x, drawn from ``np.random.default_rng(seed)``."""
    d = _resolved("chat")
    deploy = {(r["model"], r["tp"], r["pp"]): r["mem_gb"] for r in d["deployments"]}
    perf = {(r["workflow"], r["stage"], r["model"], r["tp"], r["pp"]): r for r in d["perf"]}
    deployments, rows = list(d["deployments"]), list(d["perf"])
    for m in d["models"]:
        have = [(tp, pp) for (mm, tp, pp) in deploy if mm == m["name"]]
        for c in d["configs"]:
            key = (m["name"], c["tp"], c["pp"])
            if key in deploy or not have:
                continue
            n = c["tp"] * c["pp"]
            donor = min(have, key=lambda tc: (tc[0] * tc[1] != n, tc[0] * tc[1], tc))
            deployments.append({"model": m["name"], "tp": c["tp"], "pp": c["pp"],
                                "mem_gb": deploy[(m["name"], *donor)]})
            for w in d["workflows"]:
                for st in w["stages"]:
                    r = perf.get((w["name"], st["name"], m["name"], *donor))
                    if r is not None:
                        rows.append({**r, "tp": c["tp"], "pp": c["pp"]})
    task = {**d["task"], "name": "paper-sized"}
    if seed is not None:
        rng = np.random.default_rng(seed)
        accs = sorted(m["accuracy"] for m in d["models"])
        task = {"name": f"paper-sized-{seed}",
                "accuracy_slo": round(accs[int(rng.integers(len(accs) - 2))] - 0.01, 2),
                "latency_slo_s": round(task["latency_slo_s"] * float(rng.uniform(1.2, 4.0)), 4),
                "arrival_rate_rps": round(task["arrival_rate_rps"] * float(rng.uniform(0.2, 5.0)), 4)}
    return parse_problem({**d, "task": task, "deployments": deployments, "perf": rows})


def interpolated_models(models: list[dict], n_models: int, rng: np.random.Generator) -> list[tuple[dict, int, int, float]]:
    """``n_models - len(models)`` synthetic models as ``(model, lower, upper, t)`` (indices into
    ``models`` sorted by active parameters)."""
    order = sorted(range(len(models)), key=lambda i: models[i]["active_params_b"])
    out = []
    for k in range(max(0, n_models - len(models))):
        j = int(rng.integers(len(order) - 1))
        a, b = order[j], order[j + 1]
        t = float(rng.uniform(0.05, 0.95))
        pa, pb = models[a]["active_params_b"], models[b]["active_params_b"]
        acc = (1 - t) * models[a]["accuracy"] + t * models[b]["accuracy"]
        out.append(({"name": f"syn-{k:03d}", "accuracy": round(acc, 3),
                     "active_params_b": round(pa ** (1 - t) * pb ** t, 3)}, a, b, t))
    return out


def _geo(a: float, b: float, t: float) -> float:
    return a ** (1 - t) * b ** t


def synthetic_problem(*, n_stages: int = 3, n_models: int = 11, seed: int = 0, base_task: str = "code-review",
                      latency_slo_factor: float = 2.5, reference_model: str = "llama-3.1-8b",
                      arrival_rate_rps: float | None = None, depths: tuple[int, ...] | None = None) -> Problem:
    """A problem of one workflow of depth ``n_stages`` (or, with ``depths``, one workflow per
    entry, ``deep`` or ``deep0``, ``deep1``, ...) over ``n_models`` models (module docstring)."""
    depths = (n_stages,) if depths is None else tuple(depths)
    if not depths or min(depths) < 1 or n_models < 2:
        raise ValueError("n_stages (every depth) >= 1 and n_models >= 2 required")
    rng = np.random.default_rng(seed)
    d = _resolved(base_task)
    real = d["models"][:n_models]
    tables = [(w["name"], st["name"]) for w in d["workflows"] for st in w["stages"]]
    perf = {(r["workflow"], r["stage"], r["model"], r["tp"], r["pp"]): r for r in d["perf"]}
    deploy = {(r["model"], r["tp"], r["pp"]): r["mem_gb"] for r in d["deployments"]}
    synth = interpolated_models(real, n_models, rng)
    models = list(real) + [m for m, *_ in synth]
    deployments = [r for r in d["deployments"] if r["model"] in {m["name"] for m in real}]
    for m, a, b, t in synth:
        for c in d["configs"]:
            ka, kb = (real[a]["name"], c["tp"], c["pp"]), (real[b]["name"], c["tp"], c["pp"])
            if ka in deploy and kb in deploy:
                deployments.append({"model": m["name"], "tp": c["tp"], "pp": c["pp"],
                                    "mem_gb": round(_geo(deploy[ka], deploy[kb], t), 4)})
    workflows, rows = [], []
    for j, depth in enumerate(depths):
        wf = "deep" if len(depths) == 1 else f"deep{j}"
        stages = [{"name": f"s{k}", "calls": 1} for k in range(depth)]
        workflows.append({"name": wf, "stages": stages})
        for k, st in enumerate(stages):
            wname, sname = tables[(k + j) % len(tables)]     # workflow j starts j tables later
            for m in real:
                for c in d["configs"]:
                    r = perf.get((wname, sname, m["name"], c["tp"], c["pp"]))
                    if r is not None:
                        rows.append({**r, "workflow": wf, "stage": st["name"]})
            for m, a, b, t in synth:
                for c in d["configs"]:
                    ra = perf.get((wname, sname, real[a]["name"], c["tp"], c["pp"]))
                    rb = perf.get((wname, sname, real[b]["name"], c["tp"], c["pp"]))
                    if ra is not None and rb is not None:
                        rows.append({"workflow": wf, "stage": st["name"], "model": m["name"], "tp": c["tp"],
                                     "pp": c["pp"], "latency_s": round(_geo(ra["latency_s"], rb["latency_s"], t), 6),
                                     "capacity_rps": round(_geo(ra["capacity_rps"], rb["capacity_rps"], t), 6)})
    # the SLO follows the first workflow (as resolve's standalone latency does)
    ref = sum(perf[(*tables[k % len(tables)], reference_model, 1, 1)]["latency_s"] for k in range(depths[0]))
    shape = f"d{depths[0]}" if len(depths) == 1 else "d" + "-".join(str(x) for x in depths)
    task = {**d["task"], "name": f"synthetic-{shape}-m{n_models}-s{seed}",
            "latency_slo_s": round(latency_slo_factor * ref * float(rng.uniform(0.9, 1.1)), 6)}
    if arrival_rate_rps is not None:
        task["arrival_rate_rps"] = arrival_rate_rps
    return parse_problem({**d, "task": task, "models": models, "workflows": workflows,
                          "deployments": deployments, "perf": rows})

