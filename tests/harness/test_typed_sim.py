"""Each instance is simulated on its own GPU type (issue 24 item 4): a plan on a mixed fleet runs its
H100 instance with the H100's step times and its A6000 instance with the A6000's, whatever GPU the
simulator was built for, and an untyped instance takes that GPU."""
from __future__ import annotations

import numpy as np

from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from selector.deployment import InstanceSpec, Route


def _latency(gpu_type: str, sim_gpu: str) -> float:
    inst = InstanceSpec("m/0", "llama-3.1-8b", 1, 1, (0,), 30.0, 0.0, gpu_type)
    stage = SimStage("s", 1, 1, 1, (Route(("m/0",), 1.0),))
    sim = ClusterSim(gpu=sim_gpu, instances=[inst], tasks=[SimTask("t", 1e9, (stage,))])
    res = sim.run(Workload(np.array([0.0]), np.zeros(1, dtype=np.int64), np.array([1000.0]), np.array([100.0]),
                           np.zeros(1)))
    return float(res["done_s"][0])


def test_an_instance_runs_on_its_own_gpu_type():
    h100, a6000 = _latency("h100-sxm", "a6000"), _latency("a6000", "h100-sxm")
    assert h100 < 0.7 * a6000                                    # 3350 vs 768 GB/s of decode bandwidth
    assert _latency("gpu", "h100-sxm") == h100                  # untyped: the simulator's GPU
    assert _latency("gpu", "a6000") == a6000
