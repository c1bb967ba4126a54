"""Public entry point: simulate queries of one application on given engines."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from orchestrator.batching import BatchingPolicy
from orchestrator.engines.base import Engine
from orchestrator.ops import words
from orchestrator.passes import GraphCache, PassContext, passes_named
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.sim import QueryRun, RequestResult, SimState, run_events
from orchestrator.schemes import Scheme, get_scheme
from orchestrator.template import QueryConfig, Template


def make_payload(cfg: QueryConfig, rng: np.random.Generator) -> dict[str, Any]:
    """Synthetic query content: a question of ``question_tokens`` tokens and the document's
    ``n_chunks`` chunks of ``chunk_size_tokens`` tokens (overlapping as configured)."""
    tag = int(rng.integers(0, 2**62))
    doc = words(("doc", tag), cfg.doc_tokens).split() if cfg.doc_tokens else []
    stride = cfg.chunk_size_tokens - cfg.chunk_overlap_tokens
    chunks = [" ".join(doc[i * stride:i * stride + cfg.chunk_size_tokens]) for i in range(cfg.n_chunks)]
    return {"question": words(("q", tag), cfg.question_tokens), "chunks": chunks}


def pass_context(engines: Mapping[str, Sequence[Engine]]) -> PassContext:
    return PassContext({name: inst[0].max_batch_size() for name, inst in engines.items()})


def simulate(template: Template, query_configs: Sequence[QueryConfig], arrivals_s: Sequence[float],
             engines: Mapping[str, Sequence[Engine]], *, scheme: Scheme | str = "teola",
             batching: BatchingPolicy | None = None, seed: int = 0,
             payloads: Sequence[Mapping[str, Any]] | None = None, cache: GraphCache | None = None,
             dispatch_overhead_s: float = 0.0) -> list[RequestResult]:
    """Run one query per ``(query_configs[i], arrivals_s[i])`` through ``template``.

    ``engines`` maps each engine name used by the template to its instances (fresh ones: they
    keep KV caches). ``scheme`` picks the passes and the default batching policy (``batching``
    overrides it, one policy object shared by all engine schedulers). Content is generated from
    ``seed`` unless ``payloads`` are given. ``dispatch_overhead_s`` delays every batch start
    (communication). Returns results ordered by query index; latencies in seconds.
    """
    if len(query_configs) != len(arrivals_s):
        raise ValueError(f"{len(query_configs)} configs but {len(arrivals_s)} arrivals")
    sch = get_scheme(scheme) if isinstance(scheme, str) else scheme
    cache = cache or GraphCache()
    ctx = pass_context(engines)
    passes = passes_named(sch.passes)
    rng = np.random.default_rng(seed)
    if payloads is None:
        payloads = [make_payload(c, rng) for c in query_configs]
    graphs = [cache.get(template, c, passes, ctx) for c in query_configs]
    needed = {n.engine for g in graphs for n in g.nodes.values() if n.engine is not None}
    missing = needed - set(engines)
    if missing:
        raise KeyError(f"template {template.name!r} needs engines {sorted(missing)}; given: {sorted(engines)}")
    scheds = {name: EngineScheduler(name=name, instances=inst, policy=batching or sch.policy(),
                                    max_batch=ctx.max_batch[name])
              for name, inst in engines.items()}
    state = SimState(schedulers=scheds, dispatch_overhead_s=dispatch_overhead_s)
    runs = [QueryRun(i, g, float(t), p) for i, (g, t, p) in enumerate(zip(graphs, arrivals_s, payloads))]
    return run_events(state, runs)
