"""The one interface every selector implements."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from selector.plan import Plan
from selector.problem import Problem


class Selector(ABC):
    """Chooses a workflow variant for one problem.

    ``select`` never raises on an infeasible problem: it returns a plan with status
    ``infeasible`` and a reason. It honours ``time_limit_s`` (wall seconds): an exact solver
    stopped by it returns its best variant so far with status ``feasible``.
    """

    name: ClassVar[str]
    #: True when the selector returns the unique optimum of spec section 5 (status ``optimal``)
    exact: ClassVar[bool] = False

    @abstractmethod
    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        """Return the plan for ``problem``."""
