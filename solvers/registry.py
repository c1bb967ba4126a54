"""The one place selectors are registered by name.

Entries are ``name -> "module:Class"`` and are imported lazily, so ``import solvers`` stays
fast and optional dependencies (ortools, optuna) load only when their solver is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from solvers.base import Selector

_ENTRIES: list[tuple[str, str]] = [
    ("exhaustive", "solvers.exhaustive:ExhaustiveSelector"),
    ("flowmaker", "solvers.flowmaker:FlowMakerSelector"),
    ("flowmaker-plus", "solvers.flowmaker_plus:FlowMakerPlusSelector"),
    ("milp", "solvers.milp:MilpSelector"),
    ("milp-pulp", "solvers.milp_pulp:MilpPulpSelector"),
    ("bayesian", "solvers.bayesian:BayesianSelector"),
    ("langchain", "solvers.baselines.langchain:LangChainSelector"),
    ("routellm", "solvers.baselines.routellm:RouteLLMSelector"),
    ("murakkab", "solvers.baselines.murakkab:MurakkabSelector"),
    ("flowmaker-noreuse", "solvers.baselines.noreuse:FlowMakerNoReuseSelector"),
]


def _build(entries: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, target in entries:
        if name in out:
            raise ValueError(f"duplicate solver name '{name}' in solvers/registry.py")
        out[name] = target
    return out


REGISTRY: dict[str, str] = _build(_ENTRIES)


def names() -> list[str]:
    """Registered selector names, in registration order."""
    return list(REGISTRY)


def get_solver(name: str, **kwargs) -> Selector:
    """Instantiate the selector registered as ``name``; unknown names list the known ones."""
    return instantiate(REGISTRY, name, "solver", **kwargs)


def instantiate(registry: dict[str, str], name: str, kind: str, **kwargs: Any) -> Any:
    """Instantiate the ``module:Class`` that ``registry`` holds as ``name`` (importing its module
    now); an unknown name is a KeyError listing the known ones, a class whose ``name`` differs a
    ValueError (``kind``, e.g. ``joint solver``, names the registry in both)."""
    if name not in registry:
        raise KeyError(f"unknown {kind} '{name}'; known: {', '.join(registry)}")
    module, cls = registry[name].split(":")
    selector = getattr(importlib.import_module(module), cls)(**kwargs)
    if selector.name != name:
        raise ValueError(f"{kind} registered as '{name}' calls itself '{selector.name}'")
    return selector
