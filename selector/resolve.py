"""From facts to a resolved problem: catalog + task + cluster + profile -> :class:`Problem`.

How the numbers are defined (docs/resolve.md has the rationale):

* ``deployments.mem_gb`` of ``(model, tp, pp)``: weights + a KV-cache reserve of
  ``kv_reserve_tokens`` tokens + the peak activation of the engine (``settings.engine``, the one
  ``profiler.engine.EngineConfig``: its token budget and sequence limit) + the runtime overhead
  of each GPU, all GPUs together; so an instance simulated with the same engine configuration
  (``profiler.engine.kv_capacity_tokens`` of that allocation) holds exactly the reserve. A deployment whose per-GPU shard
  exceeds the GPU's memory, or that the model cannot be sharded into, gets no row.
* ``perf.latency_s``: one call of the stage (its prompt and output sizes from the task's
  trace and the stage's role) at batch 1: ``ttft + (output - 1) * tpot``.
* ``perf.capacity_rps``: ``max b / latency(b)`` over batch sizes ``b`` in 1, 2, 4, ... whose KV
  cache ``b * (prompt + output)`` fits the reserve, ``b <= engine.max_num_seqs``, and whose latency stays within
  ``(1 + latency_slack)`` of the batch-1 latency.
* ``task.latency_slo_s`` is either given, or ``latency_slo_factor`` x the task's standalone
  latency: its first workflow on ``reference_model`` at tp1/pp1, batch 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from profiler.engine import DEFAULT, EngineConfig, reserved_mem_gb
from selector.errors import ProblemError
from selector.problem import SHARING_MODES, Cluster, Gpu, Instance, Problem, parse_problem
from selector.taskspec import TaskSpec, cluster_path, load_task, stage_tokens


@dataclass(frozen=True)
class ResolveSettings:
    latency_slack: float = 0.25
    kv_reserve_tokens: int = 16384
    engine: EngineConfig = DEFAULT
    reference_model: str = "llama-3.1-8b"


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


def load_cluster_file(path: Path | str = "a6000x8", *,
                      sharing: str | None = None) -> tuple[Cluster, str]:
    """A cluster file, by name (``configs/clusters/<name>.yaml``) or path, as the problem's
    ``Cluster`` plus its (single) GPU type.

    The file may carry ``sharing: memory | compute`` (spec section 9; default ``memory``); a
    ``sharing`` argument overrides it. A bad value is a ProblemError naming ``cluster.sharing``
    (or ``--sharing``)."""
    from selector.yamlio import load_mapping
    path = cluster_path(path)
    return cluster_from_spec(load_mapping(path), where=str(path), sharing=sharing)


def cluster_from_spec(raw: dict, *, where: str = "cluster", sharing: str | None = None) -> tuple[Cluster, str]:
    """A cluster in the cluster-file layout (``nodes: [{gpus: [{id, gpu, mem_gb}]}]``, optional
    ``instances`` and ``sharing``) as the problem's ``Cluster`` plus its GPU type. Errors name
    ``where`` and the field: a CatalogError for the layout, a ProblemError for sharing, mixed GPU
    types, or a GPU memory larger than the catalog's GPU of that type holds (a unit mistake)."""
    from pydantic import ValidationError

    from profiler.catalog import CatalogError, ClusterSpec, load_gpus
    raw = dict(raw)
    if "gpus" in raw and "nodes" not in raw:
        raise ProblemError(where, "this is a resolved problem's cluster (`gpus:`); a cluster file lists "
                                  "`nodes: [{name, gpus: [{id, gpu, mem_gb}]}]` (docs/your-own-task.md)")
    mode = raw.pop("sharing", "memory")
    _check_sharing(mode, "cluster.sharing")
    if sharing is not None:
        _check_sharing(sharing, "--sharing")
        mode = sharing
    try:
        spec = ClusterSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise CatalogError(f"{where}: cluster: field '{'.'.join(map(str, err['loc'])) or '(entry)'}': "
                           f"{err['msg']}") from None
    gpus = [g for node in spec.nodes for g in node.gpus]
    types = {g.gpu for g in gpus}
    if len(types) != 1:
        raise ProblemError("cluster.gpus", f"resolve needs one GPU type per cluster, got {sorted(types)}")
    catalog = load_gpus()
    for ni, node in enumerate(spec.nodes):
        for gi, g in enumerate(node.gpus):
            known = catalog.get(g.gpu)
            if known is not None and g.mem_gb > known.capacity_gb * 1.05:
                raise ProblemError(f"{where}: nodes[{ni}].gpus[{gi}].mem_gb",
                                   f"{g.mem_gb:g} GB is more than the catalog's {g.gpu} holds ({known.mem_gb:g} GB, "
                                   "configs/gpus.yaml); memory is in GB (1e9 bytes), not MB or MiB")
    from selector.problem import first_error
    try:
        cluster = Cluster(gpus=tuple(Gpu(id=g.id, mem_gb=g.mem_gb, used_gb=0.0) for g in gpus),
                          instances=tuple(Instance.model_validate(i if isinstance(i, dict) else i.model_dump())
                                          for i in getattr(spec, "instances", ()) or ()),
                          sharing=mode)
    except ValidationError as exc:
        err = first_error(exc)
        raise ProblemError(f"{where}: instances.{err.field}", str(err).split(": ", 1)[-1]) from None
    return cluster, types.pop()


def _check_sharing(mode, field: str) -> None:
    if not isinstance(mode, str) or mode not in SHARING_MODES:
        raise ProblemError(field, f"must be one of {', '.join(SHARING_MODES)} (got {mode!r})")


def _capacity(perf: PerfSource, m, g, tp, pp, prompt, output, lat1, s: ResolveSettings) -> float:
    best, b = 1.0 / lat1, 2
    while b <= s.engine.max_num_seqs and b * (prompt + output) <= s.kv_reserve_tokens:
        lat = perf.latency_s(m, g, tp, pp, b, prompt, output)
        if lat > (1.0 + s.latency_slack) * lat1:
            break
        best = max(best, b / lat)
        b *= 2
    return best


def resolve_task(task: TaskSpec | str, *, catalog: Catalog | None = None, cluster: Cluster | None = None,
                 gpu: str | None = None, perf: PerfSource | None = None,
                 settings: ResolveSettings = ResolveSettings()) -> Problem:
    """The resolved problem of ``task`` on ``cluster`` (default: configs/clusters/a6000x8.yaml)."""
    from selector.sanity import check_task_accuracy
    task = load_task(task) if isinstance(task, (str, Path)) else task
    catalog = catalog or load_catalog()
    check_task_accuracy(task.name, task.accuracy_slo, catalog.accuracy)
    if cluster is None:
        cluster, gpu = load_cluster_file()
    if gpu not in catalog.gpus:
        raise ProblemError("gpu", f"unknown GPU type '{gpu}'; known: {', '.join(catalog.gpus)}")
    g = catalog.gpus[gpu]
    perf = perf or AnalyticPerf()
    deployments, fits = [], set()
    for name, m in catalog.models.items():
        for tp, pp in catalog.configs:
            mem = perf.mem_gb(m, g, tp, pp, settings)
            if mem is not None and mem / (tp * pp) <= g.mem_gb:
                deployments.append({"model": name, "tp": tp, "pp": pp, "mem_gb": mem})
                fits.add((name, tp, pp))
    extra = {(i.model, i.tp, i.pp) for i in cluster.instances}
    rows = []
    for wf in task.workflows:
        for st, (prompt, output) in zip(wf.stages, stage_tokens(task, wf)):
            for name, tp, pp in sorted(fits | extra, key=lambda k: (list(catalog.models).index(k[0]), k[1:])):
                m = catalog.models[name]
                lat1 = perf.latency_s(m, g, tp, pp, 1, prompt, output)
                cap = _capacity(perf, m, g, tp, pp, prompt, output, lat1, settings)
                rows.append({"workflow": wf.name, "stage": st.name, "model": name, "tp": tp, "pp": pp,
                             "latency_s": lat1, "capacity_rps": cap})
    slo = task.latency_slo_s or task.latency_slo_factor * _standalone(task, catalog, g, perf, settings)
    return parse_problem({
        "task": {"name": task.name, "accuracy_slo": task.accuracy_slo, "latency_slo_s": slo,
                 "arrival_rate_rps": task.arrival_rate_rps},
        "models": [{"name": n, "accuracy": catalog.accuracy[n], "active_params_b": m.active_params_b}
                   for n, m in catalog.models.items()],
        "configs": [{"tp": tp, "pp": pp} for tp, pp in catalog.configs],
        "workflows": [{"name": w.name, "stages": [{"name": s.name, "calls": s.calls} for s in w.stages]}
                      for w in task.workflows],
        "deployments": deployments, "perf": rows, "cluster": cluster.model_dump(mode="json")})


def _standalone(task: TaskSpec, catalog: Catalog, g, perf: PerfSource, s: ResolveSettings) -> float:
    if s.reference_model not in catalog.models:
        raise ProblemError("reference_model", f"'{s.reference_model}' is not in the catalog")
    m = catalog.models[s.reference_model]
    wf = task.workflows[0]
    return sum(st.calls * perf.latency_s(m, g, 1, 1, 1, p, o) for st, (p, o) in zip(wf.stages, stage_tokens(task, wf)))
