"""Issue 4: the cluster simulator against closed forms, conservation, determinism, colocation."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from harness.workload import cell_workload, load_stats, synthetic_trace
from selector.deployment import InstanceSpec, Route
from tests.harness.helpers import ConstStep, LinearStep, make_trace


def _one_instance_sim(step, *, max_batch=1, gpus=((0,),), stages=None, tasks=None):
    from profiler.engine import EngineConfig
    insts = [InstanceSpec(f"i{k}", "m", 1, 1, g, 10.0) for k, g in enumerate(gpus)]
    if tasks is None:
        stages = stages or (SimStage("s", 1, 100, 1, _on("i0")),)
        tasks = [SimTask("t", 1e9, stages)]
    return ClusterSim(gpu="a6000", instances=insts, tasks=tasks, step_override=step,
                      engine=EngineConfig(max_num_seqs=max_batch))


def _on(*ids: str) -> tuple[Route, ...]:
    return (Route(ids),)


def _workload(arrivals, task=None, seed=0, ps=1.0, os=1.0):
    n = len(arrivals)
    return Workload(np.asarray(arrivals, dtype=float),
                    np.zeros(n, dtype=np.int64) if task is None else np.asarray(task, dtype=np.int64),
                    np.full(n, ps), np.full(n, os), np.random.default_rng(seed).uniform(size=n))


def test_dd1_utilisation_and_no_waiting():
    d, gap, n = 0.2, 0.5, 2000          # rho = 0.4
    sim = _one_instance_sim(ConstStep(d))
    res = sim.run(_workload(np.arange(n) * gap))
    lat = res["done_s"] - np.arange(n) * gap
    assert np.allclose(lat, d)                         # nobody waits
    inst = sim.instances["i0"]
    assert inst.busy_s / sim.makespan_s == pytest.approx(d / gap, rel=1e-3)


def test_md1_waiting_time_matches_pollaczek_khinchine():
    d, rho, n = 0.1, 0.7, 40000
    rng = np.random.default_rng(1)
    arr = np.cumsum(rng.exponential(d / rho, n))
    sim = _one_instance_sim(ConstStep(d))
    res = sim.run(_workload(arr))
    wq = float(np.mean(res["done_s"] - arr)) - d
    expect = rho * d / (2 * (1 - rho))               # M/D/1 mean wait
    assert wq == pytest.approx(expect, rel=0.07)
    util = sim.instances["i0"].busy_s / sim.makespan_s
    assert util == pytest.approx(rho, rel=0.03)


def test_conservation_every_request_arrives_once_and_ends_once():
    rng = np.random.default_rng(3)
    n = 500
    stages_a = (SimStage("a", 2, 300, 20, _on("i0", "i1")), SimStage("b", 1, 200, 40, _on("i1")))
    # RouteLLM-style: the easiest half of the requests take the weak (below-SLO) route
    stages_b = (SimStage("c", 1, 400, 30, (Route(("i1",), 0.5), Route(("i0",), 0.5)), (False, True)),)
    tasks = [SimTask("A", 5.0, stages_a), SimTask("B", 5.0, stages_b),
             SimTask("C", 5.0, (), placed=False)]
    sim = _one_instance_sim(LinearStep(), max_batch=16, gpus=((0,), (1,)), tasks=tasks)
    task = rng.choice(3, size=n, p=[0.5, 0.4, 0.1])
    ps = rng.uniform(0.1, 3.0, n)
    ps[5] = 1000.0    # one call can never fit the cache: its request fails
    w = Workload(np.sort(rng.uniform(0, 50, n)), task, ps, rng.uniform(0.1, 3.0, n), rng.uniform(size=n))
    res = sim.run(w)
    done = ~np.isnan(res["done_s"])
    assert np.all(done ^ res["failed"])                # each request exactly one of the two
    assert res["failed"][task == 2].all() and res["failed"][5]
    calls = sum(i.completed + i.rejected for i in sim.instances.values())
    expected_calls = 0
    for k in range(n):
        if task[k] == 0:
            expected_calls += 3 if done[k] else 0
        elif task[k] == 1:
            expected_calls += 1
    assert calls >= expected_calls and all(i.outstanding == 0 for i in sim.instances.values())
    for i in sim.instances.values():
        i.check()
    # RouteLLM-style routing: requests below the weak route's share went to the weak (below-SLO) model
    b = (task == 1) & done
    assert np.array_equal(res["acc_ok"][b], w.difficulty[b] >= 0.5)


def test_deterministic_under_a_seed():
    tr = synthetic_trace("conv", seed=5)
    w1 = cell_workload(tr, [1.0, 2.0], load=0.5, n_requests=300, seed=7)
    w2 = cell_workload(tr, [1.0, 2.0], load=0.5, n_requests=300, seed=7)
    for a, b in zip(w1.__dict__.values(), w2.__dict__.values()):
        assert np.array_equal(a, b)
    tasks = [SimTask("A", 5.0, (SimStage("a", 1, 500, 50, _on("i0", "i1")),)),
             SimTask("B", 9.0, (SimStage("b", 2, 300, 30, _on("i1")),))]
    runs = [_one_instance_sim(LinearStep(), max_batch=8, gpus=((0,), (0,)), tasks=tasks).run(w1) for _ in range(2)]
    assert np.array_equal(runs[0]["done_s"], runs[1]["done_s"], equal_nan=True)


def test_colocated_instances_slow_each_other_down():
    tasks = [SimTask("A", 1e9, (SimStage("a", 1, 100, 50, _on("i0")),)),
             SimTask("B", 1e9, (SimStage("b", 1, 100, 50, _on("i1")),))]
    w = _workload([0.0, 0.0], task=[0, 1])
    apart = _one_instance_sim(ConstStep(0.01), gpus=((0,), (1,)), tasks=tasks).run(w)["done_s"]
    shared = _one_instance_sim(ConstStep(0.01), gpus=((0,), (0,)), tasks=tasks).run(w)["done_s"]
    assert np.all(shared > 1.8 * apart)


def test_cell_workload_load_levels_and_token_scaling():
    tr = make_trace(np.arange(100) * 0.5, np.arange(1, 101) * 10, 20)
    w100 = cell_workload(tr, [1.0, 1.0], load=1.0, n_requests=50)
    w25 = cell_workload(tr, [1.0, 1.0], load=0.25, n_requests=50)
    # mean total rate = load * sum(rates)
    assert 50 / (w100.arrival_s[-1] * 50 / 49) == pytest.approx(2.0)
    assert w25.arrival_s[-1] == pytest.approx(4 * w100.arrival_s[-1])
    assert w100.prompt_scale[0] == pytest.approx(10 / tr.prompt_tokens.mean())
    assert np.all(np.diff(w100.difficulty[np.argsort(tr.prompt_tokens[:50])]) > 0)


def test_synthetic_trace_keeps_the_statistics():
    st = load_stats()
    for kind in ("code", "conv"):
        tr = synthetic_trace(kind, seed=0)
        assert len(tr) == pytest.approx(st[kind]["requests"], rel=0.05)
        assert tr.prompt_tokens.mean() == pytest.approx(st[kind]["prompt_tokens_mean"], rel=0.1)
        assert tr.output_tokens.mean() == pytest.approx(st[kind]["output_tokens_mean"], rel=0.1)
