"""Teola-style orchestrator: primitive dataflow graphs, rule-based passes, two-tier scheduling.

Never imports harness/, solvers/ or experiments/; engines are objects handed in. Names below are
resolved lazily (PEP 562), so importing one submodule (the engine core, say) loads nothing else.
"""
from __future__ import annotations

from flowmaker.lazy import lazy_exports

_EXPORTS = {
    "AppSpec": "apps", "known_apps": "apps", "load_app": "apps", "build_pgraph": "construct", "Graph": "graph",
    "ALL_PASSES": "passes", "GraphCache": "passes", "PassContext": "passes", "optimize": "passes",
    "passes_named": "passes", "Kind": "primitives", "Lit": "primitives", "Node": "primitives", "Ref": "primitives",
    "RequestResult": "runtime.sim", "make_payload": "runtime.api", "simulate": "runtime.api",
    "BASELINES": "schemes", "SCHEMES": "schemes", "Scheme": "schemes", "get_scheme": "schemes",
    "Component": "template", "QueryConfig": "template", "Template": "template",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
