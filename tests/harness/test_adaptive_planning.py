"""The controller's planning rules beside the selector (issue 25): packing, the GPU score with
smaller TP on every selection, the seasonal forecast and the hold after SLO moves."""
from __future__ import annotations

import numpy as np
import pytest

from harness.adaptive.config import TaskModel
from harness.adaptive.controller import Controller
from harness.adaptive.planning import cluster_busy, forecast_ratio, pack
from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from selector.problem import Cluster, Gpu, parse_problem
from solvers.registry import get_solver
from tests.harness.test_adaptive import CFG, MODEL, Scripted, _controller, _run, problem

OTHER = "llama-3.2-3b"


def _solo(name, model, gpus=4):
    p = problem(name, gpus=gpus).model_dump(mode="json")
    p["models"][0]["name"] = model
    p["deployments"][0]["model"] = model
    p["perf"][0]["model"] = model
    return parse_problem(p)


def _two_tasks(cfg, rate=0.2):
    a, b = _solo("a", MODEL), _solo("b", OTHER)
    tms = [TaskModel(a, {"w": [(100, 10)]}), TaskModel(b, {"w": [(100, 10)]})]
    ctl = Controller(tms, a.cluster, get_solver("flowmaker"), Scripted(lambda t: rate), gpu="a6000", config=cfg)
    ctl.deploy([rate, rate])
    return {h.spec.id: h.spec.gpus for h in ctl.ledger.held.values()}


def test_packing_puts_a_new_instance_on_a_held_gpu_while_its_compute_allows():
    # the selector's placement (most free memory) spreads; packing puts b on a's GPU (0.2 + 0.2 <= 0.8)
    assert _two_tasks(CFG) == {"a/s/0": (0,), "b/s/0": (1,)}
    assert _two_tasks(CFG.model_copy(update={"pack_busy": 0.8})) == {"a/s/0": (0,), "b/s/0": (0,)}
    # 0.5 + 0.5 > 0.8: the selector's placement stands
    assert _two_tasks(CFG.model_copy(update={"pack_busy": 0.8}), rate=0.5) == {"a/s/0": (0,), "b/s/0": (1,)}


def test_pack_is_best_fit_keeps_replicas_apart_and_leaves_kept_instances():
    view = Cluster(gpus=tuple(Gpu(id=g, mem_gb=48.0, used_gb=u) for g, u in enumerate((10.0, 20.0, 0.0, 0.0))))
    new = [InstanceSpec(f"t/s/{i}", MODEL, 1, 1, (2 + i,), 10.0, 0.3) for i in range(2)]
    raw = Deployment("t", "w", tuple(new), (StageRoute("s", 1, (Route(tuple(i.id for i in new), 1.0),)),))
    busy = cluster_busy([((0,), 0.2), ((1,), 0.4)])
    out = pack(raw, [i.id for i in new], view, busy, 0.8, {0, 1})
    # busiest held GPU first (1: 0.4), the second replica of the same config on another (0)
    assert [i.gpus for i in out.instances] == [(1,), (0,)]
    assert pack(raw, ["t/s/1"], view, busy, 0.8, {0, 1}).instances[0].gpus == (2,)     # not started: as planned
    assert [i.gpus for i in pack(raw, [i.id for i in new], view, busy, 0.5, {0, 1}).instances] == [(0,), (3,)]


def test_the_gpu_score_with_smaller_tp_on_every_selection_holds_fewer_gpus():
    """Memory x latency takes TP2 (2 GPUs, 12 GB); scored by whole GPUs with TP1 tried on every
    selection, a static plan takes TP1 (1 GPU, 10 GB) and still meets the SLO."""
    two = problem().model_dump(mode="json")
    two["configs"].append({"tp": 2, "pp": 1})
    two["deployments"].append({"model": MODEL, "tp": 2, "pp": 1, "mem_gb": 12.0})
    two["perf"] = [{**two["perf"][0], "latency_s": 1.0},
                   {**two["perf"][0], "tp": 2, "latency_s": 0.5, "capacity_rps": 2.0}]
    two = parse_problem(two)
    static = CFG.model_copy(update={"adaptive": False, "shrink_tp": (1,)})
    held = {}
    for how, cfg in (("gb", static), ("gpu", static.model_copy(update={"score": "gpu", "shrink_moves": "all"}))):
        ctl = Controller([TaskModel(two, {"w": [(100, 10)]})], two.cluster, get_solver("flowmaker"),
                         Scripted(lambda t: 0.6), gpu="a6000", config=cfg)
        ctl.deploy([0.6])
        held[how] = sorted((h.spec.tp, h.spec.gpus) for h in ctl.ledger.held.values())
    assert held == {"gb": [(2, (0, 1))], "gpu": [(1, (0,))]}


def test_forecast_ratio_is_the_peak_ahead_over_the_mean_behind():
    def fc(k, t):
        return np.where(np.asarray(t) < 100.0, 1.0, 2.0)
    assert forecast_ratio(fc, 0, 50.0, 40.0, 30.0) == pytest.approx(1.0)
    assert forecast_ratio(fc, 0, 80.0, 40.0, 30.0) == pytest.approx(2.0)
    assert forecast_ratio(fc, 0, 140.0, 20.0, 30.0) == pytest.approx(1.0)


def test_a_forecast_ramp_moves_up_before_the_load_arrives_and_holds_moves_down():
    def ramp(k, t):
        return np.where(np.asarray(t) < 100.0, 1.0, 2.0)
    cfg = CFG.model_copy(update={"forecast_s": 30.0})
    for fc, first_up in ((None, None), (ramp, 70.0)):
        ctl, back = _controller(lambda t: 0.8, cfg=cfg)
        ctl.forecast = fc
        ctl.deploy([0.8])
        _run(ctl, 95)
        ups = [d for d in ctl.decisions if d["reason"] == "up"]
        assert (ups[0]["t_s"] if ups else None) == first_up
    # the load fell, but the forecast says it comes back within the cooldown: no move down
    ctl, _ = _controller(lambda t: 2.6 if t < 15 else 0.5, cfg=cfg.model_copy(update={"forecast_s": 1.0}))
    ctl.forecast = lambda k, t: np.where(np.asarray(t) < 90.0, 1.0, 6.0)
    ctl.deploy([2.6])
    _run(ctl, 85)
    assert not [d for d in ctl.decisions if d["reason"] == "down"]


def test_slo_hold_keeps_the_plan_that_fixed_the_misses_for_a_while():
    def load(t):
        return 1.0 if t < 60 else 0.3
    for hold, downs in ((0.0, True), (500.0, False)):
        ctl, _ = _controller(load, cfg=CFG.model_copy(update={"slo_hold_s": hold}),
                             misses=lambda t: 0.2 if 40 <= t < 45 else 0.0)
        ctl.deploy([1.0])
        _run(ctl, 300)
        assert [d for d in ctl.decisions if d["reason"] == "slo"]
        assert bool([d for d in ctl.decisions if d["reason"] == "down" and d["outcome"] == "migrate"]) is downs
