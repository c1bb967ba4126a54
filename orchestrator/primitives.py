"""Primitives: the nodes of a query's dataflow graph (p-graph before optimisation, e-graph after).

A node is immutable. Its inputs are named ports bound to a :class:`Ref` (another node's output,
optionally sliced, indexed or transformed) or a :class:`Lit` (a constant). The data a node
consumes is exactly what its refs name; graph edges that no ref names carry no data.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Mapping, Union


class Kind(StrEnum):
    INPUT = "input"                      # the query's own data (question, document); ready on arrival
    EMBEDDING = "embedding"
    INGESTION = "ingestion"
    SEARCHING = "searching"
    RERANKING = "reranking"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    PARTIAL_PREFILLING = "partial_prefilling"
    FULL_PREFILLING = "full_prefilling"
    PARTIAL_DECODING = "partial_decoding"
    CONDITION = "condition"
    AGGREGATE = "aggregate"


#: Kinds the graph scheduler executes itself (no engine, zero service time).
ENGINE_FREE = frozenset({Kind.INPUT, Kind.CONDITION, Kind.AGGREGATE, Kind.PARTIAL_DECODING})
#: Kinds that create or extend an LLM KV cache.
PREFILL_KINDS = frozenset({Kind.PREFILLING, Kind.PARTIAL_PREFILLING, Kind.FULL_PREFILLING})
LLM_KINDS = PREFILL_KINDS | {Kind.DECODING}


@dataclass(frozen=True)
class Ref:
    """A reference to node ``node``'s output. ``lo``/``hi`` slice a list output, ``index`` picks
    one element, ``transform`` names a pure conversion (``"json_items"``: parse a JSON list)."""
    node: str
    lo: int | None = None
    hi: int | None = None
    index: int | tuple[int, ...] | None = None
    transform: str | None = None

    def at(self, i: int) -> "Ref":
        """The ref to element ``i`` of this ref's (list) value."""
        if self.lo is not None or self.hi is not None:
            raise ValueError(f"cannot index a sliced ref {self}")
        path = () if self.index is None else (self.index if isinstance(self.index, tuple) else (self.index,))
        return Ref(self.node, index=path + (i,) if path else i, transform=self.transform)


@dataclass(frozen=True)
class Lit:
    """A constant input (e.g. an instruction); ``tokens`` is its length in tokens."""
    value: Any


Port = Union[Ref, Lit, tuple]  # a tuple holds Refs/Lits (prompt segments, aggregate parts)


def refs_of(value: Port) -> list[Ref]:
    if isinstance(value, Ref):
        return [value]
    if isinstance(value, tuple):
        return [r for v in value for r in refs_of(v)]
    return []


@dataclass(frozen=True)
class Node:
    """One primitive.

    ``n_items`` is the batch dimension (texts to embed, queries to search, sequences to prefill);
    ``elementwise`` names the ports whose list inputs are processed item by item, so the node may
    be split into stages over them. ``guard`` is a CONDITION ref: when it is false the node is
    skipped and outputs ``params['skip_value']``. ``stream_of`` marks a PARTIAL_DECODING node fed
    by piece ``piece`` of that decode's streamed output.
    """
    id: str
    kind: Kind
    component: str
    engine: str | None
    inputs: Mapping[str, Port] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    n_items: int = 1
    batchable: bool = False
    splittable: bool = False
    elementwise: tuple[str, ...] = ()
    guard: Ref | None = None
    stream_of: str | None = None
    piece: int | None = None

    def refs(self) -> list[Ref]:
        out = [r for v in self.inputs.values() for r in refs_of(v)]
        if self.guard is not None:
            out.append(self.guard)
        return out

    def sources(self) -> set[str]:
        """Ids of the nodes whose data this node consumes."""
        s = {r.node for r in self.refs()}
        if self.stream_of is not None:
            s.add(self.stream_of)
        return s

    def evolve(self, **changes: Any) -> "Node":
        return replace(self, **changes)


def remap_port(value: Port, mapping: Mapping[str, Ref]) -> Port:
    """Replace whole-output refs to a node by another ref (used when a pass replaces a node)."""
    if isinstance(value, Ref) and value.node in mapping:
        new = mapping[value.node]
        if value.lo is None and value.hi is None and value.index is None and value.transform is None:
            return new
        return Ref(new.node, value.lo, value.hi, value.index, value.transform)
    if isinstance(value, tuple):
        return tuple(remap_port(v, mapping) for v in value)
    return value
