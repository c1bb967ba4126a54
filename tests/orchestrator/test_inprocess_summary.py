"""experiments/scripts/inprocess_sharing.py's ``summarize``: the per-victim in-process costs that
teola_real_cpu_sim's ``cpu_same_process`` and ``cpu_same_process_decode`` are read from."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from experiments.scripts.inprocess_sharing import per_victim

LOG = """load average before: (0.5, 1.1, 1.2); cores: 2
embed 8          beside decode 16        alone  : wall   72.1 ms [64.7-79.3] (1.00x alone)  cpu   70.8 ms (1.00x)  n=48
embed 8          beside decode 16        thread : wall   90.0 ms [85.6-95.9] (1.24x alone)  cpu   79.5 ms (1.12x)  n=48
embed 8          beside decode 16        process: wall   75.0 ms [66.1-82.2] (1.04x alone)  cpu   73.3 ms (1.04x)  n=48
decode 16        beside embed 8          thread : wall   30.0 ms [28.1-36.1] (1.47x alone)  cpu   27.1 ms (1.26x)  n=48
decode 16        beside embed 8          process: wall   20.0 ms [21.7-25.9] (1.10x alone)  cpu   23.4 ms (1.09x)  n=48
decode 16        beside embed 8 + partial prefills thread : wall   60.0 ms [45.5-93.9] (3.82x alone)  cpu   33.5 ms (1.86x)  n=48
decode 16        beside embed 8 + partial prefills process: wall   40.0 ms [25.5-52.9] (2.17x alone)  cpu   23.7 ms (1.32x)  n=48
embed 8          beside embed 8          thread : wall   50.0 ms [79.3-105.6] (1.15x alone)  cpu   79.7 ms (1.07x)  n=48
"""


def test_costs_per_other_execution_by_victim_group(tmp_path: Path):
    log = tmp_path / "a.log"
    log.write_text(LOG)
    got = per_victim([str(log)])
    # pairs: thread / process - 1; the triple: (60 / 40 - 1) / 2; a thread line without its process line: skipped
    assert sorted(got["decode"]) == pytest.approx([0.25, 0.5])
    assert got["other"] == pytest.approx([0.2])
    assert statistics.median(got["decode"]) == pytest.approx(0.375)


def test_the_committed_logs_give_the_simulation_s_constants():
    logs = sorted(str(p) for p in Path("results/bench_nonllm").glob("inprocess_sharing_*.log"))
    got = per_victim(logs)
    assert round(statistics.median(got["decode"]), 2) == 0.33 and round(statistics.median(got["other"]), 3) == 0.155
