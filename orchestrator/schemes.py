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
* ``llamadist-open-{po,to}`` / ``llamadistpc-open-{po,to}``: the same with LlamaIndex's in-module
  concurrency opened by its own knobs (``llamaindex_open``: async tree synthesis, every chunk
  context in flight, one embedding call per document): the strongest baselines.
* ablations: ``teola-no-<pass>`` (one pass off), ``teola-only-<p>[+<q>...]`` (only the named
  passes on; any subset, resolved on demand, for the per-pass decomposition; ``teola+prefix-cache-only-...``
  the same with prefix caching), ``teola-no-par-pipe`` (no passes, Teola's scheduler), ``teola-blind`` (all passes, FIFO batching), ``teola-topo-lowest``, and
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
#: the same modules with their in-module concurrency opened (orchestrator.baselines)
LLAMADIST_OPEN = ("llamaindex_open",)
LLAMADIST_PC_OPEN = ("llamaindex_open", "module_prune")
ONLY = "teola-only-"
PREFIX_ONLY = "teola+prefix-cache-only-"


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
        Scheme("llamadist-open-po", LLAMADIST_OPEN, PerInvocation),
        Scheme("llamadist-open-to", LLAMADIST_OPEN, Blind),
        Scheme("llamadistpc-open-po", LLAMADIST_PC_OPEN, PerInvocation, prefix_caching=True),
        Scheme("llamadistpc-open-to", LLAMADIST_PC_OPEN, Blind, prefix_caching=True),
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
#: LlamaIndex's defaults inside every module
DEFAULT_BASELINES = ("llamadist-po", "llamadist-to", "llamadistpc-po", "llamadistpc-to")
#: the same with in-module concurrency opened
OPEN_BASELINES = ("llamadist-open-po", "llamadist-open-to", "llamadistpc-open-po", "llamadistpc-open-to")
BASELINES = DEFAULT_BASELINES + OPEN_BASELINES


def only_scheme(passes: tuple[str, ...] | list[str], prefix_caching: bool = False) -> str:
    """The name of Teola with only ``passes`` on (none: ``teola-no-par-pipe``), in ``ALL`` order;
    with ``prefix_caching``, on engines with a prefix cache (``teola+prefix-cache-only-<p>...``,
    none: ``teola+prefix-cache-only-none``)."""
    unknown = set(passes) - set(ALL)
    if unknown:
        raise KeyError(f"unknown pass {sorted(unknown)[0]!r}; known: {', '.join(ALL)}")
    on = [p for p in ALL if p in passes]
    if prefix_caching:
        return PREFIX_ONLY + ("+".join(on) or "none")
    return ONLY + "+".join(on) if on else "teola-no-par-pipe"


def get_scheme(name: str) -> Scheme:
    for head, pc in ((ONLY, False), (PREFIX_ONLY, True)):
        if name.startswith(head):
            rest = name[len(head):]
            on = () if pc and rest == "none" else tuple(rest.split("+"))
            if set(on) - set(ALL) or only_scheme(on, pc) != name:
                raise KeyError(f"unknown scheme {name!r}: write the passes once each, in the order {'+'.join(ALL)}")
            return Scheme(name, on, _topo, prefix_caching=pc)
    try:
        return SCHEMES[name]
    except KeyError:
        raise KeyError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}, {ONLY}<pass>[+<pass>...], "
                       f"{PREFIX_ONLY}<pass>[+<pass>...]|none") from None
