"""Cost-model-guided pass application: apply a pass only where the cost model says it pays.

Teola's passes are rules that rewrite every graph they match; each is meant to shorten the
critical path, but under load one may lengthen it (a prompt split whose partial prefill finds no
idle engine time adds its tokens to a pass that other work waits for). The optimiser should then
not apply it. :func:`choose_passes` decides which passes to apply by backward elimination on a
cost: starting from every pass, it drops the pass whose removal lowers the cost most, as long as
that lowers it by more than ``min_gain`` (relative), and never returns a set costlier than no pass
at all. The cost is whatever the deployment can evaluate ahead of time; ``teola_apps`` uses the
discrete-event simulation of the app on its engines' profiles at the deployment's request rate,
on a calibration workload drawn with a seed of its own (never the evaluated queries).
"""
from __future__ import annotations

from typing import Callable, Sequence

from orchestrator.schemes import ALL


def choose_passes(cost: Callable[[tuple[str, ...]], float], passes: Sequence[str] = ALL, *,
                  min_gain: float = 0.005) -> tuple[str, ...]:
    """The passes to apply (in ``passes`` order): backward elimination on ``cost(subset)``, lower
    is better (module docstring). ``cost`` is called at most once per subset."""
    if not 0 <= min_gain < 1:
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain}")
    memo: dict[tuple[str, ...], float] = {}

    def c(s: tuple[str, ...]) -> float:
        if s not in memo:
            memo[s] = float(cost(s))
        return memo[s]

    cur = tuple(passes)
    while cur:
        drops = [tuple(q for q in cur if q != p) for p in cur]
        best = min(drops, key=c)
        if c(best) >= c(cur) * (1 - min_gain):
            break
        cur = best
    return cur if c(cur) <= c(()) else ()
