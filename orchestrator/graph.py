"""A query's primitive graph: immutable nodes, explicit edges, named outputs.

Edges are a superset of the data dependencies: the p-graph also chains components in template
order (Algorithm 1's conservative edges); dependency pruning removes the edges that carry no
data. Graphs are immutable; passes edit a :class:`GraphEditor` copy and call ``freeze()``, which
validates, so a failing pass never leaves a half-rewritten graph behind.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

from orchestrator.primitives import Kind, Node, Ref, remap_port


class GraphError(ValueError):
    """The graph breaks an invariant (dangling ref, missing data edge, cycle)."""


@dataclass(frozen=True)
class Graph:
    nodes: Mapping[str, Node]
    edges: frozenset[tuple[str, str]]
    outputs: tuple[str, ...]
    name: str = ""

    @cached_property
    def children(self) -> dict[str, list[str]]:
        ch: dict[str, list[str]] = {n: [] for n in self.nodes}
        for s, d in sorted(self.edges):
            ch[s].append(d)
        return ch

    @cached_property
    def parents(self) -> dict[str, list[str]]:
        pa: dict[str, list[str]] = {n: [] for n in self.nodes}
        for s, d in sorted(self.edges):
            pa[d].append(s)
        return pa

    @cached_property
    def order(self) -> tuple[str, ...]:
        """A deterministic topological order (Kahn, ties by id)."""
        indeg = {n: len(p) for n, p in self.parents.items()}
        ready = sorted(n for n, k in indeg.items() if k == 0)
        out: list[str] = []
        while ready:
            n = ready.pop(0)
            out.append(n)
            for c in self.children[n]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
            ready.sort()
        if len(out) != len(self.nodes):
            raise GraphError(f"graph {self.name!r} has a cycle")
        return tuple(out)

    @cached_property
    def depth(self) -> dict[str, int]:
        """Depth backwards from the sinks: sinks 0, ``parent = max(parent, child + 1)``."""
        d = {n: 0 for n in self.nodes}
        for n in reversed(self.order):
            for c in self.children[n]:
                d[n] = max(d[n], d[c] + 1)
        return d

    def signature(self) -> tuple:
        return (tuple(sorted(self.nodes.items())), tuple(sorted(self.edges)), self.outputs)

    def validate(self) -> None:
        for nid, node in self.nodes.items():
            if node.id != nid:
                raise GraphError(f"node key {nid!r} != id {node.id!r}")
            for src in node.sources():
                if src not in self.nodes:
                    raise GraphError(f"{nid}: ref to unknown node {src!r}")
                if (src, nid) not in self.edges:
                    raise GraphError(f"{nid}: consumes {src!r} without an edge")
        for s, d in self.edges:
            if s not in self.nodes or d not in self.nodes:
                raise GraphError(f"edge {s}->{d} names an unknown node")
        for o in self.outputs:
            if o not in self.nodes:
                raise GraphError(f"output {o!r} is not a node")
        _ = self.order  # raises on a cycle

    def count(self, kind: Kind) -> int:
        return sum(1 for n in self.nodes.values() if n.kind == kind)


@dataclass
class GraphEditor:
    """A mutable copy of a graph for one rewrite; ``freeze()`` validates and returns a Graph."""
    nodes: dict[str, Node]
    edges: set[tuple[str, str]]
    outputs: list[str]
    name: str = ""
    _fresh: int = field(default=0)

    @classmethod
    def of(cls, g: Graph) -> "GraphEditor":
        return cls(dict(g.nodes), set(g.edges), list(g.outputs), g.name)

    def fresh_id(self, base: str) -> str:
        while True:
            self._fresh += 1
            cand = f"{base}~{self._fresh}"
            if cand not in self.nodes:
                return cand

    def add(self, node: Node, *, extra_parents: Iterable[str] = ()) -> Node:
        if node.id in self.nodes:
            raise GraphError(f"duplicate node id {node.id!r}")
        self.nodes[node.id] = node
        for s in node.sources() | set(extra_parents):
            self.edges.add((s, node.id))
        return node

    def remove(self, nid: str) -> None:
        del self.nodes[nid]
        self.edges = {(s, d) for s, d in self.edges if s != nid and d != nid}

    def children(self, nid: str) -> list[str]:
        return sorted(d for s, d in self.edges if s == nid)

    def parents(self, nid: str) -> list[str]:
        return sorted(s for s, d in self.edges if d == nid)

    def replace_consumers(self, old: str, new: str, *, skip: Iterable[str] = ()) -> None:
        """Point every consumer of ``old``'s output (and every edge out of it) at ``new``."""
        skip = set(skip)
        for c in self.children(old):
            if c in skip:
                continue
            n = self.nodes[c]
            inputs = {k: remap_port(v, {old: Ref(new)}) for k, v in n.inputs.items()}
            guard = Ref(new) if n.guard is not None and n.guard.node == old else n.guard
            self.nodes[c] = n.evolve(inputs=inputs, guard=guard)
            self.edges.discard((old, c))
            self.edges.add((new, c))
        self.outputs = [new if o == old else o for o in self.outputs]

    def freeze(self) -> Graph:
        g = Graph(dict(self.nodes), frozenset(self.edges), tuple(self.outputs), self.name)
        g.validate()
        return g
