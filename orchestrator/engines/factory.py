"""Engine specs (``configs/engines/*.yaml``) and building engine instances from them or from the
profiler's analytic LLM model."""
from __future__ import annotations

from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from flowmaker.inputs import InputError, load_mapping
from flowmaker.names import name_problem

from orchestrator.engines.base import Engine
from orchestrator.engines.cpu_sharing import SharedCores
from orchestrator.engines.llm_timing import StepTime
from orchestrator.engines.profiles import LinearLLMProfile, LinearProfile, TableProfile
from orchestrator.engines.sim import AYO_ENGINE, DEFAULT_KV_TOKENS, SimLLMEngine, SimEngine
from orchestrator.primitives import Kind
from profiler.catalog import configs_dir
from profiler.engine import EngineConfig

ENGINE_DIR = configs_dir() / "engines"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TableSpec(_Frozen):
    type: Literal["table"]
    batch_sizes: tuple[int, ...]
    tokens: tuple[float, ...]
    latency_ms: tuple[tuple[float, ...], ...]

    def build(self) -> TableProfile:
        return TableProfile(self.batch_sizes, self.tokens, self.latency_ms)


class LinearSpec(_Frozen):
    type: Literal["linear"]
    base_ms: float = Field(ge=0)
    per_item_ms: float = Field(0.0, ge=0)
    per_ktoken_ms: float = Field(0.0, ge=0)

    def build(self) -> LinearProfile:
        return LinearProfile(self.base_ms, self.per_item_ms, self.per_ktoken_ms)


class LinearLLMSpec(_Frozen):
    type: Literal["linear_llm"]
    prefill_base_ms: float = Field(ge=0)
    prefill_per_token_ms: float = Field(ge=0)
    prefill_attn_ms: float = Field(ge=0)
    decode_base_ms: float = Field(ge=0)
    decode_per_seq_ms: float = Field(ge=0)
    decode_per_kctx_ms: float = Field(ge=0)

    def build(self) -> LinearLLMProfile:
        return LinearLLMProfile(**self.model_dump(exclude={"type"}))


class EngineSpec(_Frozen):
    """A non-LLM engine: one profile per primitive kind it serves."""
    name: str
    kind: Literal["embedding", "reranker", "vectordb", "websearch"]
    hardware: str
    provenance: str
    ref_tokens_per_item: float = Field(256.0, ge=0, description="tokens/item used to find the max batch")
    profiles: dict[Kind, Annotated[Union[TableSpec, LinearSpec], Field(discriminator="type")]]


class LLMSpec(_Frozen):
    """An LLM engine with a linear latency model (paper-calibrated or estimated)."""
    name: str
    kind: Literal["llm"]
    model: str
    hardware: str
    provenance: str
    engine: EngineConfig = Field(description="admission, batch limits, KV paging and the KV capacity "
                                 "(profiler.engine.EngineConfig; must set kv_capacity_tokens)")
    profile: LinearLLMSpec

    @model_validator(mode="after")
    def _kv_given(self) -> LLMSpec:
        if self.engine.kv_capacity_tokens is None:
            raise ValueError("engine.kv_capacity_tokens: required for a linear LLM engine")
        return self


class SpecError(InputError, KeyError):
    """An app or engine spec that is unknown, unreadable or invalid: one line (``str(exc)``);
    a KeyError too, for callers that catch unknown names."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def named_yaml(name_or_path: str | Path, directory: Path, what: str) -> Path:
    """``name_or_path`` itself when it ends in ``.yaml``, else ``directory/<name>.yaml`` (a name
    must be one safe file name, ``flowmaker.names``); a SpecError naming the known ones when it
    does not exist."""
    p = Path(name_or_path)
    if p.suffix != ".yaml":
        p = directory / f"{name_or_path}.yaml" if name_problem(str(name_or_path)) is None else None
    if p is None or not p.exists():
        known = ", ".join(sorted(q.stem for q in directory.glob("*.yaml")))
        raise SpecError(what, f"unknown {what} {str(name_or_path)[:200]!r}; known: {known}")
    return p


def load_spec(path: Path, model: type[BaseModel] | None, what: str):
    """Read ``path`` with the bounded reader (``flowmaker.inputs``) and validate it as ``model``
    (or return the mapping when ``model`` is None); every failure a one-line SpecError."""
    try:
        raw = load_mapping(path)
        return raw if model is None else model.model_validate(raw)
    except InputError as exc:
        raise SpecError(exc.path, f"{what}: {exc.message}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "<root>"
        raise SpecError(str(path), f"{what} field '{field}': {err['msg']}") from None


def load_engine_spec(name_or_path: str | Path) -> EngineSpec | LLMSpec:
    path = named_yaml(name_or_path, ENGINE_DIR, "engine spec")
    raw = load_spec(path, None, "engine spec")
    return load_spec(path, LLMSpec if raw.get("kind") == "llm" else EngineSpec, "engine spec")


def per_word(spec: EngineSpec | LLMSpec, tokens_per_word: float) -> EngineSpec | LLMSpec:
    """``spec`` with its profile indexed by the workload's tokens (``ops.n_tokens``: words) where the
    engine's tokenizer makes ``tokens_per_word`` of its own tokens of each: a table's token axis and
    ``ref_tokens_per_item`` divided by it, a per-token cost multiplied by it (an LLM's attention term,
    quadratic in tokens, by its square). Exact for the linear and tabulated profiles: only the unit of
    their token axis changes."""
    if tokens_per_word <= 0:
        raise ValueError(f"tokens_per_word must be positive, got {tokens_per_word}")
    s = float(tokens_per_word)
    if isinstance(spec, LLMSpec):
        p = spec.profile
        return spec.model_copy(update={"profile": p.model_copy(update={
            "prefill_per_token_ms": p.prefill_per_token_ms * s, "prefill_attn_ms": p.prefill_attn_ms * s * s,
            "decode_per_kctx_ms": p.decode_per_kctx_ms * s})})
    profiles = {k: (v.model_copy(update={"tokens": tuple(t / s for t in v.tokens)}) if isinstance(v, TableSpec)
                    else v.model_copy(update={"per_ktoken_ms": v.per_ktoken_ms * s}))
                for k, v in spec.profiles.items()}
    return spec.model_copy(update={"profiles": profiles, "ref_tokens_per_item": spec.ref_tokens_per_item / s})


def build_instances(spec: EngineSpec | LLMSpec, *, n_instances: int = 1,
                    prefix_caching: bool = False) -> list[Engine]:
    """``n_instances`` fresh simulated instances of a spec."""
    if isinstance(spec, LLMSpec):
        cfg = spec.engine.model_copy(update={"prefix_caching": prefix_caching})
        return llm_instances(name=spec.name, step=spec.profile.build(), n_instances=n_instances,
                             kv_capacity_tokens=spec.engine.kv_capacity_tokens, config=cfg)
    profiles = {k: v.build() for k, v in spec.profiles.items()}
    return [SimEngine(name=f"{spec.name}#{i}", kind=spec.kind, profiles=profiles,
                      ref_tokens=spec.ref_tokens_per_item) for i in range(n_instances)]


def llm_instances(*, name: str, step: StepTime, n_instances: int = 1, kv_capacity_tokens: int = DEFAULT_KV_TOKENS,
                  config: EngineConfig = AYO_ENGINE) -> list[Engine]:
    """Simulated LLM instances on the one engine core (``SimLLMEngine``)."""
    return [SimLLMEngine(name=f"{name}#{i}", step=step, kv_capacity_tokens=kv_capacity_tokens, config=config)
            for i in range(n_instances)]


def profiler_llm_instances(model: str, gpu: str, *, tp: int = 1, pp: int = 1, n_instances: int = 1,
                           kv_capacity_tokens: int = DEFAULT_KV_TOKENS, config: EngineConfig = AYO_ENGINE) -> list[Engine]:
    """LLM instances timed by the profiler's step model of ``model`` on ``tp x pp`` ``gpu`` s."""
    from profiler.steps import step_model
    return llm_instances(name=f"{model}@{gpu}x{tp * pp}", step=step_model(model, gpu, tp, pp),
                         n_instances=n_instances, kv_capacity_tokens=kv_capacity_tokens, config=config)


def share_cores(engines: Mapping[str, Sequence[Engine]], cores: int, background: float = 0.0,
                same_process: float = 0.0, decode_same_process: float | None = None) -> SharedCores:
    """Put every simulated instance of ``engines`` (fresh, before any work) on ``cores`` shared CPU
    cores beside ``background`` runnable tasks of other programs, all in one process whose executions
    cost each other ``same_process`` beyond the cores (``decode_same_process`` an LLM iteration that
    only decodes; None: the same) (``cpu_sharing.SharedCores``: processor sharing, re-timed whenever
    an execution starts or ends); returns the cores. An instance that cannot share (a real engine) is
    a ValueError."""
    shared = SharedCores(cores, background, same_process, decode_same_process)
    for name, insts in engines.items():
        for inst in insts:
            share = getattr(inst, "share_cpu", None)
            if share is None:
                raise ValueError(f"engine {name!r}: {type(inst).__name__} cannot share simulated CPU cores")
            share(shared)
    return shared
