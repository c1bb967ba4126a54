"""Model, GPU, deployment and cluster catalog: typed, frozen specs loaded from configs/.

Units: GB = 1e9 bytes, TFLOPS = 1e12 FLOP/s, GB/s = 1e9 bytes/s, params in billions.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from flowmaker.inputs import error_message, main_error

SHARED_DATA_ENV = "FLOWMAKER_SHARED_DATA"


class CatalogError(ValueError):
    """A catalog file is missing or invalid; the message names the file and the field."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(_Frozen):
    """Architecture of one transformer LLM (numbers from its config.json)."""

    name: str
    hf_id: str
    family: str
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ffn: int = Field(gt=0, description="MLP intermediate size (per expert for MoE)")
    vocab: int = Field(gt=0)
    experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    total_params_b: float = Field(gt=0)
    active_params_b: float = Field(gt=0)
    tie_embeddings: bool = False
    max_context: int = Field(gt=0)

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if self.experts_per_token > self.experts:
            raise ValueError("experts_per_token > experts")
        if self.active_params_b > self.total_params_b:
            raise ValueError("active_params_b > total_params_b")
        return self

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token, all layers, K and V together (no TP replication)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def weight_bytes(self, dtype_bytes: int = 2) -> float:
        """Bytes of all weights (all experts, embeddings once if tied)."""
        return self.total_params_b * 1e9 * dtype_bytes

    def arch_params(self) -> float:
        """Parameter count implied by the architecture (for consistency checks)."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attn = self.hidden * (q + 2 * kv) + q * self.hidden
        mlp = 3 * self.hidden * self.ffn * self.experts + self.hidden * (self.experts if self.is_moe else 0)
        emb = self.vocab * self.hidden * (1 if self.tie_embeddings else 2)
        return self.layers * (attn + mlp + 2 * self.hidden) + emb + self.hidden


class GpuSpec(_Frozen):
    """One GPU type: capacity, peak dense BF16 compute, DRAM and intra-node link bandwidth."""

    name: str
    product: str = Field("", description="the name nvidia-smi reports, e.g. 'NVIDIA H100 80GB HBM3'")
    description: str = ""
    mem_gb: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    mem_bw_gbps: float = Field(gt=0)
    link: Literal["nvlink", "pcie"]
    link_bw_gbps: float = Field(gt=0, description="per-GPU unidirectional bandwidth")
    link_latency_us: float = Field(ge=0)
    cache_mb: float | None = Field(default=None, gt=0, description="CPU devices: per-core cache "
                                   "(MB, 1e6 bytes); a multi-row GEMM whose weights exceed it pays "
                                   "the calibration's spill_factor. None: not modelled (GPUs)")

    @property
    def product_label(self) -> str:
        """The ``nvidia.com/gpu.product`` node label NVIDIA GPU Feature Discovery gives a node with
        this GPU (the product name, spaces as dashes); empty when the product is not known."""
        return self.product.replace(" ", "-")

    @property
    def capacity_gb(self) -> float:
        """Device memory in GB (1e9 bytes). Vendors quote GPU memory in binary units (an "80 GB"
        A100 has 80 GiB = 85.9 GB), so this is ``mem_gb * 2**30 / 1e9``. Selection keeps the
        nominal ``mem_gb`` (a conservative fit check, as the paper's 48 GB A6000s); the what-if
        simulator sizes the KV cache from this, as a serving engine would."""
        return self.mem_gb * 2**30 / 1e9


class ClusterGpu(_Frozen):
    id: int = Field(ge=0)
    gpu: str
    mem_gb: float = Field(gt=0)


class ClusterNode(_Frozen):
    name: str
    gpus: list[ClusterGpu]


#: the price columns of configs/prices.yaml
PRICE_KINDS = ("on_demand", "spot")


class ClusterSpec(_Frozen):
    """A set of GPUs grouped in nodes; `instances` lists pre-deployed instances (opaque here).
    `pricing` picks the column of configs/prices.yaml, `prices` overrides single GPU types
    (US dollars per GPU-hour)."""

    name: str
    nodes: list[ClusterNode]
    instances: list[dict[str, Any]] = Field(default_factory=list)
    pricing: Literal["on_demand", "spot"] = "on_demand"
    prices: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict)

    @property
    def gpus(self) -> list[ClusterGpu]:
        return [g for n in self.nodes for g in n.gpus]

    def node_of(self, gpu_id: int) -> str:
        """Name of the node holding GPU `gpu_id` (KeyError if absent)."""
        for n in self.nodes:
            if any(g.id == gpu_id for g in n.gpus):
                return n.name
        raise KeyError(f"unknown gpu id {gpu_id}")

    @model_validator(mode="after")
    def _unique_ids(self) -> "ClusterSpec":
        ids = [g.id for g in self.gpus]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate gpu id")
        return self


class Price(_Frozen):
    """One published (or, marked, estimated) price of one GPU type, US dollars per GPU-hour."""

    usd_per_hour: float = Field(gt=0, allow_inf_nan=False)
    kind: Literal["spot", "community"] | None = None
    provider: str = ""
    product: str = ""
    source: str = Field("", description="the public page the price was read from")
    read: str = Field("", description="the date the page was read, YYYY-MM-DD")
    via: str = ""
    estimate: bool = False
    note: str = ""

    @model_validator(mode="after")
    def _sourced(self) -> "Price":
        if self.estimate and not self.note:
            raise ValueError("an estimate needs a note saying how it was derived")
        if not self.estimate and not (self.source and self.read):
            raise ValueError("a published price needs its source and the date it was read")
        return self


class GpuPrices(_Frozen):
    on_demand: Price
    spot: Price | None = None

    def usd_per_hour(self, kind: str) -> float | None:
        """The price of column ``kind`` (``on_demand`` or ``spot``); None when not listed."""
        price = getattr(self, kind)
        return None if price is None else price.usd_per_hour


class DeployConfig(_Frozen):
    tp: Literal[1, 2, 4, 8]
    pp: Literal[1, 2, 4, 8]

    @model_validator(mode="after")
    def _fits_node(self) -> "DeployConfig":
        if self.tp * self.pp > 8:
            raise ValueError("tp*pp must be <= 8")
        return self


def repo_root() -> Path:
    """The repository root (the folder holding configs/ and profiler/)."""
    return Path(__file__).resolve().parent.parent


def shared_root() -> Path:
    """The project's shared folder next to the repository, ``<repo>/../shared`` (the selection
    spec and its examples, third-party data); it may be absent."""
    return repo_root().parent / "shared"


def shared_data_path() -> Path:
    """Where third-party data is looked up (the one lookup of the project):
    ``$FLOWMAKER_SHARED_DATA``; else, in a source checkout (or an editable install),
    ``<repo>/../shared/data``; else (an installed wheel, whose package folder is no repository) the
    first ``shared/data`` in the current folder or a folder above it. It may be absent
    (:func:`shared_data_hint` says what to do)."""
    env = os.environ.get(SHARED_DATA_ENV)
    if env:
        return Path(env)
    if (repo_root() / "pyproject.toml").is_file():
        return shared_root() / "data"
    here = Path.cwd()
    for d in (here, *here.parents):
        if (d / "shared" / "data").is_dir():
            return d / "shared" / "data"
    return here / "shared" / "data"


def shared_data_hint() -> str:
    """What to say when third-party data is not found: where it was looked for and the variable."""
    return f"looked in {shared_data_path()}; set {SHARED_DATA_ENV} to the shared data folder"


def shared_data_dir() -> Path | None:
    """:func:`shared_data_path` when it is a folder, else None."""
    path = shared_data_path()
    return path if path.is_dir() else None


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


@functools.lru_cache(maxsize=1)
def configs_dir() -> Path:
    """The project's configs: the package data ``flowmaker_configs`` found with
    :mod:`importlib.resources` (an installed wheel's copy, or ``configs/`` itself in a source
    checkout or editable install), else ``<repo>/configs`` (a source tree never installed)."""
    try:
        from importlib.resources import files
        root = Path(str(files("flowmaker_configs")))
        if (root / "models.yaml").is_file():
            return root
    except (ImportError, TypeError, ValueError):
        pass
    return repo_root() / "configs"


def known_configs(folder: str) -> list[str]:
    """Names of the configs in ``configs/<folder>/`` (file stems, ``.yaml``)."""
    return sorted(q.stem for q in (configs_dir() / folder).glob("*.yaml"))


def config_path(name_or_path: str | Path, folder: str, what: str, *, exclude: tuple[str, ...] = ()) -> Path:
    """A config given by name (``configs/<folder>/<name>.yaml``) or by path.

    Text with a ``.yaml``/``.yml``/``.json`` suffix or a path separator is a path; a path
    written ``configs/...`` that does not exist here (an installed package, another working
    folder) is looked up in the shipped configs. Anything else is first a name, then a file of
    that name. An unknown name is a CatalogError listing the known ones; ``exclude``: files of
    that folder that are not configs of this kind (data it shares)."""
    s = str(name_or_path)
    p = Path(s)
    if p.suffix in CONFIG_SUFFIXES or "/" in s or os.sep in s:
        if not p.exists() and p.parts[:1] == ("configs",) and len(p.parts) > 1:
            shipped = configs_dir().joinpath(*p.parts[1:])
            if shipped.exists():
                return shipped
        return p
    named = configs_dir() / folder / f"{s}.yaml"
    if named.is_file() and s not in exclude:
        return named
    if p.is_file():
        return p
    known = [n for n in known_configs(folder) if n not in exclude]
    shown = s if len(s) <= 80 else f"{s[:77]}..."       # the list of known names is what helps
    article = "an" if what[:1] in "aeiou" else "a"
    raise CatalogError(f"unknown {what} '{shown}'; known: {', '.join(known) or '(none)'} "
                       f"(or give a path to {article} {what} file)")


def profile_table_path(name_or_path: str | Path) -> Path:
    """A profile table (parquet) by path, or by name: ``results/profiles/<name>.parquet`` under
    the working folder, then under the repository (the committed measured tables). An unknown
    name is a CatalogError listing the known ones."""
    s = str(name_or_path)
    p = Path(s)
    if p.suffix or "/" in s or os.sep in s or p.exists():
        return p
    dirs = [Path("results") / "profiles", repo_root() / "results" / "profiles"]
    for d in dirs:
        if (d / f"{s}.parquet").is_file():
            return d / f"{s}.parquet"
    known = sorted({q.stem for d in dirs if d.is_dir() for q in d.glob("*.parquet")})
    raise CatalogError(f"unknown profile table '{s}'; known: {', '.join(known) or '(none)'} "
                       "(or give a path to a .parquet table)")


def recorded_table_path(name_or_path: str | Path) -> str:
    """A profile table's path as a calibration records it: relative to the repository when inside
    it, so a table given by name and by path is one entry."""
    path = profile_table_path(name_or_path)
    try:
        return str(path.resolve().relative_to(repo_root().resolve()))
    except ValueError:
        return str(path)


def read_yaml_file(path: Path | str) -> Any:
    """A YAML (or ``.json``) file as data, read with size and nesting bounds, duplicate keys refused
    (``flowmaker.inputs``); a CatalogError naming the file (with line and column for a syntax
    error) on any problem."""
    from flowmaker.inputs import InputError, load_data
    try:
        return load_data(path)
    except InputError as exc:
        raise CatalogError(str(exc)) from None


def _read_yaml(path: Path, key: str) -> Any:
    doc = read_yaml_file(path)
    if not isinstance(doc, dict) or key not in doc:
        raise CatalogError(f"{path}: missing top-level field '{key}'")
    return doc[key]


def parse_model(cls: type[BaseModel], raw: Any, path: Path, where: str = "", *, whole: str = "(entry)") -> Any:
    """``cls`` validated from ``raw`` (read from ``path``); a CatalogError names the file, ``where``
    in it and the first offending field (``whole`` when the error is the entry's itself)."""
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        err = main_error(exc)
        field = ".".join(str(p) for p in err["loc"]) or whole
        raise CatalogError(f"{path}: {where + ': ' if where else ''}field '{field}': {error_message(err, cls)}") from None


def _named(cls: type[BaseModel], raw: Any, path: Path, key: str) -> dict[str, Any]:
    if not isinstance(raw, list):
        raise CatalogError(f"{path}: field '{key}' must be a list")
    out: dict[str, Any] = {}
    for i, item in enumerate(raw):
        spec = parse_model(cls, item, path, f"{key}[{i}]")
        if spec.name in out:
            raise CatalogError(f"{path}: {key}[{i}]: field 'name': duplicate '{spec.name}'")
        out[spec.name] = spec
    return out


def load_models(path: Path | None = None) -> dict[str, ModelSpec]:
    """Models by short name from `path` (default configs/models.yaml)."""
    path = Path(path) if path else configs_dir() / "models.yaml"
    return _named(ModelSpec, _read_yaml(path, "models"), path, "models")


def load_gpus(path: Path | None = None) -> dict[str, GpuSpec]:
    """GPU types by name from `path` (default configs/gpus.yaml)."""
    path = Path(path) if path else configs_dir() / "gpus.yaml"
    return _named(GpuSpec, _read_yaml(path, "gpus"), path, "gpus")


def load_prices(path: Path | None = None) -> dict[str, GpuPrices]:
    """GPU type -> its prices (default configs/prices.yaml; docs/fleet.md)."""
    path = Path(path) if path else configs_dir() / "prices.yaml"
    raw = _read_yaml(path, "prices")
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: field 'prices' must be a mapping GPU type -> prices")
    return {str(name): parse_model(GpuPrices, entry, path, f"prices.{name}") for name, entry in raw.items()}


def load_accuracy(path: Path | None = None) -> dict[str, float]:
    """Model short name -> accuracy score (default: Open LLM Leaderboard v2 average, 0-100)."""
    path = Path(path) if path else configs_dir() / "accuracy" / "open_llm_leaderboard_v2.yaml"
    raw = _read_yaml(path, "scores")
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: field 'scores' must be a mapping name -> number")
    out: dict[str, float] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CatalogError(f"{path}: field 'scores.{name}': not a number")
        out[str(name)] = float(value)
    return out


def load_deploy_configs(path: Path | None = None) -> list[tuple[int, int]]:
    """Allowed (tp, pp) pairs (default configs/deploy_configs.yaml), in file order."""
    path = Path(path) if path else configs_dir() / "deploy_configs.yaml"
    raw = _read_yaml(path, "deploy_configs")
    if not isinstance(raw, list):
        raise CatalogError(f"{path}: field 'deploy_configs' must be a list")
    pairs = [parse_model(DeployConfig, item, path, f"deploy_configs[{i}]") for i, item in enumerate(raw)]
    out = [(c.tp, c.pp) for c in pairs]
    if len(out) != len(set(out)):
        raise CatalogError(f"{path}: field 'deploy_configs': duplicate (tp, pp)")
    return out


def load_cluster(path: Path | str) -> ClusterSpec:
    """A cluster file (e.g. configs/clusters/a6000x8.yaml)."""
    path = Path(path)
    _read_yaml(path, "nodes")
    return parse_model(ClusterSpec, read_yaml_file(path), path, "cluster")
