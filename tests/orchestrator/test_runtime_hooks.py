"""The hooks every runtime shares: ``prepare`` (the setup of a run), an engine scheduler whose
launch hands back the instance's pending batch (streaming instances get ``on_piece``), and a
graph scheduler that records a failed query as a ``RequestResult`` with its reason."""
from __future__ import annotations

import numpy as np
import pytest

from orchestrator import load_app
from orchestrator.batching import Blind, Pending
from orchestrator.engines.base import BatchResult, Engine, Invocation, InvocationOutput, PendingBatch
from orchestrator.rewrite import PassContext
from orchestrator.primitives import Kind
from orchestrator.runtime import make_payload, pass_context, prepare
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.sim import SimState


class _Recording(Engine):
    """Resolves every batch at once and records what ``submit`` was given."""
    kind = "embedding"
    serves = frozenset({Kind.EMBEDDING})

    def __init__(self, *, streams: bool = False, iterative: bool = False) -> None:
        self.name, self.streams, self.iterative = "rec#0", streams, iterative
        self.calls: list[dict] = []

    def submit(self, batch, *, now_s=None, on_piece=None) -> PendingBatch:
        self.calls.append({"keys": [i.key for i in batch], "now_s": now_s, "on_piece": on_piece})
        return PendingBatch(BatchResult(tuple(InvocationOutput(i.key, 0.5) for i in batch), 0.5))

    def max_batch_size(self) -> int:
        return 4


def _enqueue(sched: EngineScheduler, n: int) -> None:
    for q in range(n):
        inv = Invocation(f"{q}/e", Kind.EMBEDDING, {"texts": ["a"]})
        sched.enqueue(Pending(q, 0.0, 0.0, q, 0, 1, "e", inv))


def _piece(key: str, i: int, value: object) -> None:
    pass


@pytest.mark.parametrize("streams", [True, False])
def test_launch_hands_back_the_pending_batch_and_on_piece_only_to_streaming_instances(streams):
    inst = _Recording(streams=streams)
    sched = EngineScheduler(name="e", instances=[inst], policy=Blind(), on_piece=_piece)
    _enqueue(sched, 3)
    (la,) = sched.dispatch(2.0)
    assert isinstance(la.pending, PendingBatch) and [o.value for o in la.pending.result().outputs] == ["0/e", "1/e", "2/e"]
    assert inst.calls == [{"keys": ["0/e", "1/e", "2/e"], "now_s": 2.0, "on_piece": _piece if streams else None}]
    assert sched.inflight == [3] and sched.executed == [3] and sched.batches == [1] and not sched.pending


@pytest.mark.parametrize("drives", [True, False])
def test_iterative_instances_are_handed_over_only_where_the_runtime_drives_iterations(drives):
    inst = _Recording(iterative=True)
    sched = EngineScheduler(name="e", instances=[inst], policy=Blind(), drives_iterations=drives)
    _enqueue(sched, 2)
    (la,) = sched.dispatch(0.0)
    assert (la.pending is None) == drives and len(inst.calls) == (0 if drives else 1)
    assert sched.batches == [1] and [p.qid for p in la.batch] == [0, 1]


def test_prepare_resolves_content_and_graphs_as_simulate_does():
    app = load_app("naive_rag")
    cfgs = app.query_configs(3, np.random.default_rng(0))
    prep = prepare(app.template(), cfgs, [0.0, 0.5, 1.0], scheme="teola", seed=4)
    rng = np.random.default_rng(4)
    assert list(prep.payloads) == [make_payload(c, rng) for c in cfgs]
    runs = prep.runs(pass_context(app.build_engines()))
    assert [(r.qid, r.arrival_s) for r in runs] == [(0, 0.0), (1, 0.5), (2, 1.0)]
    assert runs[0].graph is prep.runs(pass_context(app.build_engines()))[0].graph     # cached
    assert prep.policy() is not prep.policy()                  # one fresh policy per engine scheduler
    shared = Blind()
    assert prepare(app.template(), cfgs, [0.0] * 3, batching=shared).policy() is shared
    with pytest.raises(KeyError, match="needs engines"):
        prep.runs(PassContext({}))
    with pytest.raises(ValueError, match="3 configs but 1 arrivals"):
        prepare(app.template(), cfgs, [0.0])


def test_a_failed_query_is_a_request_result_with_its_reason():
    app = load_app("naive_rag")
    prep = prepare(app.template(), [app.query] * 2, [0.0, 0.0])
    q0, q1 = prep.runs(pass_context(app.build_engines()))
    state = SimState(schedulers={}, dispatch_overhead_s=0.0)
    state.now = 3.0
    assert state.fail(q1, "engine gone") and not state.fail(q1, "again")
    (r,) = state.results
    assert (r.qid, r.finish_s, r.latency_s, r.error, r.ok, dict(r.outputs)) == (1, 3.0, 3.0, "engine gone", False, {})
    assert q0.error is None and q1.error == "engine gone"
