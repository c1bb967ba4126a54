"""The wall-clock runtime reuses the orchestrator's schedulers: with simulated engines slept in
(scaled) real time it computes exactly what the discrete-event simulation computes; a dying
engine fails its queries and keeps every other result; the real CPU experiment gives Teola and
LlamaDist identical answers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator import load_app, simulate
from orchestrator.engines.base import EngineDeadError, PendingBatch
from orchestrator.runtime.realtime import run_realtime


@pytest.mark.parametrize("app_name", ["naive_rag", "advanced_rag", "search_gen", "contextual_rag"])
@pytest.mark.parametrize("scheme", ["teola", "llamadist-to"])
def test_wall_clock_runtime_matches_simulation_outputs(app_name, scheme):
    app = load_app(app_name)
    cfgs = app.query_configs(2, np.random.default_rng(0))
    arr = [0.0, 0.02]
    sim = simulate(app.template(), cfgs, arr, app.build_engines(), scheme=scheme, seed=3)
    rep = run_realtime(app.template(), cfgs, arr, app.build_engines(), scheme=scheme, seed=3, time_scale=0.01,
                       timeout_s=60)
    assert not rep.failed
    assert [r.outputs for r in rep.results] == [r.outputs for r in sim]
    assert all(r.latency_s > 0 for r in rep.results)


class _Dying:
    """Wraps a simulated instance; after ``ok`` batches it dies like an unreachable server."""

    def __init__(self, inner, ok: int) -> None:
        self.inner, self.ok = inner, ok
        self.name, self.kind, self.serves = inner.name, inner.kind, inner.serves
        self.continuous = inner.continuous

    def __getattr__(self, item):
        return getattr(self.inner, item)

    def submit(self, batch, **kw):
        if self.ok <= 0:
            return _Raising()
        self.ok -= 1
        return self.inner.submit(batch, **kw)


class _Raising(PendingBatch):
    add_done_callback = None

    def result(self):
        raise EngineDeadError("connection refused")


def test_engine_dying_mid_run_fails_its_queries_and_keeps_finished_ones():
    app = load_app("naive_rag")
    cfgs = app.query_configs(4, np.random.default_rng(0))
    alone = run_realtime(app.template(), cfgs[:1], [0.0], app.build_engines(), scheme="llamadist-po",
                         time_scale=0.01, timeout_s=30)
    engines = app.build_engines()
    # the embedder serves query 0 completely, then dies
    engines["embedder"] = [_Dying(e, ok=alone.batches["embedder"][0]) for e in engines["embedder"]]
    rep = run_realtime(app.template(), cfgs, [0.0, 0.5, 1.0, 1.0], engines, scheme="llamadist-po",
                       time_scale=0.01, timeout_s=30)
    assert rep.dead_instances == ["bge-large-en-v1.5#0"]
    assert [r.qid for r in rep.results] == [0]          # finished work is kept
    assert sorted(rep.failed) == [1, 2, 3]
    assert "EngineDeadError" in rep.failed[1]
    assert all("no live instance" in rep.failed[q] for q in (2, 3))
    assert [(r.qid, r.ok) for r in rep.outcomes] == [(0, True), (1, False), (2, False), (3, False)]
    assert all(rep.failed[r.qid] == r.error and r.latency_s >= 0 for r in rep.outcomes if not r.ok)


def test_real_cpu_experiment_teola_and_llamadist_agree(tmp_path, monkeypatch):
    import gc

    from experiments.run import main
    calls = {"freeze": 0, "unfreeze": 0}
    for name in calls:                  # engines built freeze the start-up heap, closed engines thaw it
        real = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda real=real, name=name: (calls.__setitem__(name, calls[name] + 1), real())[1])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("experiment: t\nkind: teola_real_cpu\nparams:\n  n_queries: 2\n  rates_rps: {naive_rag: [20], advanced_rag: [20]}\n  repeats: 1\n"
                   "  answer_tokens: 6\n  leaf_tokens: 6\n  schemes: [teola, llamadist-po]\n"
                   "  segment_gap_s: 0.001\n")      # every query its own segment: the schemes take turns per query
    assert main([str(cfg), "--results", str(tmp_path / "res"), "--no-progress"]) == 0
    (run_dir,) = (tmp_path / "res" / "t").iterdir()
    s = pd.read_parquet(run_dir / "summary.parquet")
    assert set(s.app) == {"naive_rag", "advanced_rag"} and (s.failed == 0).all()
    assert s["same_answers_as_teola"].all()
    assert calls["freeze"] == calls["unfreeze"] > 0 and gc.get_freeze_count() == 0
    q = pd.read_parquet(run_dir / "queries.parquet")
    assert len(q) == 8 and (q.latency_s > 0).all()
    assert (q.arrival_s <= q.drawn_arrival_s + 1e-9).all() and (q.idle_cut_s >= 0).all()   # idle waits cut only
    assert sorted(q[q.scheme == "teola"].qid) == [0, 0, 1, 1]          # per app, the block's query indices
    b = pd.read_parquet(run_dir / "blocks.parquet")                # one block per (repeat, rate, app), order rotated
    assert len(b) == 2 and b.order.iloc[0] != b.order.iloc[1] and b.load_before.str.count("/").eq(2).all()
    assert (b.steal_s >= 0).all()
    assert "| naive_rag | 20 |" in (run_dir / "summary.md").read_text()
    cells = sorted((run_dir / "cells").glob("*.parquet"))      # experiments.executor cells: resumable
    assert len(cells) == 2 + 2 * 3                              # isolated per app; (queries, block, calls) per block
    c = pd.read_parquet(run_dir / "calls.parquet")               # every engine call of the blocks, timed
    assert set(c.scheme) == {"teola", "llamadist-po"} and {"EMBEDDING", "DECODING", "RERANKING"} <= set(c.kind)
    assert (c.ready_s <= c.dispatch_s).all() and (c.dispatch_s <= c.start_s + 1e-3).all()
    assert (c.start_s <= c.end_s).all() and (c.end_s <= c.done_s + 1e-3).all() and (c.cpu_s >= 0).all()
    assert "Per-call costs" in (run_dir / "summary.md").read_text()
    stamp = {c: c.stat().st_mtime_ns for c in cells}
    assert main([str(cfg), "--results", str(tmp_path / "res"), "--run-id", run_dir.name, "--no-progress"]) == 0
    assert {c: c.stat().st_mtime_ns for c in cells} == stamp
    pd.testing.assert_frame_equal(pd.read_parquet(run_dir / "summary.parquet"), s)


def test_a_host_promotes_a_queued_partial_prefill_and_ignores_a_launched_one():
    """The graph scheduler promotes a partial prefill whose full prefill waits only for it
    (``SimState.promote_partial``); in real time the host marks it critical while it is queued
    (timing decides whether it still is: the call must exist on every host)."""
    import threading
    from types import SimpleNamespace

    from orchestrator.runtime.realtime import EngineHost

    host = EngineHost.__new__(EngineHost)       # only the queue and its lock matter here
    host._lock = threading.RLock()
    host.sched = SimpleNamespace(pending=[SimpleNamespace(payload=SimpleNamespace(key="1/p"))], critical=set())
    assert host.promote("1/p", 0.0) == [] and host.sched.critical == {"1/p"}
    assert host.promote("2/p", 0.0) == [] and host.sched.critical == {"1/p"}


def test_idle_gaps_are_cut_and_overlapping_arrivals_keep_their_offsets():
    app = load_app("naive_rag")
    cfgs = app.query_configs(3, np.random.default_rng(0))
    arr = [0.0, 30.0, 30.001]      # an idle half-minute, then two queries at once
    full = simulate(app.template(), cfgs, arr, app.build_engines(), scheme="teola", seed=3)
    rep = run_realtime(app.template(), cfgs, arr, app.build_engines(), scheme="teola", seed=3, time_scale=0.01,
                       timeout_s=60, idle_gap_s=0.05)
    assert not rep.failed and rep.wall_s < 5
    first, second, third = rep.outcomes
    assert 0.04 <= second.arrival_s - first.finish_s < 1.0          # cut to the gap (plus loop lag), not 30 s
    assert third.arrival_s - second.arrival_s == pytest.approx(0.001)
    assert rep.idle_cut_s == pytest.approx(30.0 - second.arrival_s)
    assert [r.outputs for r in rep.results] == [r.outputs for r in full]
    with pytest.raises(ValueError, match="idle_gap_s"):
        run_realtime(app.template(), cfgs, arr, app.build_engines(), scheme="teola", idle_gap_s=0.05,
                     host_factory=lambda **kw: object())


def test_segments_split_the_arrivals_at_long_gaps_only():
    from experiments.kinds.teola_real_cpu import segments
    arr = np.array([0.0, 0.5, 4.0, 4.2, 4.3, 9.0])
    assert segments(arr, 3.0) == [slice(0, 2), slice(2, 5), slice(5, 6)]
    assert segments(arr, 10.0) == [slice(0, 6)]
    assert segments(arr[:1], 3.0) == [slice(0, 1)]
