"""The one place joint selectors (spec section 11) are registered by name, beside the
single-task registry (``solvers/registry.py``); imported lazily like it."""
from __future__ import annotations

from solvers.joint_base import JointSelector
from solvers.registry import _build, instantiate

_ENTRIES: list[tuple[str, str]] = [
    ("sequential", "solvers.joint_sequential:SequentialJoint"),
    ("exhaustive", "solvers.joint_exhaustive:ExhaustiveJoint"),
    ("milp", "solvers.joint_milp:MilpJoint"),
    ("local", "solvers.joint_local:LocalJoint"),
]

REGISTRY: dict[str, str] = _build(_ENTRIES)


def names() -> list[str]:
    """Registered joint selector names, in registration order."""
    return list(REGISTRY)


def get_joint_solver(name: str, **kwargs) -> JointSelector:
    """Instantiate the joint selector registered as ``name``; unknown names list the known ones."""
    return instantiate(REGISTRY, name, "joint solver", **kwargs)
