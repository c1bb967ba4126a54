"""The paper report's deployment sequence with a task that was not placed (issue 25 item 1): a
missing deployment is None under pandas 2 and NaN under pandas 3 (the report crashed there)."""
import json

import pandas as pd

from experiments.kinds._paper_report import sequence_table


def test_a_task_not_placed_reads_not_placed_whatever_pandas_stores() -> None:
    dep = json.dumps({"instances": [{"model": "llama-3.1-8b", "tp": 1, "pp": 1}], "reuse": []})
    deps = pd.DataFrame({"selector": ["flowmaker"] * 2, "plan_load_pct": [100.0] * 2,
                         "task": ["chat", "code"], "deployment": pd.Series([dep, None], dtype="string")})
    assert deps.deployment.isna().iloc[1]
    (row,) = sequence_table(deps)[2:]
    assert "chat: llama-3.1-8b TP1" in row and "code: not placed" in row
