"""Planning and replay for ``paper_goodput_cost`` (issue 17): SLO sets, the per-load sequential
deployment of every selector, the arrival windows of a cell and the replay of one cell.

A *plan key* fixes one deployment sequence: sharing mode, SLO set, selector, the load it is
planned for and the tasks left unplaced. A *cell* adds what the replay needs: colocation on or
off, the arrival process, trace, load and seed. Cells with equal keys are the same work, so
scenarios that share them (e.g. FlowMaker in several sensitivity rows) run them once.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from flowmaker.entry import UserError


class SloSet(BaseModel):
    """``configs/slo_sets/<name>.yaml``: accuracy SLOs per task (leaderboard points)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    accuracy_slo: dict[str, float] = Field(min_length=1)


def load_slo_set(name: str) -> SloSet:
    from selector.taskspec import CONFIGS
    from selector.yamlio import load_mapping
    path = CONFIGS / "slo_sets" / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise UserError(f"field 'slo_set': unknown SLO set '{name}'; known: {known}")
    try:
        return SloSet.model_validate(load_mapping(path))
    except Exception as exc:           # pydantic or YAML: one line naming the file
        raise UserError(f"{path}: {str(exc).splitlines()[0]}") from None


def _solver(spec: str):
    from solvers.registry import get_solver
    name, _, setting = spec.partition(":")
    try:
        return get_solver(name, **({"setting": setting} if setting else {}))
    except (KeyError, TypeError) as exc:
        raise UserError(f"field 'params.selectors': {spec}: {exc}") from None


def label(spec: str) -> str:
    return spec.replace(":", "-")


@dataclass(frozen=True)
class PlanKey:
    sharing: str
    slo_set: str
    selector: str               # registry spec, 'name:setting' allowed
    plan_load_pct: float        # the load the sequence is planned for (rates = load x planned rates)
    unplaced: tuple[str, ...] = ()


@dataclass(frozen=True)
class CellKey:
    plan: PlanKey
    colocation: bool
    arrivals: str
    trace: str
    load_pct: float
    seed: int

    def name(self) -> str:
        """The cell file's name: readable prefix, digest of the whole key."""
        digest = hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        return f"{label(self.plan.selector)}__{self.trace}__{self.load_pct:g}__s{self.seed}__{digest}"


def problem_at(problem, *, sharing: str, accuracy_slo: float, load_pct: float):
    """``problem`` under ``sharing``, with the SLO set's accuracy SLO and rate x load."""
    from selector.problem import parse_problem
    d = problem.to_dict()
    d["cluster"]["sharing"] = sharing
    d["task"]["accuracy_slo"] = accuracy_slo
    d["task"]["arrival_rate_rps"] *= load_pct / 100.0
    return parse_problem(d)


def deploy_sequence(problems, key: PlanKey, *, time_limit_s: float) -> tuple[list, list[dict]]:
    """Spec section 8 from the empty cluster, at ``key``'s load: ``[(problem seen, plan or None)]``
    (None: the task is left unplaced by the scenario) and one record per task."""
    from selector.deploy import deploy_task, with_cluster
    slo = load_slo_set(key.slo_set).accuracy_slo
    missing = [p.task.name for p in problems if p.task.name not in slo]
    if missing:
        raise UserError(f"SLO set '{key.slo_set}' has no accuracy SLO for task {missing[0]}")
    solver = _solver(key.selector)
    at = [problem_at(p, sharing=key.sharing, accuracy_slo=slo[p.task.name], load_pct=key.plan_load_pct)
          for p in problems]
    cluster, seq, rows = at[0].cluster, [], []
    for p in at:
        p = with_cluster(p, cluster)
        t0 = time.perf_counter()
        plan = None
        if p.task.name not in key.unplaced:
            plan, cluster = deploy_task(p, solver, time_limit_s=time_limit_s)
        seq.append((p, plan))
        rows.append(_record(key, p, plan, time.perf_counter() - t0))
    return seq, rows


def _record(key: PlanKey, p, plan, select_s: float) -> dict:
    dep = plan.deployment if plan is not None else None
    insts = dep.instances if dep is not None else ()
    return {"sharing": key.sharing, "slo_set": key.slo_set, "selector": label(key.selector),
            "plan_load_pct": key.plan_load_pct, "task": p.task.name, "accuracy_slo": p.task.accuracy_slo,
            "arrival_rate_rps": p.task.arrival_rate_rps, "status": plan.status if plan else "left unplaced",
            "placed": dep is not None, "workflow": dep.workflow if dep is not None else None,
            "instances_new": len(insts), "gb_new": sum(i.mem_gb for i in insts),
            "models": ",".join(sorted({i.model for i in insts})),
            "reused": ",".join(k for k, _ in dep.reuse) if dep is not None else "",
            "deployment": json.dumps(dep.to_dict()) if dep is not None else None,
            "spec_violation": plan.extra.get("spec_violation") if plan else None, "select_s": select_s}


@lru_cache(maxsize=4)
def _trace(kind: str, data_dir: str | None):
    from harness.workload import azure_or_synthetic
    try:
        return azure_or_synthetic(kind, data_dir=data_dir, seed=0)
    except KeyError as exc:
        raise UserError(f"field 'params.traces': {exc.args[0]}") from None


@lru_cache(maxsize=64)
def workload(trace_kind: str, arrivals: str, load_pct: float, seed: int, window_s: float, rates: tuple,
             max_peak_to_mean: float, data_dir: str | None):
    """The cell's requests and their peak-to-mean (10 s bins); ``rates`` = planned rates."""
    from harness.workload import peak_to_mean, poisson_workload, window_workload
    trace, source = _trace(trace_kind, data_dir)
    if arrivals == "poisson":
        wl = poisson_workload(trace, list(rates), load=load_pct / 100.0, window_s=window_s, seed=seed)
        return wl, peak_to_mean(wl.arrival_s, window_s), source
    wl, ptm = window_workload(trace, list(rates), load=load_pct / 100.0, window_s=window_s, seed=seed,
                              max_peak_to_mean=max_peak_to_mean)
    return wl, ptm, source


def run_cell(cell: CellKey, seq: list, tokens, *, rates: tuple, gpu: str, gpu_ids: list[int], engine, window_s: float,
             drain_cap_s: float, price_per_gb_s: float, max_peak_to_mean: float, data_dir: str | None) -> dict:
    """Replay one cell (``rates``: the tasks' planned rates, 100% load); its row (docs/metrics.md)
    with the key's fields, per-task and per-GPU JSON."""
    from harness.replay import replay
    wl, ptm, source = workload(cell.trace, cell.arrivals, cell.load_pct, cell.seed, window_s, rates,
                               max_peak_to_mean, data_dir)
    deps = [plan.deployment if plan is not None else None for _, plan in seq]
    res = replay([p for p, _ in seq], deps, tokens, wl, gpu=gpu, price_per_gb_s=price_per_gb_s, engine=engine,
                 colocation=cell.colocation, window_s=window_s, drain_cap_s=drain_cap_s)
    summary = dict(res.summary)
    busy = summary.pop("gpu_busy_s")
    share = {g: busy.get(g, 0.0) / summary["residency_window_s"] for g in gpu_ids}
    return {"sharing": cell.plan.sharing, "slo_set": cell.plan.slo_set, "selector": label(cell.plan.selector),
            "plan_load_pct": cell.plan.plan_load_pct, "unplaced": ",".join(cell.plan.unplaced),
            "colocation": cell.colocation, "arrivals": cell.arrivals, "trace": cell.trace,
            "load_pct": cell.load_pct, "seed": cell.seed, "trace_source": source, "peak_to_mean": ptm,
            **summary, "per_task": json.dumps(res.per_task), "gpu_busy_share": json.dumps(share)}
