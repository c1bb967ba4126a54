"""One look per selector in every figure: a fixed colour, marker and line style, so a series is
recognisable across plots and distinguishable where curves overlap (the exact solvers often lie
on top of each other at the optimum)."""
from __future__ import annotations

#: name -> (colour, marker, line style); the exact solvers share blues/purples with distinct
#: markers and dashes, heuristics warm colours, baselines greys/greens
STYLES = {
    "exhaustive": ("#1f77b4", "o", "-"),
    "milp": ("#17becf", "s", "--"),
    "milp-pulp": ("#9467bd", "D", ":"),
    "flowmaker": ("#ff7f0e", "^", "-"),
    "flowmaker-plus": ("#d62728", "v", "-."),
    "flowmaker-noreuse": ("#e377c2", "<", ":"),
    "bayesian": ("#8c564b", "P", "--"),
    "langchain": ("#2ca02c", "X", "-"),
    "routellm": ("#7f7f7f", "*", "--"),
    "murakkab": ("#bcbd22", "h", "-."),
}
_FALLBACK = ["o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">"]


def style_for(name: str, index: int = 0, *, optimum: bool = False) -> dict:
    """Matplotlib ``plot`` keywords for selector ``name`` (``index`` picks a look for an unknown
    name); ``optimum`` draws the reference curve thicker and underneath."""
    colour, marker, ls = STYLES.get(name, (f"C{index % 10}", _FALLBACK[index % len(_FALLBACK)], "-"))
    kw = {"color": colour, "marker": marker, "ls": ls, "ms": 6, "lw": 1.4, "mfc": "none" if index % 2 else colour}
    if optimum:
        kw.update(lw=3.5, alpha=0.35, ms=9, zorder=1, mfc=colour)
    return kw


def tie_marks(kw: dict, index: int, count: int) -> dict:
    """``kw`` (:func:`style_for`'s) for series ``index`` of ``count`` drawn at its true values:
    hollow markers, the earlier series larger and underneath, so series equal at a point show as
    concentric rings there instead of being moved off their values."""
    return {**kw, "ms": 4 + 2.2 * (count - 1 - index), "mfc": "none", "mew": 1.3, "zorder": 2 + index}


def dodge(values, index: int, count: int, *, log: bool, spread: float = 0.06):
    """``values`` shifted a little per series (``index`` of ``count``) so that equal points of
    several series stay visible side by side: all series together span ``spread``, a factor on a
    log axis (0.12: 12%), data units on a linear one."""
    import numpy as np
    v = np.asarray(values, dtype=float)
    off = (index - (count - 1) / 2) * spread / max(1, count - 1)
    return v * (1 + off) if log else v + off
