"""From facts to a resolved problem: catalog + task + cluster + profile -> :class:`Problem`.

How the numbers are defined (docs/resolve.md has the rationale):

* ``deployments.mem_gb`` of ``(model, tp, pp)``: weights + a KV-cache reserve of
  ``kv_reserve_tokens`` tokens + the peak activation of the engine (``settings.engine``, the one
  ``profiler.engine.EngineConfig``: its token budget and sequence limit) + the runtime overhead
  of each GPU, all GPUs together; so an instance simulated with the same engine configuration
  (``profiler.engine.kv_capacity_tokens`` of that allocation) holds exactly the reserve. A deployment whose per-GPU shard
  exceeds the GPU's memory, or that the model cannot be sharded into, gets no row.
* ``perf.latency_s``: one call of the stage (its prompt and output sizes from the task's
  trace and the stage's role) at batch 1: ``ttft + (output - 1) * tpot`` (the unloaded p99 where
  the size tail misses the budget: below).
* ``perf.capacity_rps``: the highest Poisson rate at which one instance keeps the p99 call latency
  within the call's budget (its share of the task's SLO, :func:`call_budget_s`), by the rule of
  :mod:`selector.capacity` (the trace's size cells, prefill stalls, M/G/b on the KV slots of the
  reserve). Where the size tail already misses the budget for more than 1% of calls unloaded
  (no rate keeps it), the row's ``latency_s`` is that unloaded p99 (so the latency SLO check
  sees the tail: the selector leaves the row) and its capacity the rule's at ``(1 +
  latency_slack)`` x that p99 (a baseline that checks no SLO still sizes its replicas by it).
* ``task.latency_slo_s`` is either given, or ``latency_slo_factor`` x the task's standalone
  latency: its first workflow on ``reference_model`` at tp1/pp1, batch 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from profiler.engine import DEFAULT, EngineConfig, reserved_mem_gb
from selector.capacity import MEAN_CELL, CallMix, capacity_rps, kv_slots
from selector.errors import ProblemError
from selector.problem import DEFAULT_GPU_TYPE, OBJECTIVES, Cluster, Problem, parse_problem
from selector.taskspec import TaskSpec, load_task, load_trace_stats, stage_tokens


@dataclass(frozen=True)
class ResolveSettings:
    latency_slack: float = 0.25
    kv_reserve_tokens: int = 16384
    engine: EngineConfig = DEFAULT
    reference_model: str = "llama-3.1-8b"
    #: the GPU type of the standalone latency behind ``latency_slo_factor`` (None: the type of
    #: the cluster's first GPU), so clusters of different types can share one SLO
    reference_gpu: str | None = None


@dataclass(frozen=True)
class Catalog:
    models: dict            # name -> profiler.catalog.ModelSpec (models with an accuracy score)
    accuracy: dict[str, float]
    gpus: dict              # name -> profiler.catalog.GpuSpec
    configs: list[tuple[int, int]]


class PerfSource(Protocol):
    """Where latency and memory come from: the analytic model or a measured table."""

    def latency_s(self, model, gpu, tp: int, pp: int, batch: int, prompt: int, output: int) -> float: ...

    def mem_gb(self, model, gpu, tp: int, pp: int, s: ResolveSettings) -> float | None: ...


class AnalyticPerf:
    """The profiler's analytic model (``profiler.analytic``); None memory = cannot be sharded so.
    Step models come from the process-wide cached model (``profiler.steps.analytic_model``), the
    one the simulators use."""

    def __init__(self) -> None:
        from profiler.steps import analytic_model
        self.model = analytic_model()

    def latency_s(self, model, gpu, tp, pp, batch, prompt, output) -> float:
        return self.model.predict(model, gpu, tp=tp, pp=pp, batch=batch, prompt_tokens=prompt,
                                  output_tokens=output).latency_s

    def mem_gb(self, model, gpu, tp, pp, s: ResolveSettings) -> float | None:
        try:
            sm = self.model.step_model(model, gpu, tp, pp)
        except ValueError:
            return None
        return reserved_mem_gb(sm, s.engine, kv_tokens=s.kv_reserve_tokens)


class TablePerf(AnalyticPerf):
    """Latency from a profile table (``profiler.table``), memory from the analytic model."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        from profiler.catalog import CatalogError, profile_table_path
        from profiler.table import TableError, read_table
        try:
            self.path = profile_table_path(path)
            self.table = read_table(self.path)
        except (CatalogError, TableError) as exc:
            where = "" if isinstance(exc, CatalogError) else f"{self.path}: "
            raise ProblemError("--profile", f"{where}{exc}") from None

    def latency_s(self, model, gpu, tp, pp, batch, prompt, output) -> float:
        """Seconds of one call; a table without rows for this model, GPU and config is a
        ProblemError naming ``--profile`` (resolve needs every catalog model profiled)."""
        from profiler.table import lookup
        try:
            row = lookup(self.table, model.name, gpu.name, tp, pp, batch, prompt, output)
        except KeyError as exc:
            raise ProblemError("--profile", f"{exc.args[0]} in {self.path}") from None
        return float(row["latency_s"])


def load_catalog(*, models: Path | None = None, accuracy: Path | None = None, gpus: Path | None = None,
                 configs: Path | None = None) -> Catalog:
    """The catalog from ``configs/`` (each file overridable); only models with a score are kept."""
    from profiler.catalog import load_accuracy, load_deploy_configs, load_gpus, load_models
    specs = load_models(models)
    acc = load_accuracy(accuracy)
    return Catalog({n: m for n, m in specs.items() if n in acc}, acc, load_gpus(gpus), load_deploy_configs(configs))


def resolve_task(task: TaskSpec | str, *, catalog: Catalog | None = None, cluster: Cluster | None = None,
                 gpu: str | None = None, perf: PerfSource | None = None,
                 settings: ResolveSettings = ResolveSettings(), objective: str = "gb_s") -> Problem:
    """The resolved problem of ``task`` on ``cluster`` (default: configs/clusters/a6000x8.yaml).

    A cluster whose GPUs carry types (a cluster file) gets configs, deployments and perf rows per
    GPU type it has (spec section 10), in the order the types first appear; an untyped cluster
    (a resolved problem's) is resolved on ``gpu`` and stays untyped. ``objective``: ``gb_s`` or
    ``usd_per_hour`` (needs ``cluster.prices``)."""
    from selector.sanity import check_task_accuracy
    task = load_task(task) if isinstance(task, (str, Path)) else task
    catalog = catalog or load_catalog()
    check_task_accuracy(task.name, task.accuracy_slo, catalog.accuracy)
    if cluster is None:
        from selector.clusterfile import load_cluster_file
        cluster, gpu = load_cluster_file(settings=settings)
    types, typed = _gpu_types(cluster, gpu, catalog)
    _check_objective(objective, cluster, types if typed else [])
    perf = perf or AnalyticPerf()
    _check_instance_models(cluster, catalog)
    ref = settings.reference_gpu or types[0]
    if ref not in catalog.gpus:
        raise ProblemError("reference_gpu", f"unknown GPU type '{ref}'; known: {', '.join(catalog.gpus)}")
    slo = task.latency_slo_s or task.latency_slo_factor * _standalone(task, catalog, catalog.gpus[ref], perf, settings)
    configs, deployments, rows = [], [], []
    for t in types:
        g, tag = catalog.gpus[t], ({"gpu_type": t} if typed else {})
        held = _held_configs(catalog.configs, sum(1 for x in cluster.gpus if not typed or x.type == t))
        configs += [{"tp": tp, "pp": pp, **tag} for tp, pp in held]
        fits = _deployments(catalog, perf, g, settings, tag, deployments, held)
        extra = {(i.model, i.tp, i.pp) for i in cluster.instances if not typed or cluster.instance_type(i) == t}
        rows += _perf_rows(task, catalog, perf, g, fits | extra, settings, tag, slo)
    return parse_problem({
        "task": {"name": task.name, "accuracy_slo": task.accuracy_slo, "latency_slo_s": slo,
                 "arrival_rate_rps": task.arrival_rate_rps},
        "models": [{"name": n, "accuracy": catalog.accuracy[n], "active_params_b": m.active_params_b}
                   for n, m in catalog.models.items()],
        "configs": configs,
        "workflows": [{"name": w.name, "stages": [{"name": s.name, "calls": s.calls} for s in w.stages]}
                      for w in task.workflows],
        "deployments": deployments, "perf": rows, "cluster": cluster.model_dump(mode="json"),
        "objective": objective})


def _gpu_types(cluster: Cluster, gpu: str | None, catalog: Catalog) -> tuple[list[str], bool]:
    """The catalog GPU types to resolve on, and whether the cluster's GPUs carry them."""
    typed = any(g.type != DEFAULT_GPU_TYPE for g in cluster.gpus)
    if not typed:
        if gpu not in catalog.gpus:
            raise ProblemError("gpu", f"unknown GPU type '{gpu}'; known: {', '.join(catalog.gpus)}")
        return [gpu], False
    for i, g in enumerate(cluster.gpus):
        if g.type not in catalog.gpus:
            raise ProblemError(f"cluster.gpus[{i}].type", f"unknown GPU type '{g.type}'; known: "
                                                         f"{', '.join(catalog.gpus)}")
    return list(dict.fromkeys(g.type for g in cluster.gpus)), True


def _check_objective(objective: str, cluster: Cluster, types: list[str]) -> None:
    if objective not in OBJECTIVES:
        raise ProblemError("objective", f"must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
    if objective == "usd_per_hour" and cluster.prices is None:
        raise ProblemError("cluster.prices", f"objective usd_per_hour needs a price for every GPU type "
                           f"({', '.join(types) or 'an untyped cluster has none'}): configs/prices.yaml "
                           "or the cluster file's `prices`")


def _check_instance_models(cluster: Cluster, catalog: Catalog) -> None:
    for i, inst in enumerate(cluster.instances):
        if inst.model not in catalog.models:
            raise ProblemError(f"cluster.instances[{i}].model",
                               f"{inst.model!r} is not a catalog model with an accuracy score; known: "
                               f"{', '.join(catalog.models)}")


def _held_configs(configs, n_gpus: int) -> list[tuple[int, int]]:
    """The catalog's (tp, pp) configs whose ``tp * pp`` GPUs the cluster's ``n_gpus`` of a type can hold."""
    return [(tp, pp) for tp, pp in configs if tp * pp <= n_gpus]


def _deployments(catalog: Catalog, perf: PerfSource, g, settings: ResolveSettings, tag: dict,
                 out: list[dict], configs) -> set[tuple[str, int, int]]:
    """Append the deployment rows of GPU type ``g`` to ``out`` for ``configs`` ((tp, pp) the
    cluster can hold); the (model, tp, pp) that fit."""
    fits = set()
    for name, m in catalog.models.items():
        for tp, pp in configs:
            mem = perf.mem_gb(m, g, tp, pp, settings)
            if mem is not None and mem / (tp * pp) <= g.mem_gb:
                out.append({"model": name, "tp": tp, "pp": pp, "mem_gb": mem, **tag})
                fits.add((name, tp, pp))
    return fits


def _perf_rows(task: TaskSpec, catalog: Catalog, perf: PerfSource, g, keys: set, settings: ResolveSettings,
               tag: dict, slo_s: float) -> list[dict]:
    rows = []
    order = list(catalog.models)
    cells = load_trace_stats()[task.trace].size_cells
    for wf in task.workflows:
        tokens = stage_tokens(task, wf)
        for name, tp, pp in sorted(keys, key=lambda k: (order.index(k[0]), k[1:])):
            m = catalog.models[name]
            lats = [perf.latency_s(m, g, tp, pp, 1, p, o) for p, o in tokens]
            whole = sum(st.calls * lat for st, lat in zip(wf.stages, lats))
            for st, (prompt, output), lat1 in zip(wf.stages, tokens, lats):
                budget = call_budget_s(lat1, whole, slo_s, settings.latency_slack)
                mix = stage_mix(perf, m, g, tp, pp, prompt, output, settings, cells)
                cap = capacity_rps(mix, budget)
                if cap <= 0.0:          # the size tail misses the budget unloaded (module docstring)
                    lat1 = mix.unloaded_s()
                    cap = capacity_rps(mix, (1.0 + settings.latency_slack) * lat1)
                rows.append({"workflow": wf.name, "stage": st.name, "model": name, "tp": tp, "pp": pp,
                             "latency_s": lat1, "capacity_rps": cap, **tag})
    order_rows = {(w.name, s.name): i for i, (w, s) in enumerate((w, s) for w in task.workflows for s in w.stages)}
    return sorted(rows, key=lambda r: order_rows[(r["workflow"], r["stage"])])


def call_budget_s(latency_s: float, workflow_s: float, slo_s: float, latency_slack: float) -> float:
    """The latency one call may reach under load (selector.capacity): its share of the SLO when
    the whole workflow (``workflow_s`` at batch 1) runs on its model and config, at least
    ``(1 + latency_slack)`` x its batch-1 latency."""
    return latency_s * max(1.0 + latency_slack, slo_s / workflow_s)


def stage_mix(perf: PerfSource, m, g, tp: int, pp: int, prompt: int, output: int, s: ResolveSettings,
              cells=MEAN_CELL) -> CallMix:
    """One row's calls for :func:`selector.capacity.capacity_rps`: ``perf``'s latency, the KV
    slots of the reserve and the trace's size ``cells``."""
    slots = kv_slots(prompt, output, kv_tokens=s.kv_reserve_tokens, block_size=s.engine.block_size,
                     max_num_seqs=s.engine.max_num_seqs)
    return CallMix(lambda b, p, o: perf.latency_s(m, g, tp, pp, b, p, o), prompt, output, slots, cells)


def _standalone(task: TaskSpec, catalog: Catalog, g, perf: PerfSource, s: ResolveSettings) -> float:
    if s.reference_model not in catalog.models:
        raise ProblemError("reference_model", f"'{s.reference_model}' is not in the catalog")
    m = catalog.models[s.reference_model]
    wf = task.workflows[0]
    return sum(st.calls * perf.latency_s(m, g, 1, 1, 1, p, o) for st, (p, o) in zip(wf.stages, stage_tokens(task, wf)))
