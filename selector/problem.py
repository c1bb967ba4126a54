"""The resolved selection problem of ``shared/spec/selection.md`` section 1, as typed data.

``load_problem`` / ``parse_problem`` turn YAML, JSON or a dict into a frozen
:class:`Problem`, rejecting every kind of bad input the spec lists with a
:class:`~selector.errors.ProblemError` that names the field. Nothing is guessed: only
``calls``, ``cluster.instances``, ``cluster.sharing`` (section 9; ``memory``) and section 10's
keys (GPU ``type`` and ``gpu_type``: ``"gpu"``; ``cluster.prices``: none; ``objective``:
``gb_s``) have defaults. Section 10's keys are left out of :meth:`Problem.to_dict` while they
hold their defaults, so an untyped problem dumps exactly as before section 10.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, SerializationInfo,
                      SerializerFunctionWrapHandler, ValidationError, model_serializer)

from selector.errors import ProblemError
from selector.yamlio import load_mapping

#: the spec's absolute tolerance (section 4); every check in selector/ and solvers/ uses this one
TOL = 1e-9


#: magnitudes a number may have (issue 28): beyond them a quotient or product in the model
#: (load / capacity, replicas x GB) overflows; no real rate, latency, size or count comes near
MAX_NUMBER, MIN_NONZERO, MAX_WHOLE = 1e15, 1e-15, 2**31 - 1


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("must be a number")
    if isinstance(v, int) and abs(v) > MAX_NUMBER:
        raise ValueError(f"must be at most {MAX_NUMBER:g} in size")
    if not math.isfinite(v):
        raise ValueError("must be finite")
    if abs(v) > MAX_NUMBER or _tiny(float(v)):
        raise ValueError(f"must be 0 or between {MIN_NONZERO:g} and {MAX_NUMBER:g} in size")
    return float(v)


def _tiny(v: float) -> bool:
    """Nonzero and below MIN_NONZERO. A subnormal is recognised from its bits: a library that
    sets the CPU's denormals-are-zero mode (some numeric extensions do, process-wide) makes every
    comparison read it as 0."""
    bits = struct.unpack("<Q", struct.pack("<d", v))[0] & ~(1 << 63)
    return bits != 0 and (bits >> 52 == 0 or abs(v) < MIN_NONZERO)


def _whole(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("must be a whole number")
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        raise ValueError("must be a whole number")
    if abs(v) > MAX_WHOLE:
        raise ValueError(f"must be at most {MAX_WHOLE} in size")
    return int(v)


def _name(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise ValueError("must be a string")
    s = str(v)
    if not s:
        raise ValueError("must not be empty")
    return s


def _type_name(v: Any) -> str:
    """Section 10's GPU type names: strings only (a YAML number must be quoted), not empty."""
    if not isinstance(v, str):
        raise ValueError("must be a string (quote GPU type names that YAML reads as numbers)")
    if not v:
        raise ValueError("must not be empty")
    return v


def _prices(v: Any) -> Any:
    if not isinstance(v, dict):
        raise ValueError("must be a mapping from GPU type to US dollars per GPU-hour")
    return v


Num = Annotated[float, BeforeValidator(_number)]
Whole = Annotated[int, BeforeValidator(_whole)]
Name = Annotated[str, BeforeValidator(_name)]
PosNum = Annotated[Num, Field(gt=0)]
NonNegNum = Annotated[Num, Field(ge=0)]
PosWhole = Annotated[Whole, Field(ge=1)]
GpuType = Annotated[str, BeforeValidator(_type_name)]

#: spec section 10: the GPU type of every GPU, config and row that does not name one
DEFAULT_GPU_TYPE = "gpu"
#: spec section 10: what a plan minimises (``gb_s``: section 5's cost; ``usd_per_hour``: ``U``)
OBJECTIVES = ("gb_s", "usd_per_hour")
#: opt-in keys (section 10's, the fair-share work rule's) with their defaults, left out of a dump while they hold them
_OPT_IN_DEFAULTS = {"type": DEFAULT_GPU_TYPE, "gpu_type": DEFAULT_GPU_TYPE, "prices": None,
                    "objective": "gb_s", "work_erlangs": 0.0, "work_cap_erlangs": None}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        out = handler(self)
        for key, default in _OPT_IN_DEFAULTS.items():
            if key in out and out[key] == default and key in type(self).model_fields:
                del out[key]
        return out


class Task(_Frozen):
    name: Name
    accuracy_slo: NonNegNum
    latency_slo_s: PosNum
    arrival_rate_rps: PosNum


class Model(_Frozen):
    name: Name
    accuracy: NonNegNum
    active_params_b: PosNum


class Config(_Frozen):
    tp: PosWhole
    pp: PosWhole
    gpu_type: GpuType = DEFAULT_GPU_TYPE

    @property
    def key(self) -> tuple[int, int, str]:
        """Section 10's config triple ``(tp, pp, gpu_type)``."""
        return (self.tp, self.pp, self.gpu_type)


class Stage(_Frozen):
    name: Name
    calls: PosWhole = 1


class Workflow(_Frozen):
    name: Name
    stages: Annotated[tuple[Stage, ...], Field(min_length=1)]


class Deployment(_Frozen):
    model: Name
    tp: PosWhole
    pp: PosWhole
    mem_gb: PosNum
    gpu_type: GpuType = DEFAULT_GPU_TYPE


class Perf(_Frozen):
    workflow: Name
    stage: Name
    model: Name
    tp: PosWhole
    pp: PosWhole
    latency_s: PosNum
    capacity_rps: PosNum
    gpu_type: GpuType = DEFAULT_GPU_TYPE


class Gpu(_Frozen):
    id: Whole
    mem_gb: PosNum
    used_gb: NonNegNum
    type: GpuType = DEFAULT_GPU_TYPE


class Instance(_Frozen):
    id: Name
    model: Name
    tp: PosWhole
    pp: PosWhole
    gpus: tuple[Whole, ...]
    utilization: Annotated[Num, Field(ge=0, le=1)]
    #: ``sharing: fair-share``'s work rule (docs/selection.md "Fair-share placement"): the call time
    #: routed to it per second (sum of load x latency_s over the stages it serves), and the most it
    #: carries keeping its tightest stage (min of latency_s x capacity_rps over them; None: unknown)
    work_erlangs: NonNegNum = 0.0
    work_cap_erlangs: PosNum | None = None


#: spec section 9: how placement shares a GPU (``memory``: sections 1-8 exactly; ``compute``: a
#: GPU also takes a shard only while its summed utilisation stays within 1; ``fair-share``:
#: ``compute`` and every instance's utilisation within its processor share, ``1 / tenants`` of
#: each of its GPUs: docs/selection.md "Fair-share placement", an extension beyond the spec)
SHARING_MODES = ("memory", "compute", "fair-share")


class Cluster(_Frozen):
    gpus: tuple[Gpu, ...]
    instances: tuple[Instance, ...] = ()
    sharing: Literal["memory", "compute", "fair-share"] = "memory"
    #: section 10: US dollars per GPU-hour by GPU type (None: not given)
    prices: Annotated[dict[GpuType, PosNum] | None, BeforeValidator(_prices)] = None

    @property
    def compute(self) -> bool:
        """True under ``sharing: compute`` (spec section 9) and ``fair-share``, which adds to it."""
        return self.sharing in ("compute", "fair-share")

    @property
    def fair_share(self) -> bool:
        """True under ``sharing: fair-share`` (:data:`SHARING_MODES`)."""
        return self.sharing == "fair-share"

    def __hash__(self) -> int:      # ``prices`` is a dict: hash its items, so a typed cluster hashes too
        return hash((self.gpus, self.instances, self.sharing, tuple(sorted((self.prices or {}).items()))))

    def gpu_type(self, gpu_id: int) -> str:
        """The type of GPU ``gpu_id`` (section 10)."""
        return next(g.type for g in self.gpus if g.id == gpu_id)

    def instance_type(self, inst: Instance) -> str:
        """Section 10: an instance's type is its GPUs' type (validation rejects mixed ones)."""
        return self.gpu_type(inst.gpus[0])

    def price(self, gpu_type: str) -> float:
        """US dollars per GPU-hour of ``gpu_type``; KeyError without ``prices`` or its type."""
        if self.prices is None:
            raise KeyError(f"no cluster.prices (GPU type {gpu_type!r})")
        return self.prices[gpu_type]


class Problem(_Frozen):
    """One task's selection problem; numbers only, units in field names."""

    task: Task
    models: tuple[Model, ...]
    configs: tuple[Config, ...]
    workflows: tuple[Workflow, ...]
    deployments: tuple[Deployment, ...]
    perf: tuple[Perf, ...]
    cluster: Cluster
    objective: Literal["gb_s", "usd_per_hour"] = "gb_s"

    def to_dict(self) -> dict:
        """The problem as JSON data; section 10's keys only where they differ from their defaults."""
        return self.model_dump(mode="json")


def objective_value(objective: str, cost_gb_s: float, usd_per_hour: float | None) -> float:
    """What a variant (or a plan, or a task of a joint choice) is worth under ``objective``
    (spec sections 5 and 10): ``cost = M*L`` under ``gb_s``, ``U`` under ``usd_per_hour``."""
    if objective == "gb_s":
        return cost_gb_s
    if objective == "usd_per_hour":
        if usd_per_hour is None:
            raise ValueError("objective usd_per_hour needs usd_per_hour (cluster.prices)")
        return usd_per_hour
    raise ValueError(f"unknown objective {objective!r}")


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if part == "[key]":         # pydantic's marker after a mapping key that failed
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def first_error(exc: ValidationError, model: Any = None) -> ProblemError:
    """The first error of ``exc`` naming its field; ``model``: the class validated (an unknown key
    then names the closest known field: flowmaker.inputs.error_message)."""
    from flowmaker.inputs import error_message, main_error
    err = main_error(exc)
    field = _loc(tuple(err["loc"]))
    kind = err["type"]
    if kind == "missing":
        return ProblemError(field, "missing required field")
    if kind == "extra_forbidden":
        return ProblemError(field, error_message(err, model))
    msg = err["msg"].removeprefix("Value error, ")
    return ProblemError(field, f"{msg} (got {err.get('input')!r})")


def parse_problem(data: dict[str, Any]) -> Problem:
    """Validate a mapping into a :class:`Problem`; raises ProblemError naming the field."""
    if not isinstance(data, dict):
        raise ProblemError("", "a problem must be a mapping")
    try:
        problem = Problem.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc, Problem) from None
    check_references(problem)
    return problem


def load_problem(path: str | Path) -> Problem:
    """Read and validate a resolved problem from YAML or JSON."""
    return parse_problem(load_mapping(path))


def _unique(items, key, field: str, what: str) -> None:
    seen: dict = {}
    for i, item in enumerate(items):
        k = key(item)
        if k in seen:
            raise ProblemError(f"{field}[{i}]", f"duplicate {what} {k!r} (also {field}[{seen[k]}])")
        seen[k] = i


def check_references(p: Problem) -> None:
    """Cross-field checks: unique keys and ids, rows naming known entities, cluster sanity."""
    _unique(p.models, lambda m: m.name, "models", "model")
    _unique(p.configs, lambda c: c.key, "configs", "config (tp, pp, gpu_type)")
    _unique(p.workflows, lambda w: w.name, "workflows", "workflow")
    for wi, w in enumerate(p.workflows):
        _unique(w.stages, lambda s: s.name, f"workflows[{wi}].stages", "stage")
    _unique(p.deployments, lambda d: (d.model, d.tp, d.pp, d.gpu_type), "deployments",
            "deployment (model, tp, pp, gpu_type)")
    _unique(p.perf, lambda r: (r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type), "perf",
            "perf row (workflow, stage, model, tp, pp, gpu_type)")
    _unique(p.cluster.gpus, lambda g: g.id, "cluster.gpus", "GPU id")
    _unique(p.cluster.instances, lambda i: i.id, "cluster.instances", "instance id")
    models = {m.name for m in p.models}
    stages = {w.name: {s.name for s in w.stages} for w in p.workflows}
    for i, d in enumerate(p.deployments):
        if d.model not in models:
            raise ProblemError(f"deployments[{i}].model", f"unknown model {d.model!r}")
    for i, r in enumerate(p.perf):
        if r.workflow not in stages:
            raise ProblemError(f"perf[{i}].workflow", f"unknown workflow {r.workflow!r}")
        if r.stage not in stages[r.workflow]:
            raise ProblemError(f"perf[{i}].stage", f"unknown stage {r.stage!r} of workflow {r.workflow!r}")
        if r.model not in models:
            raise ProblemError(f"perf[{i}].model", f"unknown model {r.model!r}")
    _check_cluster(p, models)


def _check_cluster(p: Problem, models: set[str]) -> None:
    gpus = {g.id: g for g in p.cluster.gpus}
    for i, g in enumerate(p.cluster.gpus):
        if g.used_gb > g.mem_gb + TOL:
            raise ProblemError(f"cluster.gpus[{i}].used_gb", f"{g.used_gb} exceeds mem_gb {g.mem_gb}")
    for i, inst in enumerate(p.cluster.instances):
        f = f"cluster.instances[{i}]"
        if inst.model not in models:
            raise ProblemError(f"{f}.model", f"unknown model {inst.model!r}")
        check_instance_gpus(inst, gpus, f)
    _check_prices(p)


def check_instance_gpus(inst: Instance, gpus: dict[int, Gpu], field: str) -> None:
    """Sections 1 and 10: an instance lists tp*pp distinct GPUs of the cluster, all of one type;
    a ProblemError naming ``<field>.gpus`` otherwise."""
    if len(inst.gpus) != inst.tp * inst.pp:
        raise ProblemError(f"{field}.gpus", f"lists {len(inst.gpus)} GPUs but tp*pp = {inst.tp * inst.pp}")
    if len(set(inst.gpus)) != len(inst.gpus):
        raise ProblemError(f"{field}.gpus", "lists a GPU twice")
    for g in inst.gpus:
        if g not in gpus:
            raise ProblemError(f"{field}.gpus", f"GPU {g} is not in cluster.gpus")
    types = sorted({gpus[g].type for g in inst.gpus})
    if len(types) > 1:
        raise ProblemError(f"{field}.gpus", f"GPUs of different types {types} (an instance's GPUs must "
                           "share one type)")


def _check_prices(p: Problem) -> None:
    """Section 10: given prices price every type a GPU or a config has; ``usd_per_hour`` needs them."""
    prices = p.cluster.prices
    if prices is None:
        if p.objective == "usd_per_hour":
            raise ProblemError("cluster.prices", "missing: objective usd_per_hour needs a price per GPU type")
        return
    needed = [(f"cluster.gpus[{i}].type", g.type) for i, g in enumerate(p.cluster.gpus)]
    needed += [(f"configs[{i}].gpu_type", c.gpu_type) for i, c in enumerate(p.configs)]
    for where, t in needed:
        if t not in prices:
            raise ProblemError("cluster.prices", f"no price for GPU type {t!r} (named by {where})")
