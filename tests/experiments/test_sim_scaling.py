"""The simulator-scaling experiment (issue 22 item 7): one row per fleet size, tasks and load in
proportion to the fleet, and sizes that are not whole 8-GPU task copies refused."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from experiments.kinds.sim_scaling import Params, run_size, summary_md


def test_a_fleet_twice_as_large_serves_twice_the_tasks_and_about_twice_the_requests():
    p = Params(sizes_gpus=[8, 16], duration_s=20.0)
    small, large = run_size(p, 8, seed=0), run_size(p, 16, seed=0)
    assert (small["gpus"], small["tasks"], large["tasks"]) == (8, 1, 2)
    assert small["completed"] == small["requests"] > 50
    assert 1.5 < large["requests"] / small["requests"] < 2.5
    assert large["events"] > small["events"] > 0 and small["events_per_s"] > 0
    assert small["peak_rss_mb"] >= small["base_rss_mb"] > 0
    import pandas as pd
    text = summary_md(pd.DataFrame([small, large]), p)
    assert "| 16 | 2 |" in text and "From 8 to 16 GPUs (2x)" in text


def test_fleet_sizes_must_be_whole_task_copies():
    with pytest.raises(ValidationError, match="multiples of 8"):
        Params(sizes_gpus=[8, 12])
