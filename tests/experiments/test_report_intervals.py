"""A share's interval stays within what a share can be (issue 27 item 5): three seeds of goodput
0.1 / 0.5 / 0.94 give a t interval of about +-1.05, printed clipped to [0, 1]."""
from __future__ import annotations

import pandas as pd

from experiments.kinds._paper_report import by_load_table, ci95, fmt


def test_goodput_intervals_are_clipped_to_zero_and_one():
    m, h = ci95([0.1, 0.5, 0.94])
    assert m - h < 0 and m + h > 1                       # the raw t interval leaves [0, 1]
    assert fmt(m, h, 3, bounds=(0.0, 1.0)) == f"{m:.3f} [0.000, 1.000]"
    assert fmt(m, h, 3) == f"{m:.3f} [{m - h:.3f}, {m + h:.3f}]"     # a ratio keeps its interval
    df = pd.DataFrame({"selector": "flowmaker", "trace": "code", "load_pct": 100, "seed": [0, 1, 2],
                       "goodput": [0.1, 0.5, 0.94]})
    row = by_load_table(df, "goodput")[2]
    assert "[0.000, 1.000]" in row and "-0." not in row
