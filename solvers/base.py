"""The one interface every selector implements."""
from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, ClassVar

from selector.evaluate import infeasible_plan
from selector.index import Compiled
from selector.plan import Plan
from selector.problem import Problem


def check_time_limit(time_limit_s: Any) -> float:
    """``time_limit_s`` as a float if it is a finite number of seconds above 0, else ValueError.

    NaN compares false with everything, so a deadline ``t0 + nan`` is never reached and a search
    would run unbounded; an infinite limit is the same promise made openly. Both are refused."""
    if isinstance(time_limit_s, bool):
        raise ValueError(f"time limit must be a number of seconds, not {time_limit_s!r}")
    try:
        value = float(time_limit_s)
    except (TypeError, ValueError):
        raise ValueError(f"time limit must be a number of seconds, not {time_limit_s!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"time limit must be finite and > 0 seconds, not {time_limit_s!r}")
    return value


class Selector(ABC):
    """Chooses a workflow variant for one problem.

    ``select`` never raises on an infeasible problem: it returns a plan with status
    ``infeasible`` and a reason. It honours ``time_limit_s`` (wall seconds): an exact solver
    stopped by it returns its best variant so far with status ``feasible``, and any solver
    stopped by it before finding a feasible variant answers ``unknown`` (spec section 6).
    Every subclass's ``select`` is wrapped so that a NaN, infinite or non-positive
    ``time_limit_s`` raises ValueError before the search starts (:func:`check_time_limit`).
    """

    name: ClassVar[str]
    #: True when the selector returns the unique optimum of spec section 5 (status ``optimal``)
    exact: ClassVar[bool] = False
    #: modules the search imports (a MILP backend, optuna): :meth:`prepare` imports them
    backend_modules: ClassVar[tuple[str, ...]] = ()

    def prepare(self) -> None:
        """Import the backend now, so that its first import (1-3 s for OR-Tools on a busy machine)
        is not counted inside a later ``select``'s time limit (issue 28)."""
        import importlib
        for mod in self.backend_modules:
            importlib.import_module(mod)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        impl = cls.__dict__.get("select")
        if impl is None or getattr(impl, "_checks_time_limit", False):
            return

        @functools.wraps(impl)
        def select(self: Selector, problem: Problem, *args: Any, **kw: Any) -> Plan:
            if "time_limit_s" in kw:
                kw["time_limit_s"] = check_time_limit(kw["time_limit_s"])
            return impl(self, problem, *args, **kw)

        select._checks_time_limit = True  # type: ignore[attr-defined]
        cls.select = select  # type: ignore[method-assign]

    @abstractmethod
    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        """Return the plan for ``problem``."""


def unknown_plan(cp: Compiled, *, solver: str, reason: str, elapsed_s: float, evaluated: int) -> Plan:
    """Spec section 6's ``unknown``: stopped (time limit, or a heuristic giving up) before any
    feasible variant was found and without a proof that none exists; the fields of an
    infeasible answer, with ``reason`` saying what stopped the search."""
    plan = infeasible_plan(cp, solver=solver, reason=reason, elapsed_s=elapsed_s, evaluated=evaluated)
    return replace(plan, status="unknown")


def time_limit_arg(text: str) -> float:
    """``argparse`` ``type=`` for a ``--time-limit`` option: :func:`check_time_limit`, its message
    reported by argparse as a usage error (one line, exit status 2)."""
    import argparse
    try:
        return check_time_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
