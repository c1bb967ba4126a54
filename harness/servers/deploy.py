"""Put a set of deployments on real servers: one server per planned instance, or endpoints the
user already runs.

``specs_for_instances`` turns a deployment's :class:`~selector.deployment.InstanceSpec` list into
one :class:`ServerSpec` each: its TP/PP degree, ``CUDA_VISIBLE_DEVICES`` from its GPU ids, the
checkpoint (``model_paths[model]``, else the catalog's ``hf_id``), the one engine configuration,
its own extra arguments, and its share of GPU memory (:func:`memory_share`). ``stand_in``
replaces every catalog model by one local checkpoint on CPU (TP/PP and GPUs dropped): latencies
are then the stand-in's, not the catalog models'. ``endpoints_from_fleet`` /
``endpoints_from_urls`` give the ``{instance id: Endpoint}`` mapping that
:func:`harness.live.replay_live` sends requests to.

Memory shares (the plan gives each instance ``mem_gb`` over its ``tp*pp`` GPUs, i.e.
``shard_gb = mem_gb / (tp*pp)`` per GPU, in GB of 1e9 bytes; a GPU holds ``capacity_gb =
mem_gb * 2**30 / 1e9`` of them, ``profiler.catalog.GpuSpec``):

- vLLM ``--gpu-memory-utilization`` is a share of each GPU's *total* memory that the instance
  may use for everything (weights, activations, KV; ``vllm/v1/worker/gpu_worker.py``), so it is
  ``shard_gb / capacity_gb``, rounded down to 0.001. Instances sharing a GPU together stay
  within what the plan packed on it, and vLLM's start-up check (the requested share must be
  free when it starts) holds because the Fleet starts them one after another.
- TensorRT-LLM ``free_gpu_memory_fraction`` is a share of the memory *free after* its weights,
  activation buffers and runtime (``profiler.memory``), measured when its KV cache is
  allocated, i.e. after the instances started before it on that GPU took theirs. The KV the
  plan reserves is ``kv_capacity_tokens(step, engine, mem_gb)`` tokens (the simulator's rule),
  so the fraction is ``kv_gb_per_gpu / (capacity - weights - buffers - runtime - earlier
  instances' shards)`` on the GPU where that is tightest, and ``KvCacheConfig.max_tokens`` caps
  the cache at exactly those tokens whatever the fraction gives.
- ``transformers serve`` has no memory share (it allocates as it goes).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.servers.calls import served_model
from harness.servers.client import OpenAIClient
from harness.servers.launcher import Fleet, ServerSpec
from profiler.engine import DEFAULT, EngineConfig, kv_capacity_tokens
from selector.deployment import InstanceSpec
from selector.problem import TOL


@dataclass
class Endpoint:
    """Where one instance's calls go. ``backend`` says how to ask for exact output lengths
    (``harness.servers.calls.exact_output_body``; None: ask nothing, record what comes back);
    ``alive`` is the server process's liveness when we launched it (None: unknown);
    ``tokenizer``: a local tokenizer path for exact-length prompts (None: corpus words)."""
    client: OpenAIClient
    backend: str | None = None
    alive: Callable[[], bool] | None = None
    tokenizer: str | None = None

    def dead(self) -> bool:
        return self.client.dead or (self.alive is not None and not self.alive())


def server_name(instance_id: str) -> str:
    """A server (and log file) name for an instance id such as ``rag-qa/answer/0``."""
    return re.sub(r"[^A-Za-z0-9_.@#-]", ".", instance_id)


def catalog_path(model: str) -> str:
    """The catalog's ``hf_id`` of ``model`` (what a server resolves when no local path is given)."""
    from profiler.steps import model_spec
    return model_spec(model).hf_id


def instance_gpu(inst: InstanceSpec | None, default: Any = None) -> Any:
    """The catalog GPU (``GpuSpec``) an instance runs on: its own ``gpu_type`` (spec section 10)
    when the plan names one, else ``default`` (a name or a ``GpuSpec``; None: unknown)."""
    from profiler.steps import gpu_spec
    if inst is not None and inst.gpu_name(None) is not None:
        return gpu_spec(inst.gpu_name(None))
    return gpu_spec(default) if isinstance(default, str) else default


def memory_share(inst: InstanceSpec, *, backend: str, gpu: Any, engine: EngineConfig | None = None,
                 earlier_gb: Mapping[int, float] | None = None) -> dict[str, Any]:
    """The ServerSpec fields that give ``inst`` its planned memory on GPUs of type ``gpu``
    (a ``profiler.catalog.GpuSpec``; module docstring for the rules). ``earlier_gb``: GB per GPU id
    already taken by instances started before it (TensorRT-LLM only). ValueError when the plan
    gives a GPU more than it holds or leaves no KV cache."""
    engine = engine or DEFAULT
    share = inst.shard_gb / gpu.capacity_gb
    if share > 1.0 + TOL:
        raise ValueError(f"instance {inst.id}: {inst.shard_gb:.2f} GB per GPU exceeds a {gpu.name}'s "
                         f"{gpu.capacity_gb:.2f} GB")
    if backend == "vllm":
        util = max(0.001, math.floor(share * 1000) / 1000)
        return {"engine": engine.model_copy(update={"gpu_memory_utilization": util})}
    if backend != "trtllm":
        return {}
    from profiler.memory import plan_memory
    from profiler.steps import step_model
    step = step_model(inst.model, gpu.name, inst.tp, inst.pp)
    tokens = kv_capacity_tokens(step, engine, mem_gb=inst.mem_gb)
    if tokens < engine.block_size:
        raise ValueError(f"instance {inst.id}: {inst.mem_gb:.2f} GB leaves no KV cache for {inst.model}")
    free_all = plan_memory(step, "trtllm", gpu_capacity_gb=gpu.capacity_gb, free_gpu_memory_fraction=1.0,
                           max_num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs)
    g = inst.tp * inst.pp
    free_gpu = free_all.kv_gb / g - max((earlier_gb or {}).get(x, 0.0) for x in inst.gpus) if inst.gpus \
        else free_all.kv_gb / g
    kv_gpu = tokens * step.kv_gb_per_token / g
    if free_gpu <= 0:
        raise ValueError(f"instance {inst.id}: nothing left free on its GPUs for TensorRT-LLM's KV cache")
    return {"kv_free_fraction": min(1.0, math.ceil(kv_gpu / free_gpu * 1000) / 1000), "kv_max_tokens": tokens}


def specs_for_instances(instances: Sequence[InstanceSpec], *, model_paths: Mapping[str, str] | None = None,
                        stand_in: str | None = None, backend: str = "vllm", base_port: int = 8100,
                        engine: EngineConfig | None = None, gpu: Any = None, require_local: bool = False,
                        instance_args: Mapping[str, Sequence[str]] | None = None,
                        **common) -> dict[str, ServerSpec]:
    """One :class:`ServerSpec` per instance, keyed by instance id, on ports from ``base_port``.
    Checkpoint: ``model_paths[model]``, else the catalog's ``hf_id`` (``require_local``: a model
    without a path is a ``KeyError`` naming it, the instance and the given models). ``gpu``: the
    catalog GPU (name or ``GpuSpec``) the plan is for; with it each spec gets its memory share
    (:func:`memory_share`). ``instance_args``: extra command-line arguments per instance id
    (``"*"``: every instance; both apply, ``"*"`` first). ``engine``: None gives each backend
    its default (``ServerSpec.engine_config``). ``common`` goes to every spec
    (``dtype``, ``startup_timeout_s``, ``env``, ...)."""
    if isinstance(gpu, str):
        gpu = instance_gpu(None, gpu)
    args = dict(instance_args or {})
    unknown = sorted(set(args) - {i.id for i in instances} - {"*"})
    if unknown:
        raise KeyError(f"instance_args for unknown instance(s) {', '.join(unknown)}")
    specs: dict[str, ServerSpec] = {}
    names: set[str] = set()
    taken: dict[int, float] = {}
    for k, inst in enumerate(instances):
        name = server_name(inst.id)
        if name in names:
            name = f"{name}-{k}"
        names.add(name)
        fields: dict[str, Any] = {"engine": engine}
        if stand_in is not None:
            model, tp, pp, gpus = stand_in, 1, 1, ()
        else:
            if inst.model in (model_paths or {}):
                model = model_paths[inst.model]
            elif require_local:
                raise KeyError(f"no local checkpoint for model {inst.model!r} (instance {inst.id}); "
                               f"given: {', '.join(sorted(model_paths or {})) or 'none'}")
            else:
                model = catalog_path(inst.model)
            tp, pp, gpus = inst.tp, inst.pp, tuple(inst.gpus)
            own = instance_gpu(inst, gpu)
            if own is not None:
                fields.update(memory_share(inst, backend=backend, gpu=own, engine=engine, earlier_gb=taken))
                for g in inst.gpus:
                    taken[g] = taken.get(g, 0.0) + inst.shard_gb
        extra = tuple(common.get("extra_args", ())) + tuple(args.get("*", ())) + tuple(args.get(inst.id, ()))
        rest = {k2: v for k2, v in common.items() if k2 != "extra_args"}
        specs[inst.id] = ServerSpec(name=name, backend=backend, model=model, port=base_port + k, tp=tp, pp=pp,
                                    gpus=gpus, extra_args=extra, **fields, **rest)
    return specs


def endpoints_from_fleet(fleet: Fleet, specs: Mapping[str, ServerSpec], *, timeout_s: float,
                         retries: int = 1, exact_output: bool = True, **client: Any) -> dict[str, Endpoint]:
    """Endpoints on the servers ``fleet`` started from ``specs`` (as returned above); ``client``
    goes to each :class:`OpenAIClient` (``chat``, ``max_connections``, ``read_timeout_s``)."""
    out = {}
    for iid, spec in specs.items():
        proc = fleet.servers[spec.name]
        out[iid] = Endpoint(fleet.client(spec.name, timeout_s=timeout_s, retries=retries, **client),
                            spec.backend if exact_output else None, proc.alive,
                            "char" if spec.backend == "torch" else spec.model)
    return out


def endpoints_from_urls(urls: Mapping[str, str], *, timeout_s: float, retries: int = 1,
                        backend: str | None = None, models: Mapping[str, str] | None = None,
                        tokenizers: Mapping[str, str] | None = None, api_key: str | None = None,
                        **client: Any) -> dict[str, Endpoint]:
    """Endpoints on servers the user runs: ``{instance id: base URL}``. The model name sent in
    requests is ``models[id]`` when given, else the first one the server's ``/v1/models`` lists;
    ``tokenizers[id]``: a local tokenizer for exact-length prompts (else corpus words)."""
    out = {}
    for iid, url in urls.items():
        model = (models or {}).get(iid) or served_model(url, api_key=api_key)
        out[iid] = Endpoint(OpenAIClient(base_url=url, model=model, name=iid, timeout_s=timeout_s, retries=retries,
                                         backend=backend, api_key=api_key, **client),
                            backend, None, (tokenizers or {}).get(iid))
    return out
