"""Public entry point: simulate queries of one application on given engines."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from orchestrator.batching import BatchingPolicy
from orchestrator.engines.base import Engine
from orchestrator.ops import words
from orchestrator.passes import GraphCache, passes_named
from orchestrator.rewrite import Pass, PassContext, worthwhile_prefix_tokens
from orchestrator.runtime.engine_scheduler import CoreBudget, EngineScheduler
from orchestrator.runtime.sim import QueryRun, RequestResult, SimState, run_events
from orchestrator.schemes import Scheme, get_scheme
from orchestrator.template import QueryConfig, Template
from profiler.engine import DEFAULT


def make_payload(cfg: QueryConfig, rng: np.random.Generator) -> dict[str, Any]:
    """Synthetic query content: a question of ``question_tokens`` tokens and the document's
    ``n_chunks`` chunks of ``chunk_size_tokens`` tokens (overlapping as configured)."""
    tag = int(rng.integers(0, 2**62))
    doc = words(("doc", tag), cfg.doc_tokens).split() if cfg.doc_tokens else []
    stride = cfg.chunk_size_tokens - cfg.chunk_overlap_tokens
    chunks = [" ".join(doc[i * stride:i * stride + cfg.chunk_size_tokens]) for i in range(cfg.n_chunks)]
    return {"question": words(("q", tag), cfg.question_tokens), "chunks": chunks}


def pass_context(engines: Mapping[str, Sequence[Engine]], *,
                 max_batch: Mapping[str, int] | None = None) -> PassContext:
    """What the passes may know about ``engines``: each one's max efficient batch (``max_batch``
    overrides named ones) and, for LLM engines with a step model, the shortest prefix worth a
    partial prefill."""
    caps = {name: inst[0].max_batch_size() for name, inst in engines.items()}
    caps.update(max_batch or {})
    split = {name: worthwhile_prefix_tokens(inst[0].step, background=getattr(inst[0], "background_partials", False),
                                            block_tokens=getattr(getattr(inst[0], "config", None), "block_size", DEFAULT.block_size))
             for name, inst in engines.items() if inst[0].kind == "llm" and hasattr(inst[0], "step")}
    return PassContext(caps, split)


@dataclass(frozen=True)
class Prepared:
    """What every runtime sets up alike before it runs queries: the scheme, its passes, the
    queries' content and the graph cache. :meth:`runs` optimises each query's graph for the
    engines' batch limits and checks the engines; :meth:`policy` gives an engine scheduler its
    batching policy."""
    template: Template
    scheme: Scheme
    passes: Sequence[Pass]
    query_configs: Sequence[QueryConfig]
    arrivals_s: Sequence[float]
    payloads: Sequence[Mapping[str, Any]]
    cache: GraphCache
    batching: BatchingPolicy | None = None

    def policy(self) -> BatchingPolicy:
        """``batching`` (one object shared by all engine schedulers) or a fresh one of the scheme."""
        return self.batching or self.scheme.policy()

    def runs(self, ctx: PassContext) -> list[QueryRun]:
        """Fresh per-query runs on graphs optimised for ``ctx`` (engine name -> max batch);
        KeyError when the graphs need an engine ``ctx`` does not name."""
        graphs = [self.cache.get(self.template, c, self.passes, ctx) for c in self.query_configs]
        needed = {n.engine for g in graphs for n in g.nodes.values() if n.engine is not None}
        missing = needed - set(ctx.max_batch)
        if missing:
            raise KeyError(f"template {self.template.name!r} needs engines {sorted(missing)}; "
                           f"given: {sorted(ctx.max_batch)}")
        return [QueryRun(i, g, float(t), p) for i, (g, t, p) in enumerate(zip(graphs, self.arrivals_s, self.payloads))]


def prepare(template: Template, query_configs: Sequence[QueryConfig], arrivals_s: Sequence[float], *,
            scheme: Scheme | str = "teola", batching: BatchingPolicy | None = None, seed: int = 0,
            payloads: Sequence[Mapping[str, Any]] | None = None, cache: GraphCache | None = None) -> Prepared:
    """Resolve ``scheme`` and its passes and generate content from ``seed`` unless ``payloads``
    are given: the part of :func:`simulate` that every runtime shares (arguments as there)."""
    if len(query_configs) != len(arrivals_s):
        raise ValueError(f"{len(query_configs)} configs but {len(arrivals_s)} arrivals")
    sch = get_scheme(scheme) if isinstance(scheme, str) else scheme
    if payloads is None:
        rng = np.random.default_rng(seed)
        payloads = [make_payload(c, rng) for c in query_configs]
    return Prepared(template, sch, passes_named(sch.passes), query_configs, arrivals_s, payloads,
                    cache or GraphCache(), batching)


def shared_cores(engines: Mapping[str, Sequence[Engine]]) -> int | None:
    """The CPU cores the instances of ``engines`` share (``factory.share_cores``); None where
    they share none."""
    return next((c for insts in engines.values() for e in insts
                 if (c := getattr(e, "cpu_cores", None)) is not None), None)


def simulate(template: Template, query_configs: Sequence[QueryConfig], arrivals_s: Sequence[float],
             engines: Mapping[str, Sequence[Engine]], *, scheme: Scheme | str = "teola",
             batching: BatchingPolicy | None = None, seed: int = 0,
             payloads: Sequence[Mapping[str, Any]] | None = None, cache: GraphCache | None = None,
             dispatch_overhead_s: float = 0.0, max_batch: Mapping[str, int] | None = None,
             traces: dict[int, QueryRun] | None = None) -> list[RequestResult]:
    """Run one query per ``(query_configs[i], arrivals_s[i])`` through ``template``.

    ``engines`` maps each engine name used by the template to its instances (fresh ones: they
    keep KV caches). ``scheme`` picks the passes and the default batching policy (``batching``
    overrides it, one policy object shared by all engine schedulers). Content is generated from
    ``seed`` unless ``payloads`` are given. ``dispatch_overhead_s`` delays every batch start
    (communication). ``max_batch`` caps named engines' batches (items in flight per instance)
    below their profiled max efficient batch. Returns results ordered by query index; latencies
    in seconds. ``traces``, if given, receives each query's run (its graph and every node's
    completion time, ``QueryRun.done_s``: what a critical path is read from).
    """
    prep = prepare(template, query_configs, arrivals_s, scheme=scheme, batching=batching, seed=seed,
                   payloads=payloads, cache=cache)
    ctx = pass_context(engines, max_batch=max_batch)
    runs = prep.runs(ctx)
    scheds = {name: EngineScheduler(name=name, instances=inst, policy=prep.policy(), max_batch=ctx.max_batch[name])
              for name, inst in engines.items()}
    cores = shared_cores(engines)
    if cores is not None:
        CoreBudget(cores, list(scheds.values()))
    state = SimState(schedulers=scheds, dispatch_overhead_s=dispatch_overhead_s)
    results = run_events(state, runs)
    if traces is not None:
        traces.update(state.queries)
    return results
