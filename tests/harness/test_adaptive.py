"""Re-selection when load shifts (issue 19): the day profile, the ledger (apply and its reverse),
and the control loop against a scripted backend."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness.adaptive.config import ControllerConfig, TaskModel
from harness.adaptive.controller import Controller
from harness.adaptive.diurnal import DEFAULT_HOURLY, DiurnalProfile, diurnal_workload
from harness.adaptive.ledger import Ledger, Version, release
from harness.trace import Trace
from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from selector.problem import Cluster, Gpu, Instance, parse_problem
from solvers.registry import get_solver

MODEL = "qwen2.5-3b"


def problem(name="a", rate=1.0, gpus=4, instances=(), capacity=1.0):
    """One stage of one call; ``capacity`` requests/s per replica of 10 GB on one GPU."""
    return parse_problem({
        "task": {"name": name, "accuracy_slo": 10.0, "latency_slo_s": 5.0, "arrival_rate_rps": rate},
        "models": [{"name": MODEL, "accuracy": 20.0, "active_params_b": 3.1}],
        "configs": [{"tp": 1, "pp": 1}],
        "workflows": [{"name": "w", "stages": [{"name": "s"}]}],
        "deployments": [{"model": MODEL, "tp": 1, "pp": 1, "mem_gb": 10.0}],
        "perf": [{"workflow": "w", "stage": "s", "model": MODEL, "tp": 1, "pp": 1, "latency_s": 0.5,
                  "capacity_rps": capacity}],
        "cluster": {"gpus": [{"id": g, "mem_gb": 48.0, "used_gb": 0.0} for g in range(gpus)],
                    "instances": list(instances)}})


# ---- the day profile ------------------------------------------------------------------------
def test_profile_peaks_at_one_wraps_and_compresses():
    p = DiurnalProfile(hourly=tuple(2 * x for x in DEFAULT_HOURLY), compression=24)
    assert max(p.hourly) == 1.0 and p.hourly == DiurnalProfile().hourly
    assert p.duration_s == 3600.0 and p.hour_s == 150.0
    for h in (0, 5, 11, 23):                                   # the value at each hour's midpoint
        assert p.multiplier((h + 0.5) * p.hour_s) == pytest.approx(p.hourly[h])
    assert p.multiplier(0.0) == pytest.approx((p.hourly[0] + p.hourly[-1]) / 2)   # 23:30 -> 00:30
    assert p.mean_multiplier() == pytest.approx(0.577, abs=0.002)
    assert p.peak_multiplier() == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError):
        DiurnalProfile(hourly=(1.0,) * 23)
    with pytest.raises(ValueError):
        DiurnalProfile(hourly=(1.0,) * 23 + (0.0,))


def test_diurnal_workload_is_seeded_and_follows_the_curve():
    trace = Trace("t", np.arange(50.0), np.arange(1, 51), np.arange(51, 101)[::-1].copy())
    p = DiurnalProfile(compression=48, peak_x=2.0)
    wl = diurnal_workload(trace, [3.0, 1.0], p, seed=7)
    again = diurnal_workload(trace, [3.0, 1.0], p, seed=7)
    assert np.array_equal(wl.arrival_s, again.arrival_s) and np.array_equal(wl.task, again.task)
    assert (np.diff(wl.arrival_s) >= 0).all() and wl.arrival_s[-1] < p.duration_s
    expect = 2.0 * 4.0 * p.mean_multiplier() * p.duration_s
    assert abs(len(wl) - expect) < 5 * math.sqrt(expect)
    assert (wl.task == 0).mean() == pytest.approx(0.75, abs=0.02)
    hour = (wl.arrival_s // p.hour_s).astype(int)
    busy, quiet = (hour == 11).sum(), (hour == 3).sum()
    assert busy / quiet == pytest.approx(1.0 / 0.2, rel=0.25)
    assert wl.prompt_scale.mean() == pytest.approx(1.0, rel=0.1)
    assert sorted(np.round(wl.difficulty * len(wl) - 0.5).astype(int)) == list(range(len(wl)))


# ---- the ledger ----------------------------------------------------------------------------
def _dep(task, ids, gpus, util=0.4, reuse=()):
    insts = tuple(InstanceSpec(i, MODEL, 1, 1, (g,), 10.0, util) for i, g in zip(ids, gpus))
    routes = (StageRoute("s", 1, (Route(tuple(ids) + tuple(r for r, _ in reuse)),)),)
    return Deployment(task, "w", insts, routes, tuple(reuse))


def test_release_is_the_reverse_of_apply():
    c0 = Cluster(gpus=(Gpu(id=0, mem_gb=48, used_gb=5.0), Gpu(id=1, mem_gb=48, used_gb=0.0)),
                 instances=(Instance(id="x", model=MODEL, tp=1, pp=1, gpus=(1,), utilization=0.2),))
    dep = _dep("a", ["a/s/0"], [0], reuse=(("x", 0.3),))
    c1 = dep.apply(c0)
    assert release(c1, dep) == c0
    kept = release(c1, dep, keep_memory=True)
    assert kept.gpus[0].used_gb == pytest.approx(15.0) and [i.id for i in kept.instances] == ["x"]
    shared = release(c1, dep, still_used=frozenset({"a/s/0"}))
    assert {i.id: round(i.utilization, 9) for i in shared.instances} == {"x": 0.2, "a/s/0": 0.0}


def test_ledger_views_hide_a_tasks_own_instances_but_count_their_memory():
    led = Ledger(problem().cluster)
    va = Version("a", "a", 0, 0, None, 1.0, 1.0, "initial", 0.0)
    raw = _dep("a", ["a/s/0"], [0])
    va = led.commit(va, raw, led.view("a"), rename={}, started=list(raw.instances), now=0.0,
                    startup_s=lambda s: 10.0, warm=True)
    led.promote(va, 0.0)
    vb = Version("b", "b", 1, 0, None, 1.0, 1.0, "initial", 0.0)
    rawb = _dep("b", [], [], reuse=(("a/s/0", 0.25),))
    vb = led.commit(vb, rawb, led.view("b"), rename={}, started=[], now=0.0, startup_s=lambda s: 10.0)
    led.promote(vb, 0.0)
    va_view, vb_view = led.view("a"), led.view("b")
    assert va_view.gpus[0].used_gb == pytest.approx(10.0)
    assert [(i.id, i.utilization) for i in va_view.instances] == [("a/s/0", 0.25)]   # b's share only
    assert [(i.id, i.utilization) for i in vb_view.instances] == [("a/s/0", 0.4)]    # a's share only
    assert led.own("a") == [] and led.own("b") == []        # shared: neither owns it alone
    # a moves to a new instance: the old one stays (b uses it), nothing drains
    va2 = Version("a@1", "a", 0, 1, None, 2.0, 2.0, "up", 5.0)
    raw2 = _dep("a@1", ["a@1/s/0"], [1])
    va2 = led.commit(va2, raw2, led.view("a"), rename={}, started=list(raw2.instances), now=5.0,
                     startup_s=lambda s: 10.0)
    assert led.ready_at("a@1/s/0") == 15.0 and led.promote(va2, 15.0) == []
    # b moves away too: the first instance drains, and is freed when told
    vb2 = Version("b@1", "b", 1, 1, None, 1.0, 1.0, "down", 20.0)
    rawb2 = _dep("b@1", [], [], reuse=(("a@1/s/0", 0.25),))
    vb2 = led.commit(vb2, rawb2, led.view("b"), rename={}, started=[], now=20.0, startup_s=lambda s: 0.0)
    assert led.promote(vb2, 20.0) == ["a/s/0"]
    led.free("a/s/0", 30.0)
    assert led.held_gb() == pytest.approx(10.0)
    assert led.gb_s(40.0) == pytest.approx(10.0 * 30.0 + 10.0 * 35.0)
    assert led.gb_steps(40.0) == [(0.0, 10.0), (5.0, 20.0), (30.0, 10.0), (40.0, 0.0)]


def test_match_keeps_old_instances_of_the_same_model_and_config():
    led = Ledger(problem().cluster)
    v = Version("a", "a", 0, 0, None, 1.0, 1.0, "initial", 0.0)
    raw = _dep("a", ["a/s/0"], [0])
    led.promote(led.commit(v, raw, led.view("a"), rename={}, started=list(raw.instances), now=0.0,
                           startup_s=lambda s: 1.0, warm=True), 0.0)
    up = _dep("a@1", ["a@1/s/0", "a@1/s/1"], [1, 2])
    rename, started = led.match("a", up)
    assert rename == {"a@1/s/0": "a/s/0"} and [i.id for i in started] == ["a@1/s/1"]
    assert led.match("a", up, keep=False) == ({}, list(up.instances))


# ---- the control loop ----------------------------------------------------------------------
class Scripted:
    """A backend whose arrival rate per task is ``rate(t)``; ready at the modelled time; idle
    unless told; misses as scripted."""

    def __init__(self, rate, misses=lambda t: 0.0):
        self.rate, self.misses = rate, misses
        self.ready_at, self.started, self.stopped, self.switches = {}, [], [], []
        self.busy = set()

    def start(self, specs, ready_at):
        for s, r in zip(specs, ready_at):
            self.ready_at[s.id] = r
            self.started.append(s.id)

    def ready(self, iid, now):
        return now >= self.ready_at.get(iid, 0.0) - 1e-9

    def failed(self, iid):
        return False

    def switch(self, k, task):
        self.switches.append((k, tuple(i for s in task.stages for g in s.groups for i in g)))

    def idle(self, iid):
        return iid not in self.busy

    def stop(self, iid):
        self.stopped.append(iid)

    def arrivals(self, k, t0, t1):
        ts = np.arange(t0, t1, 0.01)
        return int(round(sum(self.rate(t) for t in ts) * 0.01))

    def outcomes(self, k, t0, t1, now, slo_s):
        n = self.arrivals(k, t0, t1)
        return n, int(round(n * self.misses(now)))

    def in_flight(self, k, t0, t1):
        return 0


CFG = ControllerConfig(interval_s=5, window_s=20, window_long_s=40, up_gap_s=10, cooldown_s=60,
                       headroom=1.0, startup_fixed_s=10.0)


def _controller(rate, cfg=CFG, misses=lambda t: 0.0, tasks=("a",)):
    back = Scripted(rate, misses)
    tms = [TaskModel(problem(n), {"w": [(100, 10)]}) for n in tasks]
    ctl = Controller(tms, problem().cluster, get_solver("flowmaker"), back, gpu="a6000", config=cfg)
    return ctl, back


def _run(ctl, until, step=1.0):
    t = 0.0
    while t <= until:
        if t > 0 and abs(t / ctl.cfg.interval_s - round(t / ctl.cfg.interval_s)) < 1e-9:
            ctl.tick(t)
        ctl.poll(t)
        t += step


def test_a_steady_load_never_migrates():
    ctl, back = _controller(lambda t: 1.5)
    ctl.deploy([1.5])
    _run(ctl, 600)
    assert [d["outcome"] for d in ctl.decisions] == ["deploy"] and back.started == ["a/s/0", "a/s/1"]


def test_rising_load_starts_one_replica_and_switches_when_it_is_ready():
    ctl, back = _controller(lambda t: 0.8 if t < 50 else 1.6)
    ctl.deploy([0.8])
    _run(ctl, 200)
    moves = [d for d in ctl.decisions if d["outcome"] == "migrate"]
    assert len(moves) == 1 and moves[0]["reason"] == "up"
    assert moves[0]["kept"] == "a/s/0" and moves[0]["started"] == "a@1/s/1"     # 1 -> 2 replicas: one new
    t_up = moves[0]["t_s"]
    h = ctl.ledger.held["a@1/s/1"]
    assert ctl.ledger.ready_at(h.spec.id) == pytest.approx(t_up + 10.0 + 6.17 / 2.0, abs=0.05)  # + weights / 2 GB/s
    assert h.ready_s == math.ceil(ctl.ledger.ready_at(h.spec.id))          # seen at the next poll
    assert back.switches[-1] == (0, ("a/s/0", "a@1/s/1"))
    assert ctl.ledger.current["a"].serving_s == h.ready_s


def test_falling_load_waits_for_the_cooldown_then_drains_and_frees():
    ctl, back = _controller(lambda t: 2.6 if t < 15 else 0.5)
    ctl.deploy([2.6])
    back.busy.add("a/s/2")                                      # one old replica still has calls
    _run(ctl, 100)
    down = [d for d in ctl.decisions if d["reason"] == "down"]
    assert down and down[0]["t_s"] >= CFG.cooldown_s and down[0]["outcome"] == "migrate"
    assert set(down[0]["draining"].split(",")) == {"a/s/1", "a/s/2"}
    assert back.stopped == ["a/s/1"] and ctl.ledger.held["a/s/2"].draining
    back.busy.clear()
    ctl.poll(101.0)
    assert back.stopped == ["a/s/1", "a/s/2"] and ctl.ledger.held["a/s/2"].released_s == 101.0
    assert ctl.ledger.held_gb() == pytest.approx(10.0)


def test_slo_misses_plan_for_more_than_the_load_and_the_plan_is_not_undone():
    ctl, _ = _controller(lambda t: 1.0, misses=lambda t: 0.2 if 40 <= t < 45 else 0.0)
    ctl.deploy([1.0])
    _run(ctl, 300)
    slo = [d for d in ctl.decisions if d["reason"] == "slo"]
    assert len(slo) == 1 and slo[0]["target_rps"] == pytest.approx(1.5 * slo[0]["est_rps"], rel=0.05)
    assert not [d for d in ctl.decisions if d["reason"] == "down"]     # the load has not fallen


def test_static_policy_and_infeasible_reselection_keep_what_serves():
    ctl, back = _controller(lambda t: 3.0, cfg=CFG.model_copy(update={"adaptive": False}))
    ctl.deploy([1.0])
    _run(ctl, 100)
    assert len(ctl.decisions) == 1 and back.started == ["a/s/0"]
    ctl, back = _controller(lambda t: 1.0 if t < 20 else 50.0)      # 50 replicas cannot fit 4 GPUs
    ctl.deploy([1.0])
    _run(ctl, 60)
    assert {d["outcome"] for d in ctl.decisions[1:]} == {"infeasible"}
    assert ctl.ledger.current["a"].name == "a" and back.switches == [(0, ("a/s/0",))]


def test_rate_capacity_deducts_what_other_tasks_put_on_a_reused_instance():
    ctl, _ = _controller(lambda t: 0.3, tasks=("a", "b"))
    ctl.deploy([0.6, 0.3])
    b = ctl.ledger.current["b"]
    assert b.deployment.reuse and b.deployment.reuse[0][0] == "a/s/0"          # b rides on a's instance
    assert ctl.rate_capacity(b) == pytest.approx(1.0 - 0.6)
    assert ctl.rate_capacity(ctl.ledger.current["a"]) == pytest.approx(1.0 - 0.3)


def test_rising_load_changes_the_workflow_and_drains_the_old_one():
    """Two workflows: ``w`` (a 10 GB model carrying 1 req/s per replica) is cheaper at low load,
    ``v`` (a 20 GB model carrying 5 req/s) once ``w`` needs three replicas: the move up
    re-selects the workflow, not only the replica count, and the old workflow's instance drains."""
    big = "qwen2.5-7b"
    p = problem(rate=0.8)
    two = parse_problem({**p.model_dump(mode="json"),
                         "models": [*p.model_dump(mode="json")["models"],
                                    {"name": big, "accuracy": 20.0, "active_params_b": 7.6}],
                         "workflows": [{"name": "w", "stages": [{"name": "s"}]}, {"name": "v", "stages": [{"name": "s"}]}],
                         "deployments": [{"model": MODEL, "tp": 1, "pp": 1, "mem_gb": 10.0},
                                         {"model": big, "tp": 1, "pp": 1, "mem_gb": 20.0}],
                         "perf": [*p.model_dump(mode="json")["perf"],
                                  {"workflow": "v", "stage": "s", "model": big, "tp": 1, "pp": 1, "latency_s": 0.5,
                                   "capacity_rps": 5.0}]})
    back = Scripted(lambda t: 0.8 if t < 50 else 3.0, lambda t: 0.0)
    ctl = Controller([TaskModel(two, {"w": [(100, 10)], "v": [(100, 10)]})], two.cluster, get_solver("flowmaker"),
                     back, gpu="a6000", config=CFG)
    ctl.deploy([0.8])
    assert ctl.ledger.current["a"].deployment.workflow == "w"
    _run(ctl, 200)
    moves = [d for d in ctl.decisions if d["outcome"] == "migrate"]
    assert {d["reason"] for d in moves} == {"up"}
    assert moves[-1]["workflow"] == "v" and moves[-1]["models"] == big
    w_ids = [i for i, h in ctl.ledger.held.items() if h.spec.model == MODEL]      # first window straddles the step
    assert set(moves[-1]["draining"].split(",")) == set(w_ids) and sorted(back.stopped) == sorted(w_ids)
    assert ctl.ledger.current["a"].deployment.workflow == "v" and ctl.ledger.held_gb() == pytest.approx(20.0)


def test_an_infeasible_target_is_not_retried_while_the_load_rises_only_when_it_falls():
    """Issue 25: feasibility is monotone in the rate, so a task no plan can carry is re-selected
    once, not every tick, and not again while its load rises (50 -> 70 rps): only once it falls
    below the blocked target by drift_down (3 rps, three replicas on the 4 GPUs) is it tried again, and then
    placed."""
    ctl, _ = _controller(lambda t: 1.0 if t < 20 else (50.0 if t < 200 else (70.0 if t < 400 else 3.0)))
    ctl.deploy([1.0])
    _run(ctl, 395)
    tried = [d for d in ctl.decisions[1:] if d["outcome"] == "infeasible"]
    assert [d["reason"] for d in tried] == ["up"] and tried[0]["t_s"] <= 45     # while the window fills
    assert ctl.blocked["a"].rate == pytest.approx(tried[0]["target_rps"])
    assert ctl.blocked["a"].kind == tried[0]["block"] == "rate"     # 50 rps is more than 4 empty GPUs carry
    before = len(ctl.decisions)
    _run_from(ctl, 400, 600)
    after = ctl.decisions[before:]
    assert [d["outcome"] for d in after if d["reason"] == "up"] == ["migrate"]
    assert after[0]["t_s"] >= 405 and after[0]["target_rps"] < tried[0]["target_rps"] * (1 - CFG.drift_down)


class PerTask(Scripted):
    """``Scripted`` with one arrival rate per task: ``rates[k](t)``."""

    def __init__(self, rates):
        super().__init__(lambda t: 0.0)
        self.rates = rates

    def arrivals(self, k, t0, t1):
        ts = np.arange(t0, t1, 0.01)
        return int(round(sum(self.rates[k](t) for t in ts) * 0.01))


def _a_frees_room_for_b(b_rate, until_s: float):
    """Tasks ``a`` and ``b`` on 3 GPUs of 20 GB: ``a`` at 1.8 rps until t = 150 s, then 0.3 (its
    moves down free room); ``b`` at ``b_rate(t)``. Returns the controller after ``until_s``,
    ``b``'s decisions after the first deployment and ``a``'s moves."""
    back = PerTask([lambda t: 1.8 if t < 150 else 0.3, b_rate])
    cluster = Cluster(gpus=tuple(Gpu(id=g, mem_gb=20.0, used_gb=0.0) for g in range(3)))
    ctl = Controller([TaskModel(problem(n), {"w": [(100, 10)]}) for n in ("a", "b")], cluster,
                     get_solver("flowmaker"), back, gpu="a6000", config=CFG.model_copy(update={"cooldown_s": 30}))
    ctl.deploy([1.8, 0.5])
    _run(ctl, until_s)
    b = [d for d in ctl.decisions if d["task"] == "b" and d["reason"] != "initial"]
    a_moves = [d for d in ctl.decisions if d["task"] == "a" and d["outcome"] in ("update", "migrate")]
    return ctl, b, a_moves


def test_a_blocked_task_is_retried_when_another_task_frees_room_not_before():
    """Issue 25: on 3 GPUs of 20 GB (two instances each, one replica of a stage per GPU), ``b``
    cannot grow to three replicas while ``a`` holds two; however long its load stays high it is
    not re-selected again until ``a`` changes the cluster (a move down that lowers what it puts on
    its instances, then one that releases one), and it is placed once ``a`` releases."""
    ctl, b, a_moves = _a_frees_room_for_b(lambda t: 0.5 if t < 20 else 2.5, 400)
    blocked = [d for d in b if d["outcome"] == "infeasible"]
    assert blocked and blocked[0]["t_s"] < 60 and a_moves and a_moves[0]["t_s"] >= 150
    assert not [d for d in b if blocked[0]["t_s"] < d["t_s"] < a_moves[0]["t_s"]]     # quiet for 100+ s
    assert {d["t_s"] for d in blocked[1:]} <= {d["t_s"] for d in a_moves}          # retried when a changed it
    release = next(d for d in a_moves if d["outcome"] == "migrate" and d["draining"])
    grown = [d for d in b if d["outcome"] == "migrate" and d["t_s"] >= release["t_s"]]
    assert grown and grown[0]["target_rps"] == pytest.approx(2.5, rel=0.05) and "b" not in ctl.blocked
    assert blocked[0]["block"] == "room" and {d["retry"] for d in blocked[1:] + grown} == {"room"}


def test_a_rate_bound_block_ignores_freed_room_and_a_lower_target_the_empty_cluster_cannot_carry():
    """Issue 25: ``b``'s 50 rps is more than the 3 GPUs carry even emptied (with ``a``'s instances
    to reuse), so ``a``'s moves down, which free memory and start instances, do not retry it, nor
    does its load falling to 30 rps (below the blocked target by drift_down, still more than the
    empty cluster carries); at 1 rps it is tried again and placed."""
    _, b, a_moves = _a_frees_room_for_b(lambda t: 0.5 if t < 20 else (50.0 if t < 300 else (30.0 if t < 500 else 1.0)),
                                        700)
    assert any(d["draining"] for d in a_moves if d["outcome"] == "migrate" and d["t_s"] < 500)   # a freed room
    assert [(d["outcome"], d["block"]) for d in b if d["outcome"] == "infeasible"] == [("infeasible", "rate")]
    later = [d for d in b if d["outcome"] != "infeasible"]
    assert later and later[0]["t_s"] >= 500 and later[0]["retry"] == "lower" and later[0]["target_rps"] < 2


def test_a_never_feasible_task_is_tried_once_and_never_again():
    """Issue 25: no config of ``a`` meets its latency SLO at any rate, and no other task could
    start an instance it might reuse: its first deployment finds no plan, the decision says the
    block is for good, and however its load moves it is not re-selected again."""
    p = problem()
    slow = p.model_copy(update={"perf": tuple(r.model_copy(update={"latency_s": 6.0}) for r in p.perf)})
    back = Scripted(lambda t: 1.0 if t < 100 else (20.0 if t < 300 else 0.05))
    ctl = Controller([TaskModel(slow, {"w": [(100, 10)]})], p.cluster, get_solver("flowmaker"), back,
                     gpu="a6000", config=CFG)
    ctl.deploy([1.0])
    _run(ctl, 600)
    assert [(d["reason"], d["outcome"], d["block"]) for d in ctl.decisions] == [("initial", "infeasible", "never")]
    assert ctl.blocked["a"].kind == "never" and "a" not in ctl.ledger.current


def test_slo_misses_the_plan_cannot_fix_block_the_task_instead_of_growing_its_target():
    ctl, _ = _controller(lambda t: 1.0, misses=lambda t: 0.5 if t >= 40 else 0.0)
    ctl.deploy([1.0])
    _run(ctl, 400)
    slo = [d for d in ctl.decisions if d["reason"] == "slo"]
    assert slo[-1]["outcome"] == "infeasible" and "a" in ctl.blocked     # the bumps end where no plan fits
    assert len(slo) <= 4 and slo[-1]["t_s"] <= 150                       # then none for 250 s (50 ticks)


def test_slo_misses_the_serving_plan_already_covers_block_the_slo_rule_until_the_load_changes():
    """Issue 25: with one replica carrying 100 rps, the plan for 1.5x the load is the serving one
    (outcome update): the SLO rule then waits for the load to move by drift_down, not for the next
    tick's misses, and tries again once it has (1 -> 2 rps)."""
    back = Scripted(lambda t: 1.0 if t < 200 else 2.0, lambda t: 0.5 if t >= 40 else 0.0)
    ctl = Controller([TaskModel(problem(capacity=100.0), {"w": [(100, 10)]})], problem().cluster,
                     get_solver("flowmaker"), back, gpu="a6000", config=CFG)
    ctl.deploy([1.0])
    _run(ctl, 195)
    slo = [d for d in ctl.decisions if d["reason"] == "slo"]
    assert [d["outcome"] for d in slo] == ["update"] and ctl.slo_blocked["a"] == pytest.approx(1.0, rel=0.05)
    _run_from(ctl, 200, 260)
    later = [d for d in ctl.decisions if d["reason"] == "slo" and d["t_s"] >= 200]
    assert later and later[0]["est_rps"] > 1.0 * (1 + CFG.drift_down)


def _run_from(ctl, start, until, step=1.0):
    t = start
    while t <= until:
        if abs(t / ctl.cfg.interval_s - round(t / ctl.cfg.interval_s)) < 1e-9:
            ctl.tick(t)
        ctl.poll(t)
        t += step


def test_week_profile_has_weekday_peaks_and_weekend_troughs_per_trace():
    from harness.adaptive.diurnal import load_week
    code, conv = load_week("code"), load_week("conv")
    assert len(code) == len(conv) == 168 and max(code) == pytest.approx(1.0, abs=1e-3)
    day = lambda c, d: max(c[24 * d:24 * d + 24])                     # noqa: E731 (0 = Monday)
    assert day(code, 5) < 0.3 * day(code, 2) and day(code, 6) < 0.3 * day(code, 1)    # weekend trough (code)
    assert day(conv, 6) < 0.65 * day(conv, 0)                                  # Sunday below Monday (conv)
    p = DiurnalProfile(hourly=code, start_hour=160.0, hours=16.0, compression=3600.0)
    assert p.multiplier(8.5) == pytest.approx(code[0], abs=1e-9)               # wraps Sunday -> Monday
    with pytest.raises(KeyError):
        load_week("nope")
    with pytest.raises(ValueError):
        DiurnalProfile(hourly=(1.0,) * 48)


def test_diurnal_workload_takes_one_curve_per_task():
    trace = Trace("t", np.arange(50.0), np.arange(1, 51), np.arange(51, 101)[::-1].copy())
    flat = DiurnalProfile(hourly=(1.0,) * 24, compression=48, peak_x=1.0)
    low = DiurnalProfile(hourly=(0.25,) * 12 + (1.0,) + (0.25,) * 11, compression=48, peak_x=1.0)
    wl = diurnal_workload(trace, [2.0, 2.0], [flat, low], seed=1)
    n0, n1 = (wl.task == 0).sum(), (wl.task == 1).sum()
    assert n1 / n0 == pytest.approx(low.mean_multiplier(), rel=0.1)
    with pytest.raises(ValueError):
        diurnal_workload(trace, [2.0, 2.0], [flat], seed=1)


def test_shrink_tp_lowers_the_floor_the_memory_latency_objective_leaves():
    """Memory x latency prefers TP2 (12 GB x 0.5 s) over TP1 (10 GB x 1 s) at any load; a move
    down or an adaptive first deployment with ``shrink_tp`` also tries TP1 and keeps the plan
    that holds less memory, still within the SLO."""
    two = parse_problem({
        "task": {"name": "a", "accuracy_slo": 10.0, "latency_slo_s": 5.0, "arrival_rate_rps": 0.2},
        "models": [{"name": MODEL, "accuracy": 20.0, "active_params_b": 3.1}],
        "configs": [{"tp": 1, "pp": 1}, {"tp": 2, "pp": 1}],
        "workflows": [{"name": "w", "stages": [{"name": "s"}]}],
        "deployments": [{"model": MODEL, "tp": 1, "pp": 1, "mem_gb": 10.0}, {"model": MODEL, "tp": 2, "pp": 1,
                                                                                "mem_gb": 12.0}],
        "perf": [{"workflow": "w", "stage": "s", "model": MODEL, "tp": 1, "pp": 1, "latency_s": 1.0,
                  "capacity_rps": 1.0},
                 {"workflow": "w", "stage": "s", "model": MODEL, "tp": 2, "pp": 1, "latency_s": 0.5,
                  "capacity_rps": 2.0}],
        "cluster": {"gpus": [{"id": g, "mem_gb": 48.0, "used_gb": 0.0} for g in range(4)]}})
    tps = {}
    for shrink in ((), (1,)):
        ctl = Controller([TaskModel(two, {"w": [(100, 10)]})], two.cluster, get_solver("flowmaker"),
                         Scripted(lambda t: 0.2), gpu="a6000", config=CFG.model_copy(update={"shrink_tp": shrink}))
        ctl.deploy([0.2])
        tps[shrink] = sorted(h.spec.tp for h in ctl.ledger.held.values())
    assert tps == {(): [2], (1,): [1]}


def _first_up(cfg, rate, until=200):
    """The first up decision of one task (one replica of capacity 10 rps, deployed at 10 rps)."""
    back = Scripted(rate)
    ctl = Controller([TaskModel(problem(capacity=10.0), {"w": [(100, 10)]})], problem().cluster,
                     get_solver("flowmaker"), back, gpu="a6000", config=cfg)
    ctl.deploy([10.0])
    _run(ctl, until)
    return next((d for d in ctl.decisions if d["reason"] == "up"), None)


def ramp(t: float) -> float:
    """10 rps, rising by 0.2 rps per second from t = 40 s."""
    return 10.0 if t < 40 else 10.0 + 0.2 * (t - 40)


def test_slack_past_capacity_is_dropped_while_the_load_rises():
    """Issue 25: ``drift_up`` lets a plan run past its capacity on a level load; ``drift_up_rising``
    replaces it while the load rises, so a ramp is met earlier and a level load still uses the
    slack."""
    slack = CFG.model_copy(update={"drift_up": 0.5})
    rising = slack.model_copy(update={"drift_up_rising": 0.0})
    late, early = _first_up(slack, ramp), _first_up(rising, ramp)
    assert late is not None and early is not None and early["t_s"] < late["t_s"] - 10
    for cfg in (slack, rising):                                           # 1.3x capacity, level: slack kept
        assert _first_up(cfg, lambda t: 13.0) is None
    assert _first_up(CFG, lambda t: 13.0) is not None                      # no slack: it moves
    ctl, _ = _controller(ramp, cfg=rising)
    on_ramp = Scripted(ramp).arrivals(0, 120.0, 140.0) / 20.0
    assert ctl._rising(0, 140.0, 20.0, 40.0, on_ramp) and not ctl._rising(0, 140.0, 20.0, 40.0, 10.0)
