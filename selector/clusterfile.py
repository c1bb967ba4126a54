"""A cluster file (``configs/clusters/*.yaml``: nodes, GPUs, deployed instances) as the problem's
:class:`~selector.problem.Cluster`.

A deployed instance reserves memory on its GPUs as a new one would (spec section 8): its
footprint ``mem_gb`` is split evenly over its ``tp*pp`` GPUs and added to their ``used_gb``. The
footprint is the instance's own ``mem_gb`` when the file gives one, else the deployment rule
of :mod:`selector.resolve` (weights + KV reserve + peak activation + runtime overhead, from the
catalog and the engine configuration). An instance that does not fit its GPUs, an unknown model,
or a model that cannot be sharded so without a ``mem_gb`` is a ProblemError naming the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from selector.errors import ProblemError
from selector.problem import DEFAULT_GPU_TYPE, SHARING_MODES, TOL, Cluster, Gpu, Instance, check_instance_gpus
from selector.resolve import ResolveSettings
from selector.taskspec import cluster_path


def load_cluster_file(path: Path | str = "a6000x8", *, sharing: str | None = None,
                      settings: ResolveSettings = ResolveSettings()) -> tuple[Cluster, str | None]:
    """A cluster file, by name (``configs/clusters/<name>.yaml``) or path, as the problem's
    ``Cluster`` plus its GPU type (None for a mixed cluster), see :func:`cluster_from_spec`.

    The file may carry ``sharing: memory | compute`` (spec section 9; default ``memory``); a
    ``sharing`` argument overrides it. A bad value is a ProblemError naming ``cluster.sharing``
    (or ``--sharing``). ``settings``: the engine configuration and KV reserve that size the
    deployed instances' footprints (those resolve uses for new ones)."""
    from selector.yamlio import load_mapping
    path = cluster_path(path)
    return cluster_from_spec(load_mapping(path), where=str(path), sharing=sharing, settings=settings)


def cluster_from_spec(raw: dict, *, where: str = "cluster", sharing: str | None = None,
                      settings: ResolveSettings = ResolveSettings()) -> tuple[Cluster, str | None]:
    """A cluster in the cluster-file layout (``nodes: [{gpus: [{id, gpu, mem_gb}]}]``, optional
    ``instances``, ``sharing``, ``pricing`` and ``prices``) as the problem's ``Cluster`` plus its
    GPU type (None when the cluster mixes types). On a mixed cluster every GPU carries its type
    (spec section 10: ``nodes[*].gpus[*].gpu``); a cluster of one type stays the untyped cluster
    of sections 1-9 (so every problem resolved on it is exactly as before section 10), its
    catalog type the second value and its price under the default type ``"gpu"``. Prices:
    :func:`cluster_prices`. Errors name
    ``where`` and the field: a CatalogError for the layout, a ProblemError for sharing, a GPU
    memory larger than the catalog's GPU of that type holds (a unit mistake), and a deployed
    instance that is malformed, of an unknown model, on GPUs of several types, or does not fit."""
    from profiler.catalog import load_gpus
    raw = dict(raw)
    if "gpus" in raw and "nodes" not in raw:
        raise ProblemError(where, "this is a resolved problem's cluster (`gpus:`); a cluster file lists "
                                  "`nodes: [{name, gpus: [{id, gpu, mem_gb}]}]` (docs/your-own-task.md)")
    mode = raw.pop("sharing", "memory")
    _check_sharing(mode, "cluster.sharing")
    if sharing is not None:
        _check_sharing(sharing, "--sharing")
        mode = sharing
    spec = _spec(raw, where)
    gpus = [g for node in spec.nodes for g in node.gpus]
    types = list(dict.fromkeys(g.gpu for g in gpus))
    catalog = load_gpus()
    _check_capacities(spec, catalog, where)
    instances = [_instance(raw_i, i, where) for i, raw_i in enumerate(spec.instances)]
    free = {g.id: Gpu(id=g.id, mem_gb=g.mem_gb, used_gb=0.0, type=g.gpu) for g in gpus}
    used = _reserved(instances, free, catalog, settings, where)
    prices = cluster_prices(types, spec.pricing, spec.prices)
    if len(types) == 1:      # one type: the problem of sections 1-9, its price under the default type
        free = {i: g.model_copy(update={"type": DEFAULT_GPU_TYPE}) for i, g in free.items()}
        prices = None if prices is None else {DEFAULT_GPU_TYPE: prices[types[0]]}
    priced = {} if prices is None else {"prices": prices}     # no prices: the key is absent (null is bad input)
    cluster = Cluster(gpus=tuple(g.model_copy(update={"used_gb": used.get(g.id, 0.0)}) for g in free.values()),
                      instances=tuple(inst for inst, _ in instances), sharing=mode, **priced)
    return cluster, (types[0] if len(types) == 1 else None)


def cluster_prices(types: list[str], pricing: str = "on_demand",
                   override: dict[str, float] | None = None) -> dict[str, float] | None:
    """US dollars per GPU-hour of each GPU type (spec section 10's ``cluster.prices``): the
    cluster file's own ``prices`` first, else configs/prices.yaml's ``pricing`` column. None when
    some type has neither (a problem then carries no prices, and ``usd_per_hour`` is refused)."""
    from profiler.catalog import load_prices
    listed = load_prices()
    out: dict[str, float] = {}
    for t in types:
        usd = (override or {}).get(t)
        if usd is None and t in listed:
            usd = listed[t].usd_per_hour(pricing)
        if usd is None:
            return None
        out[t] = usd
    return out


def _check_sharing(mode: Any, field: str) -> None:
    if not isinstance(mode, str) or mode not in SHARING_MODES:
        raise ProblemError(field, f"must be one of {', '.join(SHARING_MODES)} (got {mode!r})")


def _spec(raw: dict, where: str):
    from pydantic import ValidationError

    from flowmaker.inputs import error_message, main_error
    from profiler.catalog import CatalogError, ClusterSpec
    try:
        return ClusterSpec.model_validate(raw)
    except ValidationError as exc:
        err = main_error(exc)
        raise CatalogError(f"{where}: cluster: field '{'.'.join(map(str, err['loc'])) or '(entry)'}': "
                           f"{error_message(err, ClusterSpec)}") from None


def _check_capacities(spec, catalog: dict, where: str) -> None:
    for ni, node in enumerate(spec.nodes):
        for gi, g in enumerate(node.gpus):
            known = catalog.get(g.gpu)
            if known is not None and g.mem_gb > known.capacity_gb * 1.05:
                raise ProblemError(f"{where}: nodes[{ni}].gpus[{gi}].mem_gb",
                                   f"{g.mem_gb:g} GB is more than the catalog's {g.gpu} holds ({known.mem_gb:g} GB, "
                                   "configs/gpus.yaml); memory is in GB (1e9 bytes), not MB or MiB")


def _instance(raw: Any, i: int, where: str) -> tuple[Instance, float | None]:
    """One deployed instance and its explicit footprint (``mem_gb``, None when not given)."""
    from pydantic import TypeAdapter, ValidationError

    from selector.problem import PosNum, first_error
    field = f"{where}: instances[{i}]"
    if not isinstance(raw, dict):
        raise ProblemError(field, "must be a mapping {id, model, tp, pp, gpus, utilization[, mem_gb]}")
    raw = dict(raw)
    mem = raw.pop("mem_gb", None)
    if mem is not None:
        try:
            mem = TypeAdapter(PosNum).validate_python(mem)
        except ValidationError as exc:
            raise ProblemError(f"{field}.mem_gb", str(first_error(exc)).split(": ", 1)[-1]) from None
    try:
        return Instance.model_validate(raw), mem
    except ValidationError as exc:
        err = first_error(exc, Instance)
        raise ProblemError(f"{field}.{err.field}", str(err).split(": ", 1)[-1]) from None


def _reserved(instances: list[tuple[Instance, float | None]], gpus: dict, catalog: dict,
              settings: ResolveSettings, where: str) -> dict[int, float]:
    """GB reserved per GPU id (``gpus``: the cluster's GPUs by id) by the deployed instances
    (section 8's rule: ``mem_gb / (tp*pp)`` on each GPU of the instance); an instance that does
    not fit is a ProblemError."""
    from profiler.catalog import load_models
    models = load_models()
    used: dict[int, float] = {}
    seen: set[str] = set()
    for i, (inst, mem) in enumerate(instances):
        field = f"{where}: instances[{i}]"
        if inst.id in seen:
            raise ProblemError(f"{field}.id", f"duplicate instance id {inst.id!r}")
        seen.add(inst.id)
        if inst.model not in models:
            raise ProblemError(f"{field}.model", f"unknown model {inst.model!r}; known: {', '.join(models)}")
        check_instance_gpus(inst, gpus, field)
        if mem is None:
            mem = _footprint(inst, models[inst.model], catalog.get(gpus[inst.gpus[0]].type), settings, field)
        shard = mem / (inst.tp * inst.pp)
        for g in inst.gpus:
            used[g] = used.get(g, 0.0) + shard
            if used[g] > gpus[g].mem_gb + TOL:
                raise ProblemError(f"{field}", f"{inst.model} tp{inst.tp}pp{inst.pp} ({mem:.2f} GB, "
                                   f"{shard:.2f} GB per GPU) does not fit GPU {g}: {used[g]:.2f} GB "
                                   f"of {gpus[g].mem_gb:g} GB with the instances listed before it")
    return used


def _footprint(inst: Instance, model, gpu, settings: ResolveSettings, field: str) -> float:
    """The deployment rule of resolve for ``inst`` (its model, config and GPU type)."""
    from selector.resolve import AnalyticPerf
    if gpu is None:
        raise ProblemError(f"{field}.mem_gb", "its GPU type is not in the catalog (configs/gpus.yaml); "
                                              "give the instance's mem_gb")
    mem = AnalyticPerf().mem_gb(model, gpu, inst.tp, inst.pp, settings)
    if mem is None:
        raise ProblemError(f"{field}.tp", f"{inst.model} cannot be sharded as tp{inst.tp}pp{inst.pp} "
                                          "(heads, FFN or layers); give the instance's mem_gb")
    return mem
