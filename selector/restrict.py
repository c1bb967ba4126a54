"""Sub-spaces of a workflow: the same stages with a subset of each stage's options.

Heuristics search restricted spaces with the exact machinery (``selector.space`` and
``selector.search``) and map the answers back to the full problem's option indices.
"""
from __future__ import annotations

from collections.abc import Sequence

from selector.index import StageOptions, WorkflowOptions


def restrict(wf: WorkflowOptions, allowed: Sequence[Sequence[int]]) -> WorkflowOptions:
    """``wf`` keeping, per stage, only the option indices in ``allowed[s]`` (ascending)."""
    stages = tuple(StageOptions(st.name, st.calls, st.load_rps, tuple(st.options[i] for i in keep))
                   for st, keep in zip(wf.stages, allowed, strict=True))
    return WorkflowOptions(wf.index, wf.name, stages)


def unrestrict(choice: Sequence[int], allowed: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Map a choice in a restricted space back to the full workflow's option indices."""
    return tuple(allowed[s][c] for s, c in enumerate(choice))
