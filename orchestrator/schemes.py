"""Execution schemes: which graph a query runs as, and how engines batch it.

* ``teola``: all passes (the e-graph: the paper's four plus reranking pipelining),
  topology-aware batching up to the profiled max batch; no prefix caching, as in the paper.
* ``teola+prefix-cache`` (beyond the paper): Teola's e-graph and scheduling on LLM engines with
  the prefix caching the LlamaDistPC baselines have.
* ``llamadist-po`` / ``llamadist-to``: the module chain (p-graph in template order) with each
  module run as LlamaIndex runs it (``orchestrator.baselines.LlamaIndexModules``: sequential
  tree-synthesis leaves, embedding in sequential batches of 10, one retriever call per expanded
  query, no decode pipelining), per-invocation or throughput-oriented (FIFO up to the max batch).
* ``llamadistpc-po`` / ``llamadistpc-to``: plus manual parallelism of independent *modules*
  (``ModulePruning``: a module waits for the modules it reads from, as black boxes) and LLM
  prefix caching.
* ablations: ``teola-no-<pass>`` (one pass off), ``teola-no-par-pipe`` (no passes, Teola's
  scheduler), ``teola-blind`` (all passes, FIFO batching), ``teola-topo-lowest``, and
  ``teola-no-prefill_split-{blind,topo-lowest}`` (the batching ablations without prompt splitting).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from orchestrator.batching import BatchingPolicy, Blind, PerInvocation, TopologyAware

ALL = ("prune", "stage", "prefill_split", "decode_pipeline", "rerank_pipeline")
#: LlamaIndex modules as black boxes (orchestrator.baselines); PC adds module-level parallelism
LLAMADIST = ("llamaindex",)
LLAMADIST_PC = ("llamaindex", "module_prune")


@dataclass(frozen=True)
class Scheme:
    """``passes``: pass names applied to a fixed point; ``policy``: a factory for each engine
    scheduler's batching policy; ``prefix_caching``: build LLM engines with prefix caching."""
    name: str
    passes: tuple[str, ...]
    policy: Callable[[], BatchingPolicy]
    prefix_caching: bool = False


def _topo() -> BatchingPolicy:
    return TopologyAware(direction="highest")


def _schemes() -> dict[str, Scheme]:
    out = [
        Scheme("teola", ALL, _topo),
        Scheme("teola+prefix-cache", ALL, _topo, prefix_caching=True),
        Scheme("llamadist-po", LLAMADIST, PerInvocation),
        Scheme("llamadist-to", LLAMADIST, Blind),
        Scheme("llamadistpc-po", LLAMADIST_PC, PerInvocation, prefix_caching=True),
        Scheme("llamadistpc-to", LLAMADIST_PC, Blind, prefix_caching=True),
        Scheme("teola-no-par-pipe", (), _topo),
        Scheme("teola-blind", ALL, Blind),
        Scheme("teola-topo-lowest", ALL, lambda: TopologyAware(direction="lowest")),
    ]
    out += [Scheme(f"teola-no-{p}", tuple(q for q in ALL if q != p), _topo) for p in ALL]
    # where refine prompts are not split they start new sequences, which a binding batch cap holds
    # back: the batching policy then decides which query's work goes first (teola_apps batch cap)
    no_split = tuple(q for q in ALL if q != "prefill_split")
    out += [Scheme("teola-no-prefill_split-blind", no_split, Blind),
            Scheme("teola-no-prefill_split-topo-lowest", no_split, lambda: TopologyAware(direction="lowest"))]
    reg: dict[str, Scheme] = {}
    for s in out:
        if s.name in reg:
            raise KeyError(f"scheme {s.name!r} registered twice")
        reg[s.name] = s
    return reg


SCHEMES: dict[str, Scheme] = _schemes()
BASELINES = ("llamadist-po", "llamadist-to", "llamadistpc-po", "llamadistpc-to")


def get_scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise KeyError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}") from None
