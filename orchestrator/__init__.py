"""Teola-style orchestrator: primitive dataflow graphs, rule-based passes, two-tier scheduling.

Never imports harness/, solvers/ or experiments/; engines are objects handed in.
"""
from orchestrator.apps import AppSpec, known_apps, load_app
from orchestrator.construct import build_pgraph
from orchestrator.graph import Graph
from orchestrator.passes import (ALL_PASSES, GraphCache, PassContext, optimize, passes_named)
from orchestrator.primitives import Kind, Lit, Node, Ref
from orchestrator.runtime import RequestResult, make_payload, simulate
from orchestrator.schemes import BASELINES, SCHEMES, Scheme, get_scheme
from orchestrator.template import Component, QueryConfig, Template

__all__ = ["AppSpec", "known_apps", "load_app", "build_pgraph", "Graph", "ALL_PASSES", "GraphCache",
           "PassContext", "optimize", "passes_named", "Kind", "Lit", "Node", "Ref", "RequestResult",
           "make_payload", "simulate", "BASELINES", "SCHEMES", "Scheme", "get_scheme", "Component",
           "QueryConfig", "Template"]
