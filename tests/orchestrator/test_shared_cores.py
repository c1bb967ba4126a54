"""Engines sharing CPU cores (``SharedCores``, ``share_cores``): processor sharing of simulated
engines, non-LLM batches and LLM iterations alike."""
from __future__ import annotations

import pytest

from orchestrator import load_app, simulate
from orchestrator.engines import Invocation, LinearProfile, SimEngine, share_cores
from orchestrator.engines.llm_timing import GpuSlot, SharedCores
from orchestrator.primitives import Kind


def _embedder(name: str) -> SimEngine:
    return SimEngine(name=name, kind="embedding", profiles={Kind.EMBEDDING: LinearProfile(100.0)})


def _embed(key: str) -> Invocation:
    return Invocation(key, Kind.EMBEDDING, {"texts": ["a b c"]})


def test_factor_is_executions_per_core_and_never_below_one():
    cpu, two = GpuSlot(0), SharedCores(2)
    factors = []
    for k in range(1, 6):
        cpu.busy = k
        factors.append(two.factor((cpu,)))
    assert factors == [1.0, 1.0, 1.5, 2.0, 2.5]
    cpu.busy = 1
    assert SharedCores(2, background=3).factor((cpu,)) == 2.0      # (1 + 3) / 2
    assert SharedCores(2, background=3).slows_alone and not two.slows_alone
    with pytest.raises(ValueError, match="cores"):
        SharedCores(0)
    with pytest.raises(ValueError, match="background"):
        SharedCores(2, background=-1)


def test_a_batch_starting_beside_others_is_slowed_until_they_end():
    a, b = _embedder("a"), _embedder("b")
    cpu, one = GpuSlot(0), SharedCores(1)
    a.share_cpu(cpu, one)
    b.share_cpu(cpu, one)
    alone = a.submit([_embed("1")]).result().duration_s
    beside = b.submit([_embed("2")]).result().duration_s     # a's batch still holds the core
    assert cpu.busy == 2 and beside == pytest.approx(2 * alone)
    a.release_cpu()
    b.release_cpu()
    assert cpu.busy == 0
    assert a.submit([_embed("3")]).result().duration_s == pytest.approx(alone)


def _latencies(cores: int | None, n: int = 4, background: float = 0.0) -> list[float]:
    app = load_app("advanced_rag")
    eng = app.build_engines()
    if cores is not None:
        share_cores(eng, cores, background)
    res = simulate(app.template(), [app.query] * n, [0.0] * n, eng, scheme="teola", seed=0)
    return [r.latency_s for r in res]


def test_enough_cores_change_nothing_and_fewer_slow_queries_down():
    own = _latencies(None)
    assert _latencies(10_000) == own                   # never more than k <= cores executions at once
    one, two = _latencies(1), _latencies(2)
    assert all(x >= y - 1e-12 for x, y in zip(two, own))
    assert all(x >= y - 1e-12 for x, y in zip(one, two))
    assert sum(one) > sum(two) > sum(own)              # 4 simultaneous queries contend for the cores
    assert _latencies(1) == one                        # deterministic


def test_background_tasks_slow_even_an_execution_alone():
    own, busy = _latencies(None, n=1), _latencies(1, n=1, background=1.0)
    assert busy[0] >= 2 * own[0] - 1e-9        # every execution at half speed or less, LLM iterations too


def test_a_real_engine_cannot_share_simulated_cores():
    class Real:
        pass
    with pytest.raises(ValueError, match="engine 'llm'"):
        share_cores({"llm": [Real()]}, 2)


def test_teola_apps_background_needs_cores():
    from experiments.kinds.teola_apps import Params
    with pytest.raises(ValueError, match="cpu_background"):
        Params(apps=("naive_rag",), cpu_background=1.0)
    assert Params(apps=("naive_rag",), cpu_cores=2, cpu_background=1.0).cpu_background == 1.0
