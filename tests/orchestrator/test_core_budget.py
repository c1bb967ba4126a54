"""On a few shared CPU cores an idle instance is not free: a partial prefill (background work)
starts only on an idle instance while fewer instances are busy than there are cores, never joins a
regular pass there, and never before every engine has placed its regular work; outputs are those
of the unshared run."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator import load_app, simulate
from orchestrator.batching import Blind, TopologyAware
from orchestrator.engines.factory import share_cores
from orchestrator.primitives import Kind
from orchestrator.runtime.engine_scheduler import CoreBudget, EngineScheduler
from orchestrator.runtime.realtime import run_realtime
from tests.orchestrator.test_placement import _BatchLLM, _engines, _pend


class _BatchOther(_BatchLLM):
    """A batch-at-a-time non-LLM instance (an embedder) sharing the cores."""
    kind = "embedding"


def _llm_and_embedder(cores: int) -> tuple[EngineScheduler, EngineScheduler]:
    llm = EngineScheduler(name="llm", instances=[_BatchLLM("a"), _BatchLLM("b")], policy=TopologyAware(),
                          max_batch=8)
    emb = EngineScheduler(name="embed", instances=[_BatchOther("e")], policy=Blind(), max_batch=8)
    CoreBudget(cores, [llm, emb])
    return llm, emb


def test_partials_wait_while_every_core_is_busy_and_start_when_one_frees():
    llm, emb = _llm_and_embedder(2)
    emb.enqueue(_pend(Kind.EMBEDDING, "index"))
    assert len(emb.dispatch(0.0)) == 1                          # one core busy
    for k in range(3):
        llm.enqueue(_pend(Kind.PARTIAL_PREFILLING, f"part{k}", qid=0))
    llm.enqueue(_pend(Kind.PREFILLING, "expansion", qid=0))
    launches = llm.dispatch(0.0)
    assert [[p.payload.key for p in la.batch] for la in launches] == [["expansion"]]   # the second core
    assert sorted(p.payload.key for p in llm.pending) == ["part0", "part1", "part2"]
    emb.free(0, 1)                                               # the index batch ends: a core is free
    (la,) = llm.dispatch(0.1)
    assert sorted(p.payload.key for p in la.batch) == ["part0", "part1", "part2"]


def test_without_a_budget_the_idle_instance_takes_the_partials_at_once():
    llm = EngineScheduler(name="llm", instances=[_BatchLLM("a"), _BatchLLM("b")], policy=TopologyAware(),
                          max_batch=8)
    llm.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=0))
    llm.enqueue(_pend(Kind.PREFILLING, "expansion", qid=0))
    assert len(llm.dispatch(0.0)) == 2


def test_the_regular_pass_places_no_background_work_even_with_free_cores():
    llm, _ = _llm_and_embedder(4)
    llm.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=0))
    assert llm.dispatch(0.0, background=False) == []
    (la,) = llm.dispatch(0.0)
    assert [p.payload.key for p in la.batch] == ["part"]


def test_iteration_level_instances_on_shared_cores_never_add_a_partial_to_a_regular_pass():
    eng = _engines(1)
    share_cores({"llm": eng}, cores=2)
    sched = EngineScheduler(name="llm", instances=eng, policy=TopologyAware(), max_batch=16)
    CoreBudget(2, [sched])
    sched.enqueue(_pend(Kind.PREFILLING, "expansion", qid=0))
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=1))
    (la,) = sched.dispatch(0.0)
    assert [p.payload.key for p in la.batch] == ["expansion"]   # unshared, "part" would join this pass
    assert [p.payload.key for p in sched.pending] == ["part"]


def test_a_budget_needs_a_core():
    with pytest.raises(ValueError, match="cores"):
        CoreBudget(0, [])


@pytest.mark.parametrize("app_name", ["naive_rag", "advanced_rag"])
def test_shared_cores_change_when_work_runs_not_what_it_computes(app_name):
    app = load_app(app_name)
    cfgs = app.query_configs(2, np.random.default_rng(0))
    arr = [0.0, 0.02]
    alone = simulate(app.template(), cfgs, arr, app.build_engines(), scheme="teola", seed=3)
    engines = app.build_engines()
    share_cores(engines, cores=2)
    shared = simulate(app.template(), cfgs, arr, engines, scheme="teola", seed=3)
    wall = run_realtime(app.template(), cfgs, arr, app.build_engines(), scheme="teola", seed=3, time_scale=0.01,
                        timeout_s=60, cpu_cores=1)
    assert not wall.failed
    assert [r.outputs for r in shared] == [r.outputs for r in alone] == [r.outputs for r in wall.results]
