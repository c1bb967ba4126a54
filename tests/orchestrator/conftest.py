from __future__ import annotations

from orchestrator.graph import Graph, GraphEditor
from orchestrator.primitives import Node


def make_graph(nodes: list[Node], *, extra_edges: tuple = (), outputs: tuple[str, ...] = ()) -> Graph:
    """A graph whose edges are the data dependencies plus ``extra_edges``."""
    ed = GraphEditor({}, set(), [], name="hand")
    for n in nodes:
        ed.add(n)
    ed.edges |= set(extra_edges)
    ed.outputs = list(outputs or [nodes[-1].id])
    return ed.freeze()
