"""The engine core's one policy interface (issue 22 item 1): a policy reads a read-only view and
returns an immutable plan; only the core applies it, and the core refuses a plan it cannot apply."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import orchestrator.engines.llm_core as llm_core
from harness.simulate import SimulateConfig, simulate
from orchestrator.engines.admission import make_admission
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_plan import DECODE_ONLY, IterationPlan
from orchestrator.engines.llm_seq import Seq
from orchestrator.runtime.events import Simulator
from profiler.engine import EngineConfig
from tests.harness.helpers import LinearStep, make_trace

SEQ_FIELDS = ("state", "gen", "have", "held", "eff", "filled", "tokens0", "ctx0", "join", "preemptions")


def _snapshot(core: LLMCore) -> tuple:
    seqs = [*core.waiting, *core.background, *core.prefilling, *core.running.values(), *core.ready]
    return (core.free, core.ctx_sum, core.dit, tuple(core.groups), tuple(s.id for s in core.waiting),
            tuple(s.id for s in core.background), tuple(s.id for s in core.prefilling), tuple(core.running),
            tuple(tuple(getattr(s, f) for f in SEQ_FIELDS) for s in seqs))


class _Spy:
    """Wraps a policy: the core is unchanged by ``schedule``; every plan is an ``IterationPlan``."""

    def __init__(self, policy) -> None:
        self.policy, self.name, self.plans, self.preempted = policy, policy.name, 0, 0

    def schedule(self, view):
        before = _snapshot(view)
        plan = self.policy.schedule(view)
        assert _snapshot(view) == before, "a policy changed the core"
        assert isinstance(plan, IterationPlan)
        with pytest.raises(AttributeError):
            plan.decode = not plan.decode        # immutable
        self.plans += 1
        self.preempted += len(plan.preempt)
        return plan


@pytest.mark.parametrize("scheduler", ["vllm-v1", "vllm", "padded", "sarathi"])
@settings(max_examples=15, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0, 2), st.integers(1, 400), st.integers(1, 120)), min_size=1, max_size=40),
       blocks=st.integers(30, 120))
@example(reqs=[(0.0, 361, 120)], blocks=30)     # one request that never fits: no plan at all
def test_policies_only_read_the_core_and_return_frozen_plans(scheduler, reqs, blocks):
    spies: list[_Spy] = []

    def spying(config):
        spies.append(_Spy(make_admission(config)))
        return spies[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(llm_core, "make_admission", spying)
        _check_spied(scheduler, reqs, blocks, spies)


def _check_spied(scheduler, reqs, blocks, spies):
    reqs = sorted(reqs)
    trace = make_trace([r[0] for r in reqs], [r[1] for r in reqs], [r[2] for r in reqs])
    kw = {"chunk_size": 64, "max_num_seqs": 16} if scheduler == "sarathi" else {}
    cfg = SimulateConfig(model="x", gpu="y", replicas=2,
                         engine=EngineConfig(scheduler=scheduler, kv_capacity_tokens=16 * blocks, **kw))
    res = simulate(trace, cfg, step=LinearStep())
    for inst in res.instances:
        inst.check()
    assert len(spies) == 2
    # a request no instance can ever hold fails at once, without a plan (hypothesis found one alone)
    assert sum(s.plans for s in spies) >= 1 or res.summary["completed"] == 0
    assert sum(s.preempted for s in spies) == res.summary["preemptions"]
    assert res.summary["completed"] + res.summary["failed"] == len(reqs)


def _core(**engine) -> LLMCore:
    core = LLMCore(name="c", step=LinearStep(), kv_tokens=160, sink=lambda s, now: None,
                   config=EngineConfig(**engine), loop=Simulator())
    return core


def test_the_core_refuses_a_plan_that_admits_out_of_queue_order():
    core = _core()
    a, b = Seq(1, 16, 4), Seq(2, 16, 4)
    core.waiting.extend([a, b])
    with pytest.raises(RuntimeError, match="not the head of its queue"):
        core._apply(IterationPlan(chunks=((b, 16),)), 0.0)


def test_the_core_refuses_a_chunk_larger_than_the_prompt_left_and_an_overdrawn_cache():
    core = _core(watermark=0.0)
    a = Seq(1, 16, 4)
    core.waiting.append(a)
    with pytest.raises(RuntimeError, match="prefills 17 tokens"):
        core._apply(IterationPlan(chunks=((a, 17),)), 0.0)
    core = _core(watermark=0.0)
    big = Seq(2, 200, 4)                        # 13 blocks of a 10-block cache
    core.waiting.append(big)
    with pytest.raises(RuntimeError, match="overdraws the KV cache"):
        core._apply(IterationPlan(chunks=((big, 200),)), 0.0)


def test_the_core_refuses_to_preempt_a_sequence_it_has_not_admitted():
    core = _core()
    a = Seq(1, 16, 4)
    core.waiting.append(a)
    with pytest.raises(RuntimeError, match="not admitted"):
        core._apply(IterationPlan(preempt=(a,)), 0.0)


def test_a_decode_plan_advances_the_whole_batch_and_the_core_times_it():
    core = _core(watermark=0.0)
    a, b = Seq(1, 16, 4), Seq(2, 20, 4)
    core.waiting.extend([a, b])
    dur = core._apply(IterationPlan(chunks=((a, 16), (b, 20))), 0.0)
    assert dur == pytest.approx(0.01 + 36e-4) and core.free == 10 - 1 - 2
    core.end_iteration(dur)
    assert set(core.running) == {1, 2} and core.n_decode == 0
    dur2 = core._apply(DECODE_ONLY, dur)
    assert dur2 == pytest.approx(0.01 + 2e-4)
    assert core.n_decode == 2 and core.free == 10 - 1 - 2 - 1     # a's context reaches 17: a new block
    core.end_iteration(dur + dur2)
    core.check()


class _RunningFirst:
    """A policy written against the interface alone (no core change), in the shape of vLLM v1's
    scheduler: one token budget per step shared by the decode batch and prefill chunks, running
    sequences first (decodes, then unfinished prompts), chunked prefill always, prompts capped at
    ``long_prefill``, recompute preemption of the newest decoding sequence."""

    name = "running-first"

    def __init__(self, budget: int, long_prefill: int) -> None:
        self.budget, self.long_prefill = budget, long_prefill

    def schedule(self, v) -> IterationPlan:
        free, decodes, victims = v.free, list(v.running.values()), []
        need = v.need_blocks() if decodes else 0
        while free < need and decodes:
            s = decodes.pop()
            victims.append(s)
            free += v.held_blocks(s)
            need -= v.needs_block(s)
        free -= need
        tokens, chunks = len(decodes), []
        for s in v.prefilling:
            m = min(s.eff - s.filled, self.long_prefill, self.budget - tokens)
            if m <= 0:
                break
            chunks.append((s, m))
            tokens += m
        seats = v.max_batch - len(decodes) - len(v.prefilling)
        queue = [(s, v.recompute_tokens(s), v.blocks(v.recompute_tokens(s))) for s in reversed(victims)]
        queue += [(s, s.eff, v.new_blocks(s)) for s in v.waiting]
        for s, eff, nb in queue:
            m = min(eff, self.long_prefill, self.budget - tokens)
            if m <= 0 or seats <= 0 or free - nb < v.watermark:
                break
            free, seats, tokens = free - nb, seats - 1, tokens + m
            chunks.append((s, m))
        return IterationPlan(preempt=tuple(victims), decode=bool(decodes), chunks=tuple(chunks))


def test_a_new_policy_runs_on_the_core_unchanged():
    loop = Simulator()
    done: dict[int, float] = {}
    core = LLMCore(name="v1", step=LinearStep(), kv_tokens=16 * 24, loop=loop,
                   sink=lambda s, now: done.__setitem__(s.id, now), config=EngineConfig(max_num_seqs=8),
                   policy=_RunningFirst(budget=64, long_prefill=48))
    seqs = [Seq(i, 30 + 17 * i, 20 + 5 * i) for i in range(10)]
    for s in seqs:
        core.submit(s, 0.0)
    loop.run()
    core.check()
    assert sorted(done) == list(range(10)) and core.preemptions > 0
    assert all(s.first_s <= s.done_s for s in seqs) and core.free == core.total_blocks
