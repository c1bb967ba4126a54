"""Routing policies: which of several instances serves the next call."""
from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engines.llm_core import LLMCore as Instance
from orchestrator.engines.llm_core import Seq as Call

ROUTERS = ("round-robin", "least-outstanding")


class RoundRobin:
    """Instances in turn, in the order given."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def pick(self, instances: Sequence[Instance], call: Call) -> Instance:
        inst = instances[self._next % len(instances)]
        self._next += 1
        return inst


class LeastOutstanding:
    """The instance with the fewest queued plus running calls; ties: the first listed."""

    name = "least-outstanding"

    def pick(self, instances: Sequence[Instance], call: Call) -> Instance:
        if len(instances) == 1:
            return instances[0]
        return min(instances, key=_outstanding)


def _outstanding(inst: Instance) -> int:
    return inst.outstanding


def make_router(name: str) -> RoundRobin | LeastOutstanding:
    if name == "round-robin":
        return RoundRobin()
    if name == "least-outstanding":
        return LeastOutstanding()
    raise KeyError(f"unknown router '{name}'; known: {', '.join(ROUTERS)}")
