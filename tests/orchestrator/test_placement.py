"""The engine scheduler places each LLM primitive on the least-loaded instance, keeps KV
affinity, holds partial prefills back until an instance would run them soon, promotes them when
they turn critical; Algorithm 2 drains each query bucket's deepest level first."""
from __future__ import annotations

from orchestrator.batching import Blind, Pending, TopologyAware
from orchestrator.engines import Invocation, LinearLLMProfile, SimLLMEngine
from orchestrator.primitives import Kind
from orchestrator.runtime.engine_scheduler import EngineScheduler
from orchestrator.runtime.events import Simulator

PROF = LinearLLMProfile(prefill_base_ms=10, prefill_per_token_ms=1.0, prefill_attn_ms=0.0,
                        decode_base_ms=5, decode_per_seq_ms=0, decode_per_kctx_ms=0)


class _Sink:
    def done(self, key, value, now):
        return None

    def piece(self, key, index, value, now):
        return None

    def failed(self, key, reason, now):
        return None


def _engines(n=2):
    out = []
    for i in range(n):
        e = SimLLMEngine(name=f"llm#{i}", step=PROF, kv_capacity_tokens=20_000)
        e.attach(_Sink())
        out.append(e)
    return out


_SEQ = [0]


def _pend(kind, key, words=100, qid=0, depth=1, kv=None):
    _SEQ[0] += 1
    segs = (" ".join(["w"] * words),) if kind != Kind.DECODING else ()
    params = {"kv_chain": kv or key}
    if kind == Kind.DECODING:
        params.update(fmt="text", output_tokens=50, n_items=1)
    inv = Invocation(key, kind, {"segments": segs} if segs else {}, params, kv_key=kv or key)
    return Pending(qid, 0.0, 0.0, _SEQ[0], depth, 1, key, inv)


def _hand_over(sched, launches, loop):
    for inst in sched.instances:
        inst.bind(loop)
    for la in launches:
        loop.push_all(sched.instances[la.instance].enqueue(tuple(p.payload for p in la.batch), loop.now))


def test_a_burst_is_spread_over_instances_not_sent_to_the_first():
    sched = EngineScheduler(name="llm", instances=_engines(), policy=TopologyAware(), max_batch=16)
    for k in range(4):
        sched.enqueue(_pend(Kind.PREFILLING, f"p{k}", qid=k))
    launches = sched.dispatch(0.0)
    assert sorted(len(la.batch) for la in launches) == [2, 2]


def test_least_loaded_counts_kv_held_and_tokens_queued():
    eng = _engines()
    sched = EngineScheduler(name="llm", instances=eng, policy=Blind(), max_batch=16)
    loop = Simulator()
    sched.enqueue(_pend(Kind.PREFILLING, "big", words=1000))
    _hand_over(sched, sched.dispatch(0.0), loop)
    loop.run()                                           # its KV is parked on one instance
    busy = next(i for i, e in enumerate(eng) if e.occupied_kv_tokens())
    for k in "abcde":
        sched.enqueue(_pend(Kind.PREFILLING, k, words=300))
    placed = {p.node_id: la.instance for la in sched.dispatch(loop.now) for p in la.batch}
    # 1008 KV tokens held (63 blocks) there; 0, 300, 600, 900 queued here when a-d are placed, then 1200
    assert [placed[k] == busy for k in "abcde"] == [False, False, False, False, True]
    sched.enqueue(_pend(Kind.DECODING, "big/d", kv="big"))
    assert [la.instance for la in sched.dispatch(loop.now)] == [busy]   # KV affinity


def _both_decoding() -> tuple[list, EngineScheduler, Simulator]:
    """Two instances, each decoding one query (q0, q1), at 0.25 s."""
    eng = _engines()
    sched = EngineScheduler(name="llm", instances=eng, policy=TopologyAware(), max_batch=16)
    loop = Simulator()
    for k in range(2):
        sched.enqueue(_pend(Kind.PREFILLING, f"q{k}", qid=k))
    _hand_over(sched, sched.dispatch(0.0), loop)
    loop.run(until_s=0.2)
    for k in range(2):
        sched.enqueue(_pend(Kind.DECODING, f"q{k}/d", qid=k, kv=f"q{k}"))
    _hand_over(sched, sched.dispatch(loop.now), loop)
    loop.run(until_s=0.25)
    return eng, sched, loop


def test_partial_prefills_wait_unpinned_until_an_instance_would_run_them():
    eng, sched, loop = _both_decoding()
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=5))
    assert sched.dispatch(loop.now) == [] and len(sched.pending) == 1      # no pass due, nobody idle
    sched.enqueue(_pend(Kind.PREFILLING, "urgent", qid=6))
    launches = sched.dispatch(loop.now)                   # a prefill pass is due: the partial joins it
    assert len(launches) == 1 and [p.node_id for p in launches[0].batch] == ["urgent", "part"]


def test_a_promoted_partial_is_regular_work():
    eng = _engines(1)
    sched = EngineScheduler(name="llm", instances=eng, policy=TopologyAware(), max_batch=16)
    loop = Simulator()
    sched.enqueue(_pend(Kind.PREFILLING, "q"))
    _hand_over(sched, sched.dispatch(0.0), loop)
    loop.run(until_s=0.2)
    sched.enqueue(_pend(Kind.DECODING, "q/d", kv="q"))
    _hand_over(sched, sched.dispatch(loop.now), loop)
    loop.run(until_s=0.25)
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=1))
    assert sched.dispatch(loop.now) == []
    assert sched.promote("part", loop.now) == []
    launches = sched.dispatch(loop.now)
    assert [p.node_id for p in launches[0].batch] == ["part"]
    _hand_over(sched, launches, loop)
    assert not eng[0].core.background and len(eng[0].core.waiting) == 1   # queued as a regular prompt


def test_algorithm2_drains_a_buckets_deepest_level_before_the_next_bucket():
    pend = [Pending(0, 0.0, 0.0, 1, 5, 1, "X1"), Pending(0, 0.0, 0.0, 2, 5, 1, "X2"),
            Pending(0, 0.0, 0.0, 3, 2, 1, "X3"), Pending(1, 0.1, 0.0, 4, 5, 1, "Y1")]
    sel = TopologyAware(direction="highest").select
    assert [p.node_id for p in sel(pend, capacity=2)] == ["X1", "X2"]
    assert [p.node_id for p in sel(pend, capacity=3)] == ["X1", "X2", "Y1"]
    assert [p.node_id for p in sel(pend, capacity=4)] == ["X1", "X2", "Y1", "X3"]
    assert [p.node_id for p in TopologyAware(direction="lowest").select(pend, capacity=2)] == ["X3", "Y1"]


class _BatchLLM:
    """A batch-at-a-time LLM instance (as the real engines are): ``continuous`` False."""
    kind, continuous, streams = "llm", False, False
    serves = frozenset({Kind.PREFILLING, Kind.PARTIAL_PREFILLING, Kind.FULL_PREFILLING, Kind.DECODING})

    def __init__(self, name):
        self.name, self.batches = name, []

    def submit(self, batch, *, now_s=None, on_piece=None):
        self.batches.append([inv.key for inv in batch])
        return None

    def max_batch_size(self):
        return 8

    def occupied_kv_tokens(self):
        return 0


def test_batch_engines_never_put_partial_prefills_beside_regular_work():
    """A batch-at-a-time instance prefills a batch's prompts one after another and returns them at
    its end: the critical prefill goes alone, the partials to the other idle instance."""
    sched = EngineScheduler(name="llm", instances=[_BatchLLM("a"), _BatchLLM("b")], policy=TopologyAware(),
                            max_batch=8)
    for k in range(3):
        sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, f"part{k}", qid=0))
    sched.enqueue(_pend(Kind.PREFILLING, "expansion", qid=0))
    launches = sched.dispatch(0.0)
    batches = sorted([p.payload.key for p in la.batch] for la in launches)
    assert batches == [["expansion"], ["part0", "part1", "part2"]]


def test_batch_engines_hold_partial_prefills_while_regular_work_takes_the_only_instance():
    sched = EngineScheduler(name="llm", instances=[_BatchLLM("a")], policy=TopologyAware(), max_batch=8)
    sched.enqueue(_pend(Kind.PARTIAL_PREFILLING, "part", qid=1))
    sched.enqueue(_pend(Kind.PREFILLING, "expansion", qid=0))
    (la,) = sched.dispatch(0.0)
    assert [p.payload.key for p in la.batch] == ["expansion"]
    assert [p.payload.key for p in sched.pending] == ["part"]
    sched.free(0, 1)
    (la,) = sched.dispatch(0.1)                   # the instance is free and nothing regular waits
    assert [p.payload.key for p in la.batch] == ["part"]
