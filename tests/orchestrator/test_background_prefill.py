"""Background sequences in the engine core (Teola's partial prefills, ``Seq.background``): they
run on an idle instance or in what a prefill pass that runs anyway leaves, never ahead of a
queued regular sequence, and ``promote`` makes one regular."""
from __future__ import annotations

import pytest

from orchestrator.engines import LinearLLMProfile
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_seq import Seq
from orchestrator.runtime.events import Event, Simulator
from profiler.engine import EngineConfig

# prefill pass: 10 ms + 1 ms/token; decode step 5 ms
PROF = LinearLLMProfile(prefill_base_ms=10, prefill_per_token_ms=1.0, prefill_attn_ms=0.0,
                        decode_base_ms=5, decode_per_seq_ms=0, decode_per_kctx_ms=0)


class _At(Event):
    def __init__(self, time, fn):
        super().__init__(time)
        self.fn = fn

    def handle(self, sim):
        return self.fn(self.time)


def _core(scheduler: str, budget: int = 100):
    done: dict[int, float] = {}
    kw = {"chunk_size": budget} if scheduler == "sarathi" else {}
    cfg = EngineConfig(scheduler=scheduler, max_num_batched_tokens=budget, max_num_seqs=8, **kw)
    core = LLMCore(name="c", step=PROF, kv_tokens=10_000, config=cfg,
                   sink=lambda s, now: done.__setitem__(s.id, now))
    return core, done


def _run(core, plan):
    loop = Simulator()
    core.bind(loop)
    for t, fn in plan:
        loop.push(_At(t, fn))
    loop.run()


def _submit(core, seq):
    return lambda now: core.submit(seq, now)


@pytest.mark.parametrize("scheduler", ["vllm-v1", "vllm", "padded", "sarathi"])
def test_background_runs_on_an_idle_instance(scheduler):
    core, done = _core(scheduler)
    _run(core, [(0.0, _submit(core, Seq(1, 20, 0, park="k", final=False, background=True)))])
    assert done[1] == pytest.approx(0.030)           # one pass of 20 tokens
    assert "k" in core.parked
    core.check()


@pytest.mark.parametrize("scheduler", ["vllm", "padded"])
def test_background_fills_a_pass_that_runs_anyway_after_regular_ones(scheduler):
    core, done = _core(scheduler, budget=100)
    # a decode runs; a regular prompt and a background one arrive together, the background first
    plan = [(0.0, _submit(core, Seq(1, 10, 50))),
            (0.1, _submit(core, Seq(3, 30, 0, park="b", final=False, background=True))),
            (0.1, _submit(core, Seq(2, 40, 1)))]
    _run(core, plan)
    # both prefilled in the one pass the regular prompt starts (10 + 70 ms), none before it
    assert done[2] == pytest.approx(done[3])
    assert core.prefill_iterations == 2              # seq 1's pass and the shared one
    core.check()


def test_background_waits_while_decodes_run_and_no_pass_is_due():
    core, done = _core("padded")
    plan = [(0.0, _submit(core, Seq(1, 10, 20))),            # 20 ms prefill, then 19 decode steps
            (0.05, _submit(core, Seq(2, 30, 0, park="b", final=False, background=True)))]
    _run(core, plan)
    assert done[1] == pytest.approx(0.020 + 19 * 0.005)
    assert done[2] == pytest.approx(done[1] + 0.040)        # only once the instance is idle
    assert core.prefill_iterations == 2


def test_background_never_goes_ahead_of_a_blocked_regular_prompt():
    core, done = _core("padded", budget=100)
    plan = [(0.0, _submit(core, Seq(1, 80, 1))),
            (0.0, _submit(core, Seq(2, 80, 1))),                    # 2 x 80 > 100: next pass
            (0.0, _submit(core, Seq(3, 10, 0, park="b", final=False, background=True)))]
    _run(core, plan)
    assert done[1] < done[2] <= done[3]


def test_promote_makes_a_waiting_background_sequence_regular():
    core, done = _core("padded")
    bg = Seq(2, 30, 0, park="b", final=False, background=True)
    plan = [(0.0, _submit(core, Seq(1, 10, 20))),
            (0.05, _submit(core, bg)),
            (0.062, lambda now: core.promote(bg, now))]
    _run(core, plan)
    assert not bg.background and done[2] < done[1]          # ran once the step running at 0.062 s ended
    assert done[2] == pytest.approx(0.065 + 0.040)
    assert core.promote(bg, 1.0) is None                    # done already: nothing to do
