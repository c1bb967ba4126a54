"""Issue 23 item 1: the rules of vLLM's V1 scheduler (``vllm-v1``, orchestrator/engines/vllm_v1.py,
vLLM ``vllm/v1/core/sched/scheduler.py`` at 00024d3), each checked on a small case, as
tests/harness/test_vllm_rules.py does for v0."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.simulate import SimulateConfig, simulate
from orchestrator.engines.admission import make_admission
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_plan import IterationPlan
from orchestrator.engines.llm_seq import Seq
from orchestrator.engines.vllm_v1 import VllmV1
from orchestrator.runtime.events import Simulator
from profiler.engine import EngineConfig
from tests.harness.helpers import LinearStep, make_trace


class _Recorder(VllmV1):
    """V1 that keeps every plan it returns (so the core asks it every time)."""

    decodes_when_quiet = False

    def __init__(self) -> None:
        self.plans: list[IterationPlan] = []

    def schedule(self, v) -> IterationPlan:
        plan = super().schedule(v)
        self.plans.append(plan)
        return plan


def _serve(seqs, *, kv_tokens=16 * 1000, **engine):
    """Submit ``seqs`` at time 0 to one vllm-v1 core and run it to the end; (core, step, plans)."""
    step, policy, loop = LinearStep(), _Recorder(), Simulator()
    core = LLMCore(name="v1", step=step, kv_tokens=kv_tokens, sink=lambda s, now: None, loop=loop,
                   config=EngineConfig(**engine), policy=policy)
    for s in seqs:
        core.submit(s, 0.0)
    loop.run()
    core.check()
    assert core.free == core.total_blocks and all(s.done_s == s.done_s for s in seqs)
    return core, step, policy.plans


def _chunks(plan: IterationPlan) -> list[tuple[int, int]]:
    return [(s.id, m) for s, m in plan.chunks]


def test_vllm_v1_is_the_default_and_v0_stays_selectable_by_name():
    assert EngineConfig().scheduler == "vllm-v1"
    assert isinstance(make_admission(EngineConfig()), VllmV1)
    assert make_admission(EngineConfig(scheduler="vllm")).name == "vllm"


def test_decodes_and_prefill_chunks_share_one_token_budget_per_step():
    """Rule 1: A decodes while B's 300-token prompt is prefilled: every step runs A's token and
    B's chunk of the 64 - 1 tokens left (v0 would run B's prompt alone, A waiting)."""
    _, step, _ = _serve([Seq(1, 16, 100), Seq(2, 300, 2)], max_num_batched_tokens=64, max_num_seqs=8)
    assert step.calls[0][:3:2] == (64, 0)               # step 1: A's prompt (16) and 48 of B's
    assert [(p, d) for p, _, d, _, _ in step.calls if p and d] == [(63, 1)] * 4
    assert all(p + d <= 64 for p, _, d, _, _ in step.calls)
    assert sum(p for p, *_ in step.calls) == 316


def test_running_requests_go_first_an_unfinished_prompt_before_any_new_one():
    """Rule 2: B's unfinished prompt takes the budget before C (queued behind it) is admitted."""
    b, c = Seq(2, 150, 3), Seq(3, 40, 3)
    _, _, plans = _serve([b, c], max_num_batched_tokens=64, max_num_seqs=8)
    assert [_chunks(p) for p in plans[:3]] == [[(2, 64)], [(2, 64)], [(2, 22), (3, 40)]]
    assert plans[3].decode and not plans[3].chunks           # then both decode together


def test_chunked_prefill_is_always_on_for_a_prompt_longer_than_the_budget():
    """Rule 2: a 300-token prompt on a 64-token budget is prefilled in 64-token chunks; its
    first token comes with the last chunk."""
    s = Seq(1, 300, 1)
    _, step, _ = _serve([s], max_num_batched_tokens=64, max_num_seqs=8)
    assert [c[0] for c in step.calls] == [64, 64, 64, 64, 44]
    assert s.first_s == pytest.approx(s.done_s) == pytest.approx(5 * 0.01 + 300 * 1e-4)


def test_long_prefill_token_threshold_caps_each_requests_chunk():
    """Rule 3: with the threshold at 20, two 50-token prompts take 20 tokens each per step."""
    _, step, plans = _serve([Seq(1, 50, 2), Seq(2, 50, 2)], max_num_batched_tokens=64, max_num_seqs=8,
                            long_prefill_token_threshold=20)
    assert [_chunks(p) for p in plans[:3]] == [[(1, 20), (2, 20)], [(1, 20), (2, 20)], [(1, 10), (2, 10)]]
    assert [c[0] for c in step.calls[:3]] == [40, 40, 20]


def test_preemption_takes_the_most_recently_admitted_request():
    """Rule 4: 4 blocks of 16; A and B (16-token prompts) decode until both need a third block:
    B, admitted last, is preempted (recompute: its prompt and 17 generated tokens are prefilled
    again, after A is done)."""
    a, b = Seq(1, 16, 40), Seq(2, 16, 40)
    _, step, plans = _serve([a, b], kv_tokens=64)
    assert [[s.id for s in p.preempt] for p in plans if p.preempt] == [[2]]
    assert [c[0] for c in step.calls if c[0]] == [32, 16 + 17]
    assert b.preemptions == 1 and b.first_s < a.done_s < b.done_s


class _View:
    """A hand-made CoreView: decoding sequences ``running`` (each holding ``held`` blocks, the
    last ``needy`` of them needing a new block), ``free`` blocks, ``waiting`` sequences needing
    one block each."""

    def __init__(self, running, waiting, free, needy=1, held=2) -> None:
        self.running, self.waiting, self.free = {s.id: s for s in running}, waiting, free
        self.prefilling, self.background, self.max_batch, self.max_batch_tokens = (), (), 8, 64
        self.config, self._needy, self._held = EngineConfig(max_num_seqs=8, max_num_batched_tokens=64), needy, held

    def need_blocks(self):
        return self._needy

    def needs_block(self, s):
        return s is list(self.running.values())[-1]

    def held_blocks(self, s):
        return self._held

    def new_blocks(self, s):
        return 1


def test_a_step_that_preempts_admits_nothing_even_what_would_fit():
    """Rule 5 (``if not preempted_reqs``): B, the newest, must be preempted for its own block;
    that frees 2 blocks, and W at the head of the queue would fit them, budget and seats, but
    the step admits nothing. With a free block (no preemption) W is admitted."""
    a, b, w = Seq(1, 16, 9), Seq(2, 16, 9), Seq(3, 8, 2)
    plan = VllmV1().schedule(_View([a, b], [w], free=0))
    assert plan == IterationPlan(preempt=(b,), decode=True)
    plan = VllmV1().schedule(_View([a, b], [w], free=2))
    assert plan == IterationPlan(decode=True, chunks=((w, 8),))


def test_an_unfinished_prompt_is_preempted_before_any_decoding_request():
    """Rule 4: R2, admitted after R1 and still prefilling, is the last of V1's running list: it
    goes first when R1's decode needs a block; its prompt is prefilled from the start again."""
    r1, r2 = Seq(1, 15, 40), Seq(2, 96, 2)
    core, step, plans = _serve([r1, r2], kv_tokens=112, max_num_batched_tokens=32, max_num_seqs=8)
    victims = [s.id for p in plans for s in p.preempt]
    assert victims == [2] and r1.preemptions == 0
    assert r2.first_s > r1.done_s
    assert sum(c[0] for c in step.calls) == 15 + 17 + 31 + 96


def test_waiting_requests_are_admitted_first_come_first_served_without_a_watermark():
    """Rule 5 and 6: 10 blocks of 16 with the v0 watermark set to 1 block: A (5 blocks) and B
    (5 blocks) are admitted together (V1 has no watermark); then C (7 blocks) at the head blocks
    the smaller D (1 block) until A and B are done."""
    a, b = Seq(1, 80, 3), Seq(2, 65, 3)
    c, d = Seq(3, 100, 3), Seq(4, 10, 3)
    _, _, plans = _serve([a, b, c, d], kv_tokens=160, watermark=0.1)
    assert _chunks(plans[0]) == [(1, 80), (2, 65)]
    assert d.sched_s == c.sched_s > a.done_s


def test_max_num_seqs_counts_prefilling_requests():
    """Rule 5: with 2 seats, a request whose prompt is still being prefilled holds one: the third
    request waits until one of the first two is done."""
    s1, s2, s3 = Seq(1, 10, 5), Seq(2, 200, 5), Seq(3, 10, 5)
    _, _, plans = _serve([s1, s2, s3], max_num_batched_tokens=64, max_num_seqs=2)
    assert _chunks(plans[0]) == [(1, 10), (2, 54)]
    assert s3.sched_s >= s1.done_s


def test_the_token_budget_must_cover_max_num_seqs():
    """vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs."""
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        EngineConfig(max_num_seqs=128, max_num_batched_tokens=64)
    assert EngineConfig(scheduler="vllm", max_num_seqs=128, max_num_batched_tokens=64).max_num_seqs == 128


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 3), st.integers(1, 600), st.integers(1, 150)), min_size=1, max_size=40),
       st.integers(40, 300), st.sampled_from([0, 24, 100]), st.sampled_from([4, 16]))
def test_every_step_stays_within_budget_threshold_and_seats_and_every_request_ends(reqs, blocks, threshold, seqs):
    reqs.sort()
    trace = make_trace([r[0] for r in reqs], [r[1] for r in reqs], [r[2] for r in reqs])
    plans: list[IterationPlan] = []
    orig = VllmV1.schedule

    def spy(self, v):
        plan = orig(self, v)
        n = len(v.running) - sum(s.state == 2 for s in plan.preempt)   # DECODE
        assert n * plan.decode + sum(m for _, m in plan.chunks) <= 128
        assert not (plan.preempt and any(s in v.waiting for s, _ in plan.chunks))   # rule 5
        admitted = sum(s.state == 0 for s, _ in plan.chunks)      # WAITING
        assert len(v.running) + len(v.prefilling) - len(plan.preempt) + admitted <= seqs
        plans.append(plan)
        return plan

    engine = EngineConfig(max_num_batched_tokens=128, max_num_seqs=seqs, long_prefill_token_threshold=threshold,
                          kv_capacity_tokens=16 * blocks)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(VllmV1, "schedule", spy)
        res = simulate(trace, SimulateConfig(model="x", gpu="y", engine=engine), step=LinearStep())
    res.instances[0].check()
    assert res.summary["completed"] + res.summary["failed"] == len(reqs)
    if threshold:
        assert all(m <= threshold for p in plans for _, m in p.chunks)
