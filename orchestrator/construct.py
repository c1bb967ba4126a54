"""Algorithm 1: expand a template into one query's primitive graph (the p-graph)."""
from __future__ import annotations

import re

from orchestrator.components import Export, get_expander
from orchestrator.graph import Graph, GraphEditor
from orchestrator.primitives import Kind, Node, Ref
from orchestrator.template import Template, QueryConfig

_USE = re.compile(r"^(?P<src>[A-Za-z0-9_]+)\.(?P<exp>[A-Za-z0-9_]+)(\[(?P<idx>\d+)\])?$")
INPUT_FIELDS = ("question", "chunks")


def input_node_id(field: str) -> str:
    return f"in:{field}"


def build_pgraph(template: Template, cfg: QueryConfig) -> Graph:
    """The unoptimised graph: each component expanded by its configuration, every tail of a
    component connected to every head of the next (conservative template order)."""
    ed = GraphEditor({}, set(), [], name=template.name)
    exports: dict[str, Export] = {}

    def lookup(spec: str) -> Export:
        m = _USE.match(spec)
        if not m:
            raise ValueError(f"bad use spec {spec!r}; expected 'component.export' or 'input.field'")
        src, exp, idx = m["src"], m["exp"], m["idx"]
        if src == "input":
            if exp not in INPUT_FIELDS:
                raise KeyError(f"unknown input field {exp!r}; known: {', '.join(INPUT_FIELDS)}")
            nid = input_node_id(exp)
            if nid not in ed.nodes:
                n = cfg.n_chunks if exp == "chunks" else 1
                if exp == "chunks" and n == 0:
                    raise ValueError(f"template {template.name!r} indexes a document but doc_tokens=0")
                tokens = cfg.chunk_size_tokens if exp == "chunks" else cfg.question_tokens   # per item
                ed.add(Node(nid, Kind.INPUT, "input", None, {}, {"field": exp, "tokens": tokens}, n_items=n))
            e = Export(Ref(nid), cfg.n_chunks if exp == "chunks" else None)
        else:
            key = f"{src}.{exp}"
            if key not in exports:
                raise KeyError(f"{spec!r}: no such export yet; known: {', '.join(sorted(exports))}")
            e = exports[key]
        if idx is not None:
            return Export(e.ref.at(int(idx)), e.inner)
        return e

    prev_tails: list[str] = []
    for comp in template.components:
        def use(port: str, _c=comp) -> Export:
            if port not in _c.uses:
                raise KeyError(f"component {_c.name!r} has no input {port!r}; uses: {dict(_c.uses)}")
            return lookup(_c.uses[port])
        exp = get_expander(comp.op)(comp, cfg, use)
        ids = {n.id for n in exp.nodes}
        for n in exp.nodes:
            ed.add(n)
        heads = [n.id for n in exp.nodes if not (n.sources() & ids)]
        consumed = {s for n in exp.nodes for s in n.sources()}
        tails = [n.id for n in exp.nodes if n.id not in consumed]
        for t in prev_tails:
            for h in heads:
                ed.edges.add((t, h))
        prev_tails = tails
        for k, v in exp.exports.items():
            exports[f"{comp.name}.{k}"] = v
    outs = template.outputs or (f"{template.components[-1].name}."
                                f"{next(iter(exp.exports))}",)
    for o in outs:
        ref = exports[o].ref
        if ref.transform or ref.index is not None or ref.lo is not None:
            raise ValueError(f"output {o!r} must be a whole node output")
        ed.outputs.append(ref.node)
    return ed.freeze()
