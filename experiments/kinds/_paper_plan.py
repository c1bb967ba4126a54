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

import pandas as pd
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


#: FlowMaker's planning path: the selectors that plan with the fair-share check under compute sharing
#: (``cluster.sharing: fair-share``, docs/selection.md "Fair-share placement") when a scenario's
#: ``fair_share`` is on; every other selector keeps its own rule (section 9 for the compute-aware ones)
FAIR_SHARE = ("flowmaker", "flowmaker-noreuse", "flowmaker-plus")

#: selectors with fixed rules that read neither the problem's objective nor (but for their own
#: placement option) anything a scenario's objective changes: their plans are shared across objectives
OBJECTIVE_BLIND = ("langchain", "routellm")


def takes_placement(spec: str) -> bool:
    """Whether the selector has its own placement rule and a ``placement`` option (LangChain,
    RouteLLM: ``solvers.baselines.common.PLACEMENTS``); the others place by the spec already."""
    import inspect

    from solvers.registry import REGISTRY
    name = spec.partition(":")[0]
    if name not in REGISTRY:
        return False
    module, cls = REGISTRY[name].split(":")
    return "placement" in inspect.signature(getattr(__import__(module, fromlist=[cls]), cls)).parameters


def plan_key(sharing: str, slo_set: str, spec: str, plan_load_pct: float, unplaced: tuple[str, ...],
             placement: str, objective: str, fair_share: bool = False) -> PlanKey:
    """The plan key, with the settings a selector ignores set to their defaults, so that scenarios
    differing only there share its plans and cells (FlowMaker in the fair-placement row, LangChain
    under another objective, a baseline with FlowMaker's fair-share check on or off)."""
    placement = placement if takes_placement(spec) else "own"
    objective = "gb_s" if spec.partition(":")[0] in OBJECTIVE_BLIND else objective
    fair_share = fair_share and sharing == "compute" and spec.partition(":")[0] in FAIR_SHARE
    return PlanKey(sharing, slo_set, spec, plan_load_pct, unplaced, placement, objective, fair_share)


def _solver(spec: str, placement: str = "own"):
    """The selector of ``spec``; ``placement`` (``own`` or ``spec``) goes to the baselines that
    take it (:func:`takes_placement`)."""
    from solvers.registry import get_solver
    name, _, setting = spec.partition(":")
    kwargs = {"setting": setting} if setting else {}
    if placement != "own" and takes_placement(spec):
        kwargs["placement"] = placement
    try:
        return get_solver(name, **kwargs)
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
    placement: str = "own"      # the baselines' placement: own rule, or FlowMaker's ("spec")
    objective: str = "gb_s"     # the problems' objective (spec section 5 or 10's usd_per_hour)
    fair_share: bool = False    # planned under sharing: fair-share (section 9 + the fair-share check)

    @property
    def planning_sharing(self) -> str:
        """The sharing mode the selector plans under (``fair-share`` adds to ``compute``)."""
        return "fair-share" if self.fair_share else self.sharing


@dataclass(frozen=True)
class CellKey:
    plan: PlanKey
    colocation: bool
    arrivals: str
    trace: str
    load_pct: float
    seed: int

    work: str = ""              # digest of what the replay reads of the plan (:func:`work_digest`)

    def name(self) -> str:
        """The cell file's name: readable prefix, digest of what decides the replay: the plan's
        work digest when set (two plan keys that deploy the same thing share the cell), else the
        whole key."""
        key = asdict(self) if not self.work else {k: v for k, v in asdict(self).items() if k != "plan"}
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        return f"{label(self.plan.selector)}__{self.trace}__{self.load_pct:g}__s{self.seed}__{digest}"

    def fields(self) -> dict:
        """The key's fields as a results row has them (a shared cell's row takes its key's)."""
        p = self.plan
        return {"sharing": p.sharing, "slo_set": p.slo_set, "selector": label(p.selector), "placement": p.placement,
                "objective": p.objective, "plan_load_pct": p.plan_load_pct, "unplaced": ",".join(p.unplaced),
                "fair_share": p.fair_share}


def work_digest(seq: list) -> str:
    """A digest of everything a replay reads of a deployment sequence: per task its problem's task
    (rates, SLOs) and the deployment (None: not placed)."""
    parts = [(p.task.model_dump(mode="json"), plan.deployment.to_dict() if plan is not None and
              plan.deployment is not None else None) for p, plan in seq]
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def problem_at(problem, *, sharing: str, accuracy_slo: float, load_pct: float, objective: str = "gb_s"):
    """``problem`` under ``sharing`` and ``objective``, with the SLO set's accuracy SLO and rate x load."""
    from selector.problem import parse_problem
    d = problem.to_dict()
    d["cluster"]["sharing"] = sharing
    d["objective"] = objective
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
    solver = _solver(key.selector, key.placement)
    at = [problem_at(p, sharing=key.planning_sharing, accuracy_slo=slo[p.task.name], load_pct=key.plan_load_pct,
                     objective=key.objective) for p in problems]
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


def plan_frame(key: PlanKey, problems, *, time_limit_s: float) -> pd.DataFrame:
    """:func:`deploy_sequence` as an executor cell: its records, the pickled sequence in the first
    row's ``sequence`` (so plan keys are planned by the workers and a resumed run re-plans none)."""
    import pickle
    t0 = time.perf_counter()
    seq, rows = deploy_sequence(problems, key, time_limit_s=time_limit_s)
    df = pd.DataFrame(rows).assign(cell_wall_s=time.perf_counter() - t0)
    df["sequence"] = [pickle.dumps(seq)] + [None] * (len(rows) - 1)
    return df


def _record(key: PlanKey, p, plan, select_s: float) -> dict:
    dep = plan.deployment if plan is not None else None
    insts = dep.instances if dep is not None else ()
    return {"sharing": key.sharing, "slo_set": key.slo_set, "selector": label(key.selector),
            "placement": key.placement, "objective": key.objective, "plan_load_pct": key.plan_load_pct,
            "fair_share": key.fair_share, "task": p.task.name, "accuracy_slo": p.task.accuracy_slo,
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
    t0 = time.perf_counter()
    wl, ptm, source = workload(cell.trace, cell.arrivals, cell.load_pct, cell.seed, window_s, rates,
                               max_peak_to_mean, data_dir)
    deps = [plan.deployment if plan is not None else None for _, plan in seq]
    res = replay([p for p, _ in seq], deps, tokens, wl, gpu=gpu, price_per_gb_s=price_per_gb_s, engine=engine,
                 colocation=cell.colocation, window_s=window_s, drain_cap_s=drain_cap_s)
    summary = dict(res.summary)
    busy = summary.pop("gpu_busy_s")
    share = {g: busy.get(g, 0.0) / summary["residency_window_s"] for g in gpu_ids}
    summary["busy_gpu_s"] = float(sum(busy.get(g, 0.0) for g in gpu_ids))     # busy GPU-seconds, window
    return {"sharing": cell.plan.sharing, "slo_set": cell.plan.slo_set, "selector": label(cell.plan.selector),
            "placement": cell.plan.placement, "objective": cell.plan.objective, "fair_share": cell.plan.fair_share,
            "plan_load_pct": cell.plan.plan_load_pct, "unplaced": ",".join(cell.plan.unplaced),
            "colocation": cell.colocation, "arrivals": cell.arrivals, "trace": cell.trace,
            "load_pct": cell.load_pct, "seed": cell.seed, "trace_source": source, "peak_to_mean": ptm,
            **summary, "cell_wall_s": time.perf_counter() - t0,
            "per_task": json.dumps(res.per_task), "gpu_busy_share": json.dumps(share)}
