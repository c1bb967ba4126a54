"""What a server needs to start: the per-backend rules behind every exported or launched command.

One place for the rules ``python -m harness export`` and ``launch`` apply to each planned instance
(:func:`apply_rules`), so that the command starts on the engine it names:

- **context length** (vLLM ``--max-model-len``, TensorRT-LLM ``--max_seq_len``; ``transformers
  serve`` has no such flag and allocates as it goes): the longest mean call (prompt + output
  tokens, ``selector.taskspec.stage_tokens``) of any stage routed to the instance, across every
  task of the plan set (a reused instance serves several), times :data:`TAIL`, rounded up to a
  multiple of :data:`ROUND` and capped at the model's ``max_context``. ``TAIL = 5`` covers the
  Azure 2023 traces' long calls (``../shared/data/azure-public-dataset``, prompt + generated
  tokens): code max 7,841 at a mean of 2,076 (3.8x), conv p99.9 6,301 at a mean of 1,366 (4.6x;
  its longest, 14,089 tokens, 10.3x, is cut: pass the flag in ``--args`` to serve it). An instance whose
  task is not in the catalog (a task file) takes the model's context, capped at what its KV cache
  holds (a warning says so).
- **batched-token budget and chunked prefill** stay :class:`~profiler.engine.EngineConfig`'s
  (``--max-num-batched-tokens`` = ``token_budget``; chunked prefill for ``vllm-v1`` and
  ``sarathi``). vLLM refuses to start when the budget is below the context length without chunked
  prefill, or below ``max_num_seqs``, or when ``long_prefill_token_threshold`` exceeds the
  context length (``vllm/config/scheduler.py`` ``SchedulerConfig.verify_max_model_len``, vLLM
  0.33.0); TensorRT-LLM cannot schedule a prompt longer than ``max_num_tokens`` without chunked
  prefill either. Such a setting is refused here (ValueError naming the instance) rather than
  raised, since the plan's memory reserve was sized at that budget.
- **KV cache at that length**: vLLM refuses to start when one sequence of ``max_model_len``
  tokens does not fit its KV cache (``vllm/v1/core/kv_cache_utils.py``
  ``check_enough_kv_cache_memory``). The KV an instance's share holds is the one rule,
  :func:`profiler.engine.kv_capacity_tokens` (``kv_gb`` / bytes per token), at vLLM's rounded
  ``--gpu-memory-utilization`` (share x GPU capacity x GPUs) or TensorRT-LLM's ``max_tokens``.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.servers.launcher import CHUNKED, ServerSpec
from selector.deployment import Deployment, InstanceSpec

log = logging.getLogger(__name__)

#: context length = this x the longest mean call routed to the instance (module docstring)
TAIL = 5
#: context lengths are multiples of this many tokens
ROUND = 1024
#: the flag that sets the context length, per backend (None: the backend has none)
CONTEXT_FLAG = {"vllm": "--max-model-len", "trtllm": "--max_seq_len", "transformers": None, "torch": None}


def call_tokens(deps: Sequence[Deployment]) -> dict[str, int]:
    """{instance id: prompt + output tokens of the longest mean call of a stage routed to it}, over
    every deployment of the plan set; instances only routed from tasks not in the catalog are absent."""
    from selector.taskspec import load_task, stage_tokens
    out: dict[str, int] = {}
    for d in deps:
        try:
            task = load_task(d.task)
            wf = next(w for w in task.workflows if w.name == d.workflow)
        except (ValueError, OSError, LookupError, StopIteration):
            continue
        sizes = {s.name: p + o for s, (p, o) in zip(wf.stages, stage_tokens(task, wf))}
        for sr in d.stages:
            for route in sr.routes:
                for iid in route.instances:
                    out[iid] = max(out.get(iid, 0), sizes.get(sr.stage, 0))
    return out


def context_len(tokens: int | None, max_context: int) -> int:
    """The context length for a longest mean call of ``tokens`` (None: unknown -> ``max_context``)."""
    if not tokens:
        return max_context
    return min(max_context, math.ceil(TAIL * tokens / ROUND) * ROUND)


def check_budget(iid: str, backend: str, engine: Any, length: int) -> None:
    """ValueError naming ``iid`` when the engine's token budget cannot serve ``length`` tokens."""
    budget = engine.token_budget
    if engine.scheduler not in CHUNKED and budget < length:
        raise ValueError(f"instance {iid}: max_num_batched_tokens {budget} is below its context length {length} "
                         f"without chunked prefill (scheduler {engine.scheduler}); {backend} refuses to start: "
                         "raise --max-batch-tokens or use scheduler vllm-v1")
    if backend == "vllm" and budget < engine.max_num_seqs:
        raise ValueError(f"instance {iid}: max_num_batched_tokens {budget} is below max_num_seqs "
                         f"{engine.max_num_seqs}; vLLM refuses to start")
    if engine.long_prefill_token_threshold > length:
        raise ValueError(f"instance {iid}: long_prefill_token_threshold {engine.long_prefill_token_threshold} "
                         f"exceeds its context length {length}; vLLM refuses to start")


def kv_tokens(inst: InstanceSpec, spec: ServerSpec, gpu: Any) -> int:
    """KV tokens ``spec``'s memory share holds for ``inst`` on GPUs of type ``gpu`` (the one rule)."""
    from profiler.engine import kv_capacity_tokens
    from profiler.steps import step_model
    if spec.kv_max_tokens is not None:          # TensorRT-LLM: the cap deploy.memory_share derived
        return spec.kv_max_tokens
    e = spec.engine_config
    step = step_model(inst.model, gpu.name, inst.tp, inst.pp)
    mem = e.gpu_memory_utilization * gpu.capacity_gb * inst.tp * inst.pp
    return kv_capacity_tokens(step, e, mem_gb=mem)


def rule_for(inst: InstanceSpec, spec: ServerSpec, gpu: Any, tokens: int | None) -> ServerSpec:
    """``spec`` with its context length set, or ValueError naming ``inst`` (module docstring)."""
    from profiler.steps import model_spec
    if CONTEXT_FLAG.get(spec.backend) is None:
        return spec
    length = context_len(tokens, model_spec(inst.model).max_context)
    e = spec.engine_config
    if gpu is not None:
        held = kv_tokens(inst, spec, gpu)
        if held < length and not tokens and held >= e.block_size:
            capped = held // e.block_size * e.block_size
            log.warning("instance %s: task not in the catalog; context length %d (the KV cache its memory "
                        "share holds), not %s's %d", inst.id, capped, inst.model, length)
            length = capped
        elif held < length:
            raise ValueError(f"instance {inst.id}: its memory share ({spec.engine_config.gpu_memory_utilization:g} "
                             f"of {inst.tp * inst.pp} x {gpu.name}) leaves a KV cache of {held} tokens, below its "
                             f"context length {length} ({inst.model}); give it more memory or pass "
                             f"--args '{inst.id}={CONTEXT_FLAG[spec.backend]} N' with N <= {held}")
    check_budget(inst.id, spec.backend, e, length)
    return spec.model_copy(update={"max_model_len": length})


def _overridden(spec: ServerSpec) -> bool:
    """Whether the instance's own arguments set the context length already."""
    flag = CONTEXT_FLAG.get(spec.backend)
    return flag is not None and any(a == flag or a.startswith(flag + "=") for a in spec.extra_args)


def apply_rules(specs: Mapping[str, ServerSpec], instances: Sequence[InstanceSpec], deps: Sequence[Deployment],
                gpus: Mapping[str, Any]) -> dict[str, ServerSpec]:
    """Every spec with its context length (module docstring); ``gpus``: {instance id: ``GpuSpec``}
    (missing: the KV check is skipped). An instance whose own arguments set the flag keeps them."""
    tokens = call_tokens(deps)
    by_id = {i.id: i for i in instances}
    out = {}
    for iid, spec in specs.items():
        inst = by_id.get(iid)
        out[iid] = spec if inst is None or _overridden(spec) else rule_for(inst, spec, gpus.get(iid), tokens.get(iid))
    return out


def warn_gpu_mismatch(obj: Any, instances: Sequence[Any], gpu: Any) -> None:
    """Warn when ``gpu`` (the ``--gpu`` GpuSpec) is not the GPU the plan was made for: an instance's
    own ``gpu_type``, or (an untyped plan) the memory of the plan set's cluster GPUs."""
    if gpu is None:
        return
    named = sorted({i.gpu_name(None) for i in instances} - {None, gpu.name})
    if named:
        log.warning("--gpu %s differs from the plan's GPU type %s; those instances keep the plan's type",
                    gpu.name, ", ".join(named))
    cluster = obj.get("cluster") if isinstance(obj, Mapping) else None
    sizes = {g.get("mem_gb") for g in (cluster or {}).get("gpus", ()) if isinstance(g, Mapping)} - {None}
    if not named and sizes and gpu.mem_gb not in sizes:
        log.warning("--gpu %s has %g GB, the plan's cluster GPUs %s GB: the plan was made for another GPU type",
                    gpu.name, gpu.mem_gb, "/".join(f"{x:g}" for x in sorted(sizes)))
