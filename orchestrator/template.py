"""Declaration API: application templates and per-query configurations.

    index = Component("indexing", op="index", engine="embedder", batchable=True,
                      uses={"chunks": "input.chunks"}, params={"db_engine": "vectordb"})
    app = (index >> Component("query_embedding", op="embed", engine="embedder", batchable=True,
                              uses={"texts": "input.question"})
           >> ...).named("naive_rag")

A component is bound to an engine and annotated ``batchable`` (its inputs are independent items:
they can be batched or split into stages) and ``splittable`` (its output is structured and can be
consumed piece by piece). ``uses`` wires its input ports to ``"<component>.<export>"`` or
``"input.<field>"``, optionally indexed ``"search.hits[0]"``. ``>>`` records template order, which
the p-graph keeps conservatively as edges.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class Component:
    """One component of an app: also the schema of an entry of an app file's ``components``
    (``orchestrator.apps.AppSpec`` validates it, unknown keys refused)."""

    __pydantic_config__ = ConfigDict(extra="forbid")
    name: str
    op: str
    engine: str | None = None
    batchable: bool = False
    splittable: bool = False
    uses: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)

    def __rshift__(self, other: "Component | Template") -> "Template":
        return Template(components=(self,)) >> other

    def key(self) -> tuple:
        return (self.name, self.op, self.engine, self.batchable, self.splittable,
                tuple(sorted(self.uses.items())), repr(sorted(self.params.items())))


@dataclass(frozen=True)
class Template:
    """An application: components in declared (template) order; ``outputs`` name the exports
    returned to the user (default: the last component's first export)."""
    components: tuple[Component, ...]
    name: str = "app"
    outputs: tuple[str, ...] = ()

    def __rshift__(self, other: "Component | Template") -> "Template":
        more = other.components if isinstance(other, Template) else (other,)
        names = [c.name for c in self.components + more]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate component names in template: {sorted(dup)}")
        return Template(self.components + more, self.name, self.outputs)

    def named(self, name: str, *, outputs: tuple[str, ...] = ()) -> "Template":
        return Template(self.components, name, outputs or self.outputs)

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"unknown component {name!r}; known: {', '.join(c.name for c in self.components)}")

    def key(self) -> tuple:
        return (self.name, self.outputs, tuple(c.key() for c in self.components))


class QueryConfig(BaseModel):
    """Per-query configuration: everything that shapes the query's graph (not its content).

    Two queries with equal configurations share one optimised graph (the cache key)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    question_tokens: int = Field(24, ge=1)
    doc_tokens: int = Field(0, ge=0, description="document indexed with the query; 0 = none")
    chunk_size_tokens: int = Field(256, ge=8)
    chunk_overlap_tokens: int = Field(30, ge=0)
    top_k: int = Field(3, ge=1, description="chunks given to synthesis")
    fetch_k: int = Field(3, ge=1, description="chunks fetched per search query")
    synthesis_mode: Literal["one_shot", "tree", "refine"] = "one_shot"
    n_expanded_queries: int = Field(3, ge=1)
    answer_tokens: int = Field(64, ge=1, description="tokens the final LLM call generates")
    neighbours: int = Field(4, ge=0, description="neighbour chunks shown when contextualising")

    @property
    def n_chunks(self) -> int:
        if self.doc_tokens == 0:
            return 0
        stride = self.chunk_size_tokens - self.chunk_overlap_tokens
        if stride <= 0:
            raise ValueError("chunk_overlap_tokens must be below chunk_size_tokens")
        return max(1, math.ceil(max(self.doc_tokens - self.chunk_overlap_tokens, 1) / stride))
