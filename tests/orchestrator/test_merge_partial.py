"""A partial prefill that has not started when its full prefill becomes ready is merged into it:
the engine scheduler takes it back (``EngineScheduler.withdraw``: pending, or queued on a simulated
instance that never admitted it), the graph runtime completes it as ``ops.Unprefilled`` and the
full prefill computes the whole prompt as one new sequence, placed on the least-loaded instance
instead of pinned behind the partial. An admitted partial stays where it is."""
from __future__ import annotations

import numpy as np

from orchestrator import load_app, ops, simulate
from orchestrator.batching import TopologyAware
from orchestrator.primitives import Kind
from orchestrator.runtime import make_payload
from orchestrator.runtime.engine_scheduler import EngineScheduler

from tests.orchestrator.test_placement import _both_decoding, _engines, _hand_over, _pend


def _busy_pair():
    """Two instances, both decoding; a regular prompt and a partial prefill launched on one."""
    eng, sched, loop = _both_decoding()
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=5))
    sched.enqueue(_pend(Kind.PREFILLING, "urgent", qid=6))
    launches = sched.dispatch(loop.now)
    assert [p.node_id for p in launches[0].batch] == ["urgent", "part"]
    _hand_over(sched, launches, loop)
    return eng, sched, loop, launches[0].instance


def test_a_queued_partial_is_taken_back_and_its_instance_forgets_it():
    eng, sched, loop, i = _busy_pair()
    inflight, seq = sched.inflight[i], eng[i]._live["part"]
    inv = sched.withdraw("part", loop.now)               # its instance has not started the pass yet
    assert inv is not None and inv.kind == Kind.PARTIAL_PREFILLING and inv.key == "part"
    assert sched.inflight[i] == inflight - 1 and "part" not in sched._affinity
    core = eng[i].core
    assert seq not in core.background and seq not in core.waiting and "part" not in eng[i]._live
    loop.run()
    assert "part" not in core.parked and core.outstanding == 0     # never computed; the rest finished
    core.check()


def test_an_admitted_partial_is_not_taken_back():
    eng, sched, loop, i = _busy_pair()
    loop.run(until_s=loop.now + 0.006)                   # the running decode step ended, the next pass began
    seq = eng[i]._live["part"]
    assert seq.sched_s == seq.sched_s                    # admitted (not NaN)
    assert sched.withdraw("part", loop.now) is None
    loop.run()
    assert "part" in eng[i].core.parked                  # prefilled where it was placed


def test_a_pending_partial_is_taken_back_only_by_engines_that_merge():
    eng = _engines()
    sched = EngineScheduler(name="llm", instances=eng, policy=TopologyAware(), max_batch=16)
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part"))
    assert sched.withdraw("part", 0.0).key == "part" and not sched.pending
    for e in eng:
        e.merges_partials = False                        # e.g. a real engine: it keeps the partial
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part2"))
    assert sched.withdraw("part2", 0.0) is None and len(sched.pending) == 1


def test_merged_prefills_compute_what_the_unsplit_graph_computes():
    app = load_app("naive_rag")
    n = 40
    cfgs = app.query_configs(n, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    payloads = [make_payload(c, rng) for c in cfgs]
    arrivals = np.cumsum(np.random.default_rng(2).exponential(0.5, n))     # 2 req/s: partials wait
    ref = simulate(app.template(), cfgs, arrivals, app.build_engines(), scheme="llamadist-to", payloads=payloads)
    traces: dict = {}
    got = simulate(app.template(), cfgs, arrivals, app.build_engines(prefix_caching=True),
                   scheme="teola+prefix-cache", payloads=payloads, traces=traces)
    assert [r.outputs for r in got] == [r.outputs for r in ref]
    kinds = {}
    for q in traces.values():
        for nid, v in q.store.items():
            if q.graph.nodes[nid].kind == Kind.PARTIAL_PREFILLING:
                kinds[isinstance(v, ops.Unprefilled)] = kinds.get(isinstance(v, ops.Unprefilled), 0) + 1
    assert kinds.get(True, 0) > 0 and kinds.get(False, 0) > 0     # some merged, some ran on their own
