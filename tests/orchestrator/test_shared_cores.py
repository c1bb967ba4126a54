"""Engines sharing CPU cores (``SharedCores``, ``share_cores``): egalitarian processor sharing of
simulated engines, non-LLM batches and LLM iterations alike, re-timed whenever an execution starts
or ends."""
from __future__ import annotations

import pytest

from orchestrator import load_app, simulate
from orchestrator.engines import share_cores
from orchestrator.engines.cpu_sharing import SharedCores, SharedCoresLLMCore
from orchestrator.engines.llm_seq import Seq
from orchestrator.runtime.events import Event, Simulator
from profiler.engine import EngineConfig


class _Start(Event):
    """Starts ``work`` seconds of work on ``cores`` at ``time``; records its end in ``ends[name]``."""

    def __init__(self, time: float, cores: SharedCores, work: float, name: str, ends: dict[str, float]) -> None:
        super().__init__(time)
        self.cores, self.work, self.name, self.ends = cores, work, name, ends

    def handle(self, sim: Simulator) -> list[Event]:
        # an execution named "decode..." is an LLM iteration that only decodes
        return self.cores.start(self.time, self.work, self._done, decode=self.name.startswith("decode"))

    def _done(self, now: float, sim: Simulator) -> None:
        self.ends[self.name] = now


def _ends(cores: SharedCores, starts: list[tuple[str, float, float]]) -> dict[str, float]:
    """Run executions ``(name, start s, work s)`` on ``cores``; when each ended."""
    loop, ends = Simulator(), {}
    for name, t, work in starts:
        loop.push(_Start(t, cores, work, name, ends))
    loop.run()
    assert not cores.running
    return ends


def test_factor_is_executions_per_core_and_never_below_one():
    two = SharedCores(2)
    assert [two.factor(k) for k in range(1, 6)] == [1.0, 1.0, 1.5, 2.0, 2.5]
    assert SharedCores(2, background=3).factor(1) == 2.0      # (1 + 3) / 2
    with pytest.raises(ValueError, match="cores"):
        SharedCores(0)
    with pytest.raises(ValueError, match="background"):
        SharedCores(2, background=-1)
    with pytest.raises(ValueError, match="same_process"):
        SharedCores(2, same_process=-0.1)


def test_executions_of_one_process_cost_each_other_beyond_the_cores():
    one_process = SharedCores(2, same_process=0.5)
    assert [one_process.factor(k) for k in (1, 2, 3)] == [1.0, 1.5, 3.0]     # 3: 1.5 (cores) x 2 (lock)
    # two on two cores: 1.5x each while both run; a's 0.3 s end at 0.45 (b did 0.3), b's 0.7 left alone: 1.15
    assert _ends(one_process, [("a", 0.0, 0.3), ("b", 0.0, 1.0)]) == pytest.approx({"a": 0.45, "b": 1.15})


def test_a_decode_iteration_pays_its_own_in_process_cost_the_others_theirs():
    cores = SharedCores(2, same_process=0.5, decode_same_process=1.0)
    assert cores.factor(2) == 1.5 and cores.factor(2, 1.0) == 2.0
    # both 0.3 s of work from 0: the batch runs at 1/1.5 and ends at 0.45, the decode at 1/2 has done
    # 0.225 by then; its 0.075 left alone: 0.525
    assert _ends(cores, [("batch", 0.0, 0.3), ("decode", 0.0, 0.3)]) == pytest.approx({"batch": 0.45, "decode": 0.525})
    # without a decode-specific cost a decode is like any execution
    plain = SharedCores(2, same_process=0.5)
    assert _ends(plain, [("batch", 0.0, 0.3), ("decode", 0.0, 0.3)]) == pytest.approx({"batch": 0.45, "decode": 0.45})
    with pytest.raises(ValueError, match="decode_same_process"):
        SharedCores(2, decode_same_process=-0.1)


def test_an_execution_that_started_first_is_slowed_by_one_that_starts_later():
    # one core: a runs alone 0-0.5 (0.5 s of work left), then both at half speed: a's 0.5 s take 1 s
    # (ends 1.5), by when b did 0.5 s of its 1; b alone again: ends 2.0
    ends = _ends(SharedCores(1), [("a", 0.0, 1.0), ("b", 0.5, 1.0)])
    assert ends == pytest.approx({"a": 1.5, "b": 2.0})


def test_an_execution_ending_speeds_up_the_others():
    # one core, both from 0 at half speed: a's 0.2 s end at 0.4 (b did 0.2 of 1.0), then b alone: 1.2
    ends = _ends(SharedCores(1), [("a", 0.0, 0.2), ("b", 0.0, 1.0)])
    assert ends == pytest.approx({"a": 0.4, "b": 1.2})


def test_three_on_two_cores_with_background():
    # 2 cores, background 1: alone (1 + 1) / 2 = 1, full speed; two at once (2 + 1) / 2 = 1.5
    # a 0-0.3 alone (0.3 done), then a and b at 1/1.5: a's 0.7 left take 1.05 (ends 1.35), b did 0.7;
    # b alone: 0.3 left, ends 1.65
    ends = _ends(SharedCores(2, background=1.0), [("a", 0.0, 1.0), ("b", 0.3, 1.0)])
    assert ends == pytest.approx({"a": 1.35, "b": 1.65})
    assert _ends(SharedCores(2), [("a", 0.0, 1.0), ("b", 0.3, 1.0)]) == pytest.approx({"a": 1.0, "b": 1.3})


def test_equal_work_started_together_ends_together_and_zero_work_at_once():
    ends = _ends(SharedCores(1), [("a", 0.0, 0.5), ("b", 0.0, 0.5), ("z", 0.25, 0.0)])
    assert ends == pytest.approx({"a": 1.0, "b": 1.0, "z": 0.25})
    with pytest.raises(ValueError, match="work_s"):
        SharedCores(1).start(0.0, -1.0, lambda now, sim: None)


class _ConstStep:
    """Every iteration takes 1 s (alone)."""

    def step_s(self, prefill_tokens, prefill_attn_tokens2, decode_batch, decode_context_tokens, *, prefill_seqs=1):
        return 1.0


def test_an_llm_iteration_in_flight_is_slowed_by_a_batch_that_starts_after_it():
    cores, loop, done = SharedCores(1), Simulator(), {}
    core = SharedCoresLLMCore(shared=cores, name="c", step=_ConstStep(), kv_tokens=1600, loop=loop,
                              sink=lambda s, now: done.__setitem__(s.id, now), config=EngineConfig())
    ends: dict[str, float] = {}
    core.submit(Seq(1, 16, 1), 0.0)       # one prefill iteration (its token ends the sequence): 1 s alone
    loop.push(_Start(0.5, cores, 1.0, "batch", ends))
    loop.run()
    assert done == pytest.approx({1: 1.5}) and ends == pytest.approx({"batch": 2.0})
    assert core.busy_s == pytest.approx(1.5) and not core.busy


def test_an_llm_core_times_its_decode_iterations_with_the_decode_cost():
    # 2 cores, a long batch beside: the prefill iteration pays nothing beyond its core, the decode
    # iteration after it (the sequence's second token) the decode's in-process cost, 2x
    cores, loop, done = SharedCores(2, same_process=0.0, decode_same_process=1.0), Simulator(), {}
    core = SharedCoresLLMCore(shared=cores, name="c", step=_ConstStep(), kv_tokens=1600, loop=loop,
                              sink=lambda s, now: done.__setitem__(s.id, now), config=EngineConfig())
    ends: dict[str, float] = {}
    core.submit(Seq(1, 16, 2), 0.0)
    loop.push(_Start(0.0, cores, 10.0, "batch", ends))
    loop.run()
    assert done == pytest.approx({1: 3.0}) and ends == pytest.approx({"batch": 10.0})


def _latencies(cores: int | None, n: int = 4, background: float = 0.0) -> list[float]:
    app = load_app("advanced_rag")
    eng = app.build_engines()
    if cores is not None:
        share_cores(eng, cores, background)
    res = simulate(app.template(), [app.query] * n, [0.0] * n, eng, scheme="teola", seed=0)
    return [r.latency_s for r in res]


def test_more_cores_than_work_change_nothing_and_fewer_slow_queries_down():
    # on shared cores no pass is free (a partial prefill runs alone on an idle instance, not inside a
    # regular pass as on a GPU: engine_scheduler, "Shared CPU cores"), so the unshared run differs a little
    own, many = _latencies(None), _latencies(10_000)
    assert _latencies(100) == pytest.approx(many, rel=1e-12)        # never more than k <= cores at once
    assert many == pytest.approx(own, rel=0.05)
    one, two = _latencies(1), _latencies(2)
    # 4 simultaneous queries contend for one core; with two, the budget also moves work onto busy
    # instances (a pass that runs anyway), which can beat starting every idle one, so no order there
    assert sum(one) > 1.5 * max(sum(two), sum(many))
    assert _latencies(1) == one                        # deterministic


def test_background_tasks_slow_even_an_execution_alone():
    own, busy = _latencies(None, n=1), _latencies(1, n=1, background=1.0)
    assert busy[0] >= 2 * own[0] - 1e-9        # every execution at half speed or less, LLM iterations too


def test_an_llm_on_shared_cores_refuses_the_batch_at_once_protocol():
    app = load_app("naive_rag")
    eng = app.build_engines()
    share_cores(eng, 2)
    with pytest.raises(Exception, match="discrete-event runtime"):
        eng["llm"][0].submit([])


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
    with pytest.raises(ValueError, match="cpu_same_process"):
        Params(apps=("naive_rag",), cpu_same_process=0.2)
