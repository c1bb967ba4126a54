"""The re-selection control loop: watch each task's arrival rate and SLO misses, re-run a selector
on the cluster as it stands when they drift, and migrate (start the new instances, switch when
they are ready, drain and release the old ones).

The controller is backend-agnostic: it drives a :class:`Backend` (``harness.adaptive.sim``: the
cluster simulator; ``harness.adaptive.live``: real servers) through :meth:`Controller.tick`
(every ``interval_s``: decide) and :meth:`Controller.poll` (often: promote versions whose new
instances are ready, release drained instances). It never imports a solver: the caller hands it a
selector (anything with ``select(problem, *, time_limit_s)``, e.g. ``solvers.registry``'s).

Per task and tick, with ``r_s`` the arrival rate over the last ``window_s``, ``r_l`` over the
last ``window_long_s``, ``h = headroom``, ``P`` the rate the serving plan was selected for and
``C`` the rate it can carry (:meth:`Controller.rate_capacity`: the selector's own capacity rows,
what other tasks already put on reused instances deducted):

1. **up**: ``r_s * h > C' + up_z * sqrt(C' * h / window_s)``, ``C' = C * (1 + drift_up)`` (the
   count over the window exceeds what the plan carries by ``up_z`` Poisson standard deviations,
   so noise alone rarely triggers), and ``up_gap_s`` since the task's last migration: re-select
   for ``r_s * h``. While the load rises (the short window's count above what the rest of the
   long window predicts by ``up_z`` standard deviations), ``drift_up_rising`` replaces
   ``drift_up``: the slack past capacity that a level load may use is not spent on a ramp, whose
   rate keeps rising while a new plan starts;
2. **slo**: of the requests the serving version took in the last ``window_s``, at least
   ``slo_min_judged`` judged and more than ``slo_miss_share`` of them late or failed, and
   ``up_gap_s`` since the last migration: re-select for ``max(r_s * h, P) * slo_bump``;
3. **down**: ``max(r_s, r_l) * h < L * (1 - drift_down)``, ``L`` the load the plan is meant for
   (``P``, or after an SLO move the rate before the bump, so the plan that fixed the misses is not
   undone while the load stays), and ``cooldown_s`` since the last migration or the last move
   down that changed nothing: re-select for ``max(r_s, r_l) * h * (1 + down_margin)`` (a margin,
   so that noise does not send it straight back up), and migrate only if it pays for itself: the
   memory it frees over ``cooldown_s``, less what its new instances hold while they start, must be
   at least ``min_saving`` of the task's own memory over ``cooldown_s`` (else wait ``cooldown_s``).

**Back-off** (``harness.adaptive.backoff``): a re-selection that finds no plan for target ``t``
*blocks* the task at ``t``: no rule re-selects it for a target ``>= t * (1 - drift_down)`` until the
cluster offers more room (room-bound; each failed try doubles the wait from ``up_gap_s``) or, when
neither the emptied cluster (the instances it may reuse kept) nor the bare one has a plan
(rate-bound), the instances it may reuse change and a probe then finds one; a lower target only
if a probe finds a plan for it (never-feasible: blocked for good). An SLO move that finds no plan
or only the serving plan blocks the SLO rule until ``r_s`` moves by ``drift_down``.

Each re-selection runs the selector on the task's full problem and (``rescale``) within the
serving variant; a move down (and an adaptive first deployment) also once per bound of
``shrink_tp`` (configs of at most that many GPUs per replica: memory x latency prefers large TP
at any load; ``shrink_moves="all"``: every selection); it takes the plan whose score (memory, or with
``score="gpu"`` whole GPUs held, over ``cooldown_s`` plus start-up overlap) is least; ``pack_busy``
re-places started instances best-fit, ``forecast_s`` adds a seasonal forecast to rules 1 and 3,
``slo_hold_s`` keeps an SLO move's target a while (``harness.adaptive.planning``).
Old instances of the same model and config are kept (``keep_matching``). A plan that routes to
the same instances only updates the planned rate (outcome ``update``); one that starts or drains
an instance is a **migration**; gaps count from when it completes. Start-up of a new instance
(the simulator's model): ``startup_fixed_s + weights_gb / load_gb_per_s``. docs/reselection.md
has the rules' rationale (hysteresis) and the parameters.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from harness.adaptive.backoff import Block, Probes, Reuse, block_kind, reuse_ids, roomiest
from harness.adaptive.config import Backend, ControllerConfig, TaskModel
from harness.adaptive.ledger import Ledger, Version, room, roomier, version_name
from harness.adaptive.planning import Candidate, Forecast, candidate, forecast_ratio
from harness.cluster import SimTask
from harness.replay import deployment_task
from selector.deployment import Deployment, InstanceSpec
from selector.problem import TOL, Cluster, Problem


class Controller:
    """The control loop of the module docstring over ``tasks`` (their order is the deployment
    order) on ``cluster`` (its GPUs, sharing mode and pre-existing instances)."""

    def __init__(self, tasks: Sequence[TaskModel], cluster: Cluster, selector: Any, backend: Backend, *,
                 gpu: str, config: ControllerConfig = ControllerConfig(), forecast: Forecast | None = None) -> None:
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be distinct: {names}")
        self.tasks, self.selector, self.backend, self.gpu, self.cfg = list(tasks), selector, backend, gpu, config
        self.forecast = forecast if config.forecast_s > 0 else None
        self.ledger = Ledger(cluster)
        self.gen = {n: -1 for n in names}
        self.last_move = {n: -math.inf for n in names}
        self.next_up = {n: -math.inf for n in names}
        self.next_down = {n: -math.inf for n in names}
        self.blocked: dict[str, Block] = {}           # task -> its back-off block (harness.adaptive.backoff)
        self.probes = Probes()                        # the blocks' feasibility probes on the roomiest cluster
        self._room_wait: dict[str, float] = {}        # task -> wait after a retry on more room that failed
        self.slo_blocked: dict[str, float] = {}       # task -> r_s at which SLO moves found nothing bigger
        self._retry: dict[str, str] = {}              # task -> why a blocked task is re-selected (decision "retry")
        self.slo_floor: dict[str, tuple[float, float]] = {}   # task -> (SLO move's target, until when)
        self.decisions: list[dict] = []
        self.select_s = 0.0
        self._models = [{m.name for m in t.problem.models} for t in tasks]
        outside = {i.model for i in cluster.instances}
        self._can_reuse = [bool(m & (outside | {x for j, o in enumerate(self._models) if j != k for x in o}))
                           for k, m in enumerate(self._models)]
        self._caps = [{(r.workflow, r.stage, r.model, r.tp, r.pp): r.capacity_rps for r in t.problem.perf}
                      for t in tasks]

    # ---- the loop ---------------------------------------------------------------------
    def deploy(self, rates_rps: Sequence[float], *, now: float = 0.0, warm: bool = True) -> None:
        """First deployment, task after task (spec section 8) at ``rates_rps``; ``warm``: its
        instances are ready at once (the run starts with them loaded)."""
        for k, rate in enumerate(rates_rps):
            self._reselect(k, max(rate, self.cfg.min_rate_rps), rate, "initial", now, warm=warm)
        self.poll(now)

    def tick(self, now: float) -> None:
        """One control period: estimate, decide, re-select (module docstring)."""
        if not self.cfg.adaptive or now <= 0:
            return
        c = self.cfg
        for k, tm in enumerate(self.tasks):
            name = tm.name
            if name in self.ledger.pending:
                continue
            w, wl = min(c.window_s, now), min(c.window_long_s, now)
            r_s = self.backend.arrivals(k, now - w, now) / w
            r_l = self.backend.arrivals(k, now - wl, now) / wl
            cur = self.ledger.current.get(name)
            since = now - self.last_move[name]
            if cur is None:
                target = max(r_s * c.headroom, c.min_rate_rps)
                if now >= self.next_up[name] and self._open(k, target, now):
                    self._reselect(k, target, r_s, "unplaced", now)
                continue
            p = cur.rate_rps
            r_up, est_down = r_s, max(r_s, r_l)
            floor, until = self.slo_floor.get(name, (0.0, -math.inf))
            floor = floor if now < until else 0.0       # slo_hold_s: a plan that fixed misses stays a while
            if self.forecast is not None:       # the measured level times the profile's shape ahead
                r_up = r_s * max(1.0, forecast_ratio(self.forecast, k, now, w, c.forecast_s))
                est_down = max(est_down, r_s * forecast_ratio(self.forecast, k, now, w, c.cooldown_s))
            # misses are judged on requests the serving version took (not those of the plan it replaced)
            judged, missed = self.backend.outcomes(k, max(now - w, cur.serving_s), now, now,
                                                   tm.problem.task.latency_slo_s)
            up_ok = since >= c.up_gap_s and now >= self.next_up[name]
            slack = c.drift_up_rising if c.drift_up_rising is not None and self._rising(k, now, w, wl, r_s) \
                else c.drift_up
            cap = self.rate_capacity(cur) * (1 + slack)
            down = max(est_down * c.headroom * (1 + c.down_margin), c.min_rate_rps, floor)
            # a Poisson count of mean cap * w / headroom has sd sqrt(that): noise alone rarely passes
            if (r_up * c.headroom > cap + c.up_z * math.sqrt(max(cap, 0.0) * c.headroom / w) + TOL and up_ok
                    and self._open(k, r_up * c.headroom, now)):
                self._reselect(k, r_up * c.headroom, r_s, "up", now)
            elif (judged >= c.slo_min_judged and missed > c.slo_miss_share * judged and up_ok
                  and self._slo_open(name, r_s) and self._open(k, max(r_up * c.headroom, p) * c.slo_bump, now)):
                self._reselect(k, max(r_up * c.headroom, p) * c.slo_bump, r_s, "slo", now)
            elif (max(est_down * c.headroom, floor) < cur.load_rps * (1 - c.drift_down) - TOL
                  and since >= c.cooldown_s and now >= self.next_down[name] and self._open(k, down, now)):
                self._reselect(k, down, est_down, "down", now)
        self.poll(now)

    def poll(self, now: float) -> float | None:
        """Promote pending versions whose new instances are ready; release drained instances.
        Returns when the next poll is useful (None: nothing pending or draining)."""
        nxt = math.inf
        for name, v in list(self.ledger.pending.items()):
            if any(self.backend.failed(i) for i in v.started):
                self._abandon(v, now)
                continue
            # every instance it routes to must serve: its own new ones, and reused ones still loading
            waiting = [i for i in v.instance_ids if i in self.ledger.held and not self._ready(i, now)]
            if waiting:
                nxt = min(nxt, max(now + 1e-6, min(self.ledger.ready_at(i) for i in waiting)))
                continue
            self.ledger.promote(v, now)
            self.backend.switch(v.k, self.sim_task(v))
            if v.started:                       # gaps and cooldowns run from when a migration completes
                self.last_move[name] = now
        for h in self.ledger.held.values():
            if not h.draining:
                continue
            if self._drained(h) and self.backend.idle(h.spec.id):
                self.ledger.free(h.spec.id, now)
                self.backend.stop(h.spec.id)
            else:
                nxt = min(nxt, now + self.cfg.drain_poll_s)
        return None if nxt == math.inf else nxt

    # ---- helpers ----------------------------------------------------------------------
    def _open(self, k: int, target: float, now: float) -> bool:
        """Whether task ``k`` may be re-selected for ``target`` under the back-off (module
        docstring); a block that the cluster has since lifted is dropped."""
        name, b = self.tasks[k].name, self.blocked.get(self.tasks[k].name)
        if b is None:
            return True
        if b.kind == "never":
            return False
        if target < b.rate * (1 - self.cfg.drift_down) - TOL:
            if b.kind == "rate" and not self._feasible(k, target, self.ledger.view(name, self._models[k])):
                return False                    # not even the emptied cluster carries the lower target
            self._retry[name] = "lower"
            return True
        if now < b.after:
            return False
        view = self.ledger.view(name, self._models[k])
        if b.kind == "room":
            lift = roomier(room(view), b.then)
        else:                                   # rate-bound: only other instances to reuse can lift it
            reuse, lift = roomiest(view, self.ledger.gpus)[1], False
            if reuse_ids(reuse) != reuse_ids(b.reuse):
                b.reuse = reuse                 # probed once per set of instances it may reuse
                lift = self._feasible(k, target, view)
        if lift:
            del self.blocked[name]
            self._retry[name] = "room" if b.kind == "room" else "reuse"
        return lift

    def _feasible(self, k: int, rate: float, view: Cluster) -> bool:
        """Whether task ``k`` has a plan for ``rate`` on ``view`` emptied (:func:`roomiest`: the
        instances it may reuse kept) or on the bare empty cluster (the heuristic is not monotone in
        what it may reuse: more instances to reuse can lose a plan)."""
        roomy, reuse = roomiest(view, self.ledger.gpus)
        return (self._probe(k, rate, roomy.model_copy(update={"instances": ()}), frozenset())
                or self._probe(k, rate, roomy, reuse))

    def _probe(self, k: int, rate: float, cluster: Cluster, reuse: Reuse) -> bool:
        """Whether any selection a re-selection of task ``k`` runs (every ``shrink_tp`` bound and the
        serving variant included) finds a plan for ``rate`` on ``cluster`` (an emptied cluster, whose
        instances to reuse are ``reuse``); cached (:class:`~harness.adaptive.backoff.Probes`)."""
        name = self.tasks[k].name
        cur = self.ledger.current.get(name) if self.cfg.rescale else None
        vname = version_name(name, self.gen[name] + 1)

        def probe(r: float) -> bool:
            return any(self.selector.select(p, time_limit_s=self.cfg.time_limit_s).deployment is not None
                       for _, p in self._problems(k, vname, r, cluster, cur, shrink=True))
        return self.probes.feasible((k, reuse, cur.name if cur is not None else None), rate, probe)

    def _rising(self, k: int, now: float, w: float, wl: float, r_s: float) -> bool:
        """Whether task ``k``'s load rises: the short window's count (rate ``r_s``) exceeds what the
        rest of the long window's rate predicts by ``up_z`` Poisson standard deviations of the
        difference."""
        if wl <= w:
            return False
        r_old = self.backend.arrivals(k, now - wl, now - w) / (wl - w)
        n_s = r_s * w
        return n_s - r_old * w > self.cfg.up_z * math.sqrt(n_s + r_old * w * w / (wl - w)) + TOL

    def _slo_open(self, name: str, r_s: float) -> bool:
        """Whether the SLO rule may move task ``name`` (the back-off's SLO block, module docstring)."""
        r_b = self.slo_blocked.get(name)
        if r_b is not None and abs(r_s - r_b) <= self.cfg.drift_down * r_b + TOL:
            return False
        self.slo_blocked.pop(name, None)
        return True

    def _ready(self, iid: str, now: float) -> bool:
        h = self.ledger.held[iid]
        if h.ready_s is None and self.backend.ready(iid, now):
            h.ready_s = now
        return h.ready_s is not None

    def _drained(self, h) -> bool:
        """No request of any version that routed to ``h`` is still in flight."""
        for name in h.routed_by:
            v = self.ledger.versions.get(name)
            if v is None or v.settled:
                continue
            if v.retired_s is None:
                return False
            start = v.serving_s if v.serving_s is not None else v.retired_s
            if self.backend.in_flight(v.k, start, v.retired_s) > 0:
                return False
            v.settled = True
        return True

    def _abandon(self, v: Version, now: float) -> None:
        self.ledger.drop_pending(v.task, now)
        self.decisions.append({"t_s": now, "task": v.task, "version": v.name, "reason": "start-failed",
                               "outcome": "abandoned"})

    def rate_capacity(self, v: Version) -> float:
        """The request rate ``v`` can carry by the selector's capacity rows
        (:meth:`~harness.adaptive.ledger.Ledger.rate_capacity`)."""
        return self.ledger.rate_capacity(v, self._caps[v.k])

    def startup_s(self, spec: InstanceSpec) -> float:
        """Modelled start-up: fixed part plus the weights read at ``load_gb_per_s``."""
        from profiler.steps import step_model
        return self.cfg.startup_fixed_s + step_model(spec.model, spec.gpu_name(self.gpu), spec.tp, spec.pp).weights_gb / \
            self.cfg.load_gb_per_s

    def problem(self, k: int, name: str, rate_rps: float, cluster: Cluster, *, variant: Version | None = None,
                max_gpus: int | None = None) -> Problem:
        """Task ``k``'s problem renamed ``name`` at ``rate_rps`` on ``cluster`` (no re-validation:
        every part comes from validated objects); with ``variant``, only its workflow and, per
        stage, the models and configs it serves with (new replicas or reuse of any instance of
        them): the serving variant re-scaled; with ``max_gpus``, only configs of at most that
        many GPUs per replica (``tp * pp``)."""
        p = self.tasks[k].problem
        update: dict[str, Any] = {"task": p.task.model_copy(update={"name": name, "arrival_rate_rps": rate_rps}),
                                  "cluster": cluster}
        if variant is not None:
            wf = variant.deployment.workflow
            opts = {(st.stage, s.model, s.tp, s.pp) for st in variant.deployment.stages
                    for s in map(self.ledger.spec, st.instance_ids)}
            update["workflows"] = tuple(w for w in p.workflows if w.name == wf)
            update["perf"] = tuple(r for r in p.perf if r.workflow == wf and (r.stage, r.model, r.tp, r.pp) in opts)
        if max_gpus is not None:
            update["perf"] = tuple(r for r in update.get("perf", p.perf) if r.tp * r.pp <= max_gpus)
        return p.model_copy(update=update)

    def sim_task(self, v: Version) -> SimTask:
        """The routed task of version ``v`` (routes as serving; accuracy per route)."""
        model = {i.id: i.model for i in self.ledger.outside}
        model.update({iid: h.spec.model for iid, h in self.ledger.held.items()})
        t = self.tasks[v.k]
        return deployment_task(t.problem, v.deployment, t.tokens[v.deployment.workflow], model)

    def _reselect(self, k: int, target: float, est: float, reason: str, now: float, *, warm: bool = False) -> None:
        name, c = self.tasks[k].name, self.cfg
        vname = version_name(name, self.gen[name] + 1)
        view = self.ledger.view(name, self._models[k])
        cur = self.ledger.current.get(name)
        row = {"t_s": now, "task": name, "reason": reason, "est_rps": est, "target_rps": target,
               "gb_held_before": self.ledger.held_gb(), "retry": self._retry.pop(name, "")}
        shrink = c.shrink_moves == "all" or (c.adaptive and reason in ("down", "initial", "unplaced"))
        plans = [(how, self._select(p)) for how, p in self._problems(k, vname, target, view, cur if c.rescale else None,
                                                                      shrink=shrink)]
        row["select_s"] = sum(dt for _, (_, dt) in plans)
        cands = [self._candidate(name, how, plan, view) for how, (plan, _) in plans if plan.deployment is not None]
        if not cands:
            self.next_up[name] = now + c.up_gap_s
            self.next_down[name] = now + c.cooldown_s
            # no plan for target: wait for less load or more room; every failed try doubles the wait
            # before more room counts again (other tasks' moves free memory often)
            wait = 2 * self._room_wait.get(name, c.up_gap_s / 2)
            self._room_wait[name] = wait
            kind = block_kind(lambda r: self._feasible(k, r, view), target, c.min_rate_rps, self._can_reuse[k])
            reuse = roomiest(view, self.ledger.gpus)[1]
            self.blocked[name] = Block(target, room(view), now + wait, reuse, kind)
            if reason == "slo":
                self.slo_blocked[name] = est
            self.decisions.append({**row, "outcome": "infeasible", "block": kind, "why": plans[0][1][0].reason})
            return
        best = min(cands, key=lambda x: (x.score, x.how != "rescale"))
        raw, rename, started, drained = best.raw, best.rename, best.started, best.drained
        same = (cur is not None and not started and not drained and cur.deployment.workflow == raw.workflow
                and _routes(cur.deployment) == _routes(raw, rename))
        row.update(how=best.how, freed_gb=sum(h.spec.mem_gb for h in drained) - sum(i.mem_gb for i in started),
                   freed_gpus=best.freed_gpus)
        freed, own = (best.freed_gpus, best.own_gpus) if c.score == "gpu" else \
            (row["freed_gb"], sum(h.spec.mem_gb for h in self.ledger.own(name)))
        if reason == "down" and not same and freed * c.cooldown_s - best.overlap < c.min_saving * own * c.cooldown_s - TOL:
            self.next_down[name] = now + c.cooldown_s
            self.decisions.append({**row, "outcome": "no-saving"})
            return
        self.gen[name] += 1
        load = target / c.slo_bump if reason == "slo" else target
        if reason == "slo" and c.slo_hold_s > 0:
            self.slo_floor[name] = (target, now + c.slo_hold_s)
        v = Version(vname, name, k, self.gen[name], raw, target, est, reason, now, load_rps=load)
        v = self.ledger.commit(v, raw, view, rename=rename, started=started, now=now, startup_s=self.startup_s,
                               warm=warm)
        self.backend.start(list(started), [self.ledger.ready_at(i.id) for i in started])
        outcome = "update" if same else ("deploy" if reason in ("initial", "unplaced") else "migrate")
        if not same:
            self.last_move[name] = now
            if reason != "down":
                self._room_wait.pop(name, None)                # it grew: a later block starts afresh
        elif reason == "down":
            self.next_down[name] = now + c.cooldown_s          # the plan is as small as it gets for now
        elif reason == "slo":
            self.slo_blocked[name] = est                       # a bigger plan is not there: wait for the load
        self.decisions.append({**row, "outcome": outcome, "version": vname, "workflow": raw.workflow,
                               "started": ",".join(i.id for i in started), "draining": ",".join(h.spec.id for h in drained),
                               "kept": ",".join(v.kept), "started_gb": sum(i.mem_gb for i in started),
                               "models": ",".join(sorted({i.model for i in raw.instances}))})
        if not started:
            self.poll(now)

    def _problems(self, k: int, vname: str, target: float, cluster: Cluster, cur: Version | None, *,
                  shrink: bool) -> list[tuple[str, Problem]]:
        """The selections of one re-selection (module docstring): the full problem, the serving
        variant ``cur`` (``rescale``), and with ``shrink`` one per ``shrink_tp`` bound."""
        out = [("reselect", self.problem(k, vname, target, cluster))]
        if cur is not None:
            out.append(("rescale", self.problem(k, vname, target, cluster, variant=cur)))
        return out + [(f"tp<={b}", self.problem(k, vname, target, cluster, max_gpus=b))
                      for b in (self.cfg.shrink_tp if shrink else ())]

    def _select(self, problem: Problem) -> tuple[Any, float]:
        t0 = time.perf_counter()
        plan = self.selector.select(problem, time_limit_s=self.cfg.time_limit_s)
        dt = time.perf_counter() - t0
        self.select_s += dt
        return plan, dt

    def _candidate(self, task: str, how: str, plan: Any, view: Cluster) -> Candidate:
        """A plan with its migration and score (:func:`harness.adaptive.planning.candidate`)."""
        c = self.cfg
        return candidate(self.ledger, task, how, plan.deployment, view, keep=c.keep_matching, pack_busy=c.pack_busy,
                         score=c.score, cooldown_s=c.cooldown_s, startup_s=self.startup_s)


def _routes(dep: Deployment, rename: dict[str, str] | None = None) -> tuple:
    """Per stage and route: the instance ids (renamed) and the share; compares two plans' routing."""
    rn = rename or {}
    return tuple(tuple((tuple(rn.get(i, i) for i in r.instances), round(r.share, 9)) for r in s.routes)
                 for s in dep.stages)
