"""Issue 23 item 3: the what-if's load options (harness/load.py): closed loop (``--concurrency``),
Poisson arrivals (``--rate``) and the warning when the offered load exceeds what is served."""
from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.load import overload
from harness.simulate import SimulateConfig, simulate
from profiler.engine import EngineConfig
from tests.harness.helpers import LinearStep, make_trace, poisson_trace


def _sim(trace, **cfg):
    cfg.setdefault("engine", EngineConfig(kv_capacity_tokens=16 * 4000))
    res = simulate(trace, SimulateConfig(model="x", gpu="y", **cfg), step=LinearStep())
    res.instances[0].check()
    return res


def _in_flight(t) -> np.ndarray:
    """Requests sent but not returned, just after each send."""
    return np.array([np.sum((t["arrival_s"] <= a) & (t["done_s"] > a)) for a in t["arrival_s"]])


def test_one_client_sends_each_request_when_the_last_returns():
    """Closed loop, N = 1 (GuideLLM's synchronous): request i is sent when request i-1 returns,
    the trace's arrival times are ignored, nothing ever queues."""
    trace = make_trace([0.0, 100.0, 100.0, 300.0, 301.0], [100, 20, 300, 50, 5], [1, 4, 2, 10, 1])
    t = _sim(trace, concurrency=1).table
    assert t["arrival_s"][0] == 0.0
    np.testing.assert_allclose(t["arrival_s"][1:], t["done_s"][:-1])
    assert np.all(t["sched_s"] == t["arrival_s"])
    assert t["done_s"][-1] < 1.0                     # far before the trace's own last arrival


def test_n_clients_keep_exactly_n_requests_in_flight_until_the_requests_run_out():
    trace = make_trace(np.zeros(30), np.arange(30) * 17 % 200 + 10, np.arange(30) * 7 % 40 + 1)
    res = _sim(trace, concurrency=4)
    t = res.table
    assert res.summary["completed"] == 30 and np.sum(t["arrival_s"] == 0.0) == 4
    assert np.all(_in_flight(t)[:27] == 4) and np.all(_in_flight(t) <= 4)
    assert res.summary["served_rps"] == pytest.approx(30 / res.summary["simulated_s"])
    assert res.summary["load"] == "closed loop, 4 clients" and not res.summary["overloaded"]


def test_max_requests_is_the_closed_loops_request_count():
    trace = make_trace(np.zeros(50), 40, 5)
    res = _sim(trace, concurrency=3, max_requests=12)
    assert res.summary["requests"] == 12 == res.summary["completed"]


def test_a_failed_request_returns_to_its_client_too():
    """A request too large for the KV cache fails at once; its client goes on to the next one."""
    trace = make_trace(np.zeros(6), [50, 10_000, 50, 10_000, 50, 50], 4)
    res = _sim(trace, concurrency=1, engine=EngineConfig(kv_capacity_tokens=1600))
    assert res.summary["failed"] == 2 and res.summary["completed"] == 4


def test_rate_gives_poisson_arrivals_of_the_traces_requests_in_order():
    trace = make_trace(np.zeros(4000), np.arange(4000) % 90 + 1, 2)
    res = _sim(trace, rate_rps=5.0, seed=3)
    a = res.table["arrival_s"]
    gaps = np.diff(a)
    assert a[0] == 0.0 and gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert np.std(gaps) == pytest.approx(0.2, rel=0.08)             # exponential: sd = mean
    np.testing.assert_array_equal(res.table["prompt_tokens"], trace.prompt_tokens)
    again = _sim(trace, rate_rps=5.0, seed=3).table["arrival_s"]
    np.testing.assert_array_equal(a, again)
    assert not np.array_equal(a, _sim(trace, rate_rps=5.0, seed=4).table["arrival_s"])


def test_overload_is_flagged_above_capacity_and_not_below():
    """LinearStep serves a 100-token prompt with 1 output token in 20 ms alone, ~100/s batched:
    at 1,000/s the queue grows by ~0.9 s per s; at 20/s it does not grow."""
    high = _sim(poisson_trace(1000.0, 3000, 100, 1), rate_rps=1000.0).summary
    low = _sim(poisson_trace(20.0, 600, 100, 1), rate_rps=20.0).summary
    assert high["overloaded"] and high["queue_growth"] > 0.5 and high["served_rps"] < 0.5 * high["offered_rps"]
    assert not low["overloaded"] and abs(low["queue_growth"]) < 0.01
    assert low["offered_rps"] == pytest.approx(20.0, rel=0.15)


def test_overload_needs_both_a_growing_queue_and_a_shortfall():
    """A burst at the start that is then worked off (the queue shrinks) is no overload."""
    n = 200
    t = {"arrival_s": np.linspace(0, 100, n), "sched_s": np.linspace(0, 100, n) + np.linspace(5, 0, n),
         "done_s": np.linspace(0, 100, n) + np.linspace(5, 0, n) + 1, "failed": np.zeros(n, dtype=bool)}
    assert not overload(t)["overloaded"]
    t["sched_s"] = t["arrival_s"] + t["arrival_s"] * 0.5        # grows by 0.5 s per s
    t["done_s"] = t["sched_s"] + 1
    o = overload(t)
    assert o["overloaded"] and o["queue_growth"] == pytest.approx(0.5)


def _trace_file(tmp_path, n=400):
    p = tmp_path / "t.csv"
    p.write_text("arrived_at_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.01},{300 + i % 50},{100}\n"
                                                                         for i in range(n)))
    return str(p)


def test_the_command_warns_in_one_line_when_the_load_exceeds_capacity(tmp_path, capsys):
    base = ["simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", _trace_file(tmp_path)]
    assert main([*base, "--rate", "200"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: offered load") and err.count("\n") == 1 and "grows without bound" in err
    assert "poisson 200 req/s" in out
    assert main([*base, "--rate", "1", "--max-requests", "60"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "poisson 1 req/s" in out
    assert main([*base, "--concurrency", "16", "--max-requests", "100"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "closed loop, 16 clients, served" in out


@pytest.mark.parametrize("args, option", [(["--rate", "2", "--concurrency", "3"], "--concurrency"),
                                          (["--rate", "0"], "--rate"), (["--concurrency", "0"], "--concurrency"),
                                          (["--rate", "2", "--time-scale", "2"], "--time-scale")])
def test_load_option_errors_are_one_line_naming_the_option(tmp_path, capsys, args, option):
    argv = ["simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", _trace_file(tmp_path, 5), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {option}:") and err.count("\n") == 1
