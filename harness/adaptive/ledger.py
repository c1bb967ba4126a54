"""The cluster as it stands while deployments change: which instances hold memory, which task
versions route to them, and the cluster a re-selection sees.

Spec section 8 updates a cluster forward (``Deployment.apply``: new instances, reuse utilisation);
re-selection also needs the way back. Here every held instance records its *users*, the task
versions that route to it and the utilisation each plans to put there (a new instance's
``utilization``, a reused one's ``reuse`` share). :meth:`Ledger.retire` is the reverse of apply
(:func:`release` on a ``Cluster`` does the same for one deployment): a retired version's
utilisation leaves every instance it used, and an instance nobody uses any more starts draining:
it takes no new requests, keeps its memory, and is freed (:meth:`Ledger.free`) once idle.

:meth:`Ledger.view` is the cluster one task re-selects on: every GPU's ``used_gb`` counts every
held instance (loading, serving or draining, the task's own included: during a migration old and
new instances hold memory together); the reusable instances are those some *other* task's version
routes to, with the utilisation the other tasks put there. The task's own instances are not
offered for reuse (a plan that reused them at no cost would never shrink); when the new plan asks
for an instance of the same model and config as one of them, :meth:`Ledger.commit` keeps the old
one instead of starting a copy (``keep_matching``), so scaling 1 -> 2 replicas starts one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from selector.deployment import Deployment, InstanceSpec, Route, StageRoute
from selector.problem import Cluster, Gpu, Instance


@dataclass
class Held:
    """One instance holding memory: started by version ``owner`` at ``start_s``; ``ready_s``: when
    it could serve (None: loading); ``users``: version name -> planned utilisation; ``drain_s``:
    when its last user left; ``released_s``: when its memory was freed."""

    spec: InstanceSpec
    owner: str
    start_s: float
    ready_s: float | None = None
    users: dict[str, float] = field(default_factory=dict)
    routed_by: list[str] = field(default_factory=list)
    drain_s: float | None = None
    released_s: float | None = None

    @property
    def draining(self) -> bool:
        return self.drain_s is not None and self.released_s is None

    @property
    def live(self) -> bool:
        """Holds memory and takes new requests (loading or serving)."""
        return self.drain_s is None


@dataclass
class Version:
    """One deployment of one task: ``deployment`` routes by the ids actually serving (kept
    instances under their old ids); ``rate_rps``: the rate it was selected for; ``est_rps``: the
    estimate then; ``load_rps``: the load it is meant for (the rate, or after SLO misses the rate
    before the bump: a move down compares with it); ``started`` / ``kept``: instance ids it
    started or took over."""

    name: str
    task: str
    k: int
    gen: int
    deployment: Deployment
    rate_rps: float
    est_rps: float
    reason: str
    created_s: float
    load_rps: float = 0.0
    started: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    serving_s: float | None = None
    retired_s: float | None = None
    settled: bool = False           # retired and none of its requests still in flight

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i for s in self.deployment.stages for i in s.instance_ids))


def version_name(task: str, gen: int) -> str:
    """``task`` for the first deployment, ``task@gen`` after (new instance ids start with it)."""
    return task if gen == 0 else f"{task}@{gen}"


def release(cluster: Cluster, dep: Deployment, *, keep_memory: bool = False,
            still_used: frozenset[str] = frozenset()) -> Cluster:
    """The reverse of ``dep.apply`` (spec section 8): reused instances lose the utilisation
    ``dep`` added; ``dep``'s own instances leave the cluster (those in ``still_used``, which other
    tasks route to, stay with their utilisation less ``dep``'s) and, unless ``keep_memory`` (a
    draining instance still holds it), give their GPUs' memory back."""
    drop = dict(dep.reuse)
    own = {i.id: i for i in dep.instances}
    used = {g.id: g.used_gb for g in cluster.gpus}
    out = []
    for inst in cluster.instances:
        if inst.id in own and inst.id not in still_used:
            if not keep_memory:
                for g in own[inst.id].gpus:
                    used[g] -= own[inst.id].shard_gb
            continue
        less = drop.get(inst.id, 0.0) + (own[inst.id].utilization if inst.id in own else 0.0)
        out.append(inst.model_copy(update={"utilization": min(1.0, max(0.0, inst.utilization - less))})
                   if less else inst)
    gpus = tuple(Gpu(id=g.id, mem_gb=g.mem_gb, used_gb=min(g.mem_gb, max(0.0, used[g.id]))) for g in cluster.gpus)
    return cluster.model_copy(update={"gpus": gpus, "instances": tuple(out)})


class Ledger:
    """Held instances and task versions over one run (module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.gpus = {g.id: g for g in cluster.gpus}      # used_gb here: memory outside the ledger
        self.sharing = cluster.sharing
        self.outside = tuple(cluster.instances)          # pre-existing instances nobody migrates
        self.held: dict[str, Held] = {}
        self.versions: dict[str, Version] = {}
        self.current: dict[str, Version] = {}            # task -> serving version
        self.pending: dict[str, Version] = {}            # task -> version waiting for its instances
        self._ready_at: dict[str, float] = {}            # modelled readiness (start + start-up)

    # ---- views ------------------------------------------------------------------------
    def task_of(self, version: str) -> str:
        return self.versions[version].task

    def spec(self, iid: str) -> InstanceSpec | Instance:
        """Instance ``iid``: a held one's spec, or the pre-existing instance."""
        h = self.held.get(iid)
        return h.spec if h is not None else next(i for i in self.outside if i.id == iid)

    def rate_capacity(self, v: Version, caps: dict[tuple, float]) -> float:
        """The request rate version ``v`` can carry by the selector's capacity rows ``caps``
        (``(workflow, stage, model, tp, pp) -> capacity_rps``): for every instance it routes to,
        ``(1 - what other tasks put there) / (its utilisation per request/s)``, where a route of
        ``n`` instances taking ``share`` of a stage of ``calls`` calls gives each
        ``share * calls / (n * capacity_rps)`` per request/s; the least over its instances
        (0 when a row is missing)."""
        per_rps: dict[str, float] = {}
        for st in v.deployment.stages:
            for r in st.routes:
                if not r.instances or r.share <= 0:
                    continue
                for iid in r.instances:
                    spec = self.spec(iid)
                    c = caps.get((v.deployment.workflow, st.stage, spec.model, spec.tp, spec.pp))
                    if c is None:
                        return 0.0
                    per_rps[iid] = per_rps.get(iid, 0.0) + r.share * st.calls / (len(r.instances) * c)
        out = float("inf")
        for iid, u in per_rps.items():
            h = self.held.get(iid)
            others = sum(x for w, x in h.users.items() if self.task_of(w) != v.task) if h else \
                next((i.utilization for i in self.outside if i.id == iid), 0.0)
            out = min(out, max(0.0, 1.0 - others) / u)
        return out

    def used_gb(self) -> dict[int, float]:
        used = {g: s.used_gb for g, s in self.gpus.items()}
        for h in self.held.values():
            if h.released_s is None:
                for g in h.spec.gpus:
                    used[g] += h.spec.shard_gb
        return used

    def held_gb(self) -> float:
        """Memory (GB) of every instance not yet freed."""
        return sum(h.spec.mem_gb for h in self.held.values() if h.released_s is None)

    def view(self, task: str, models: set[str] | None = None) -> Cluster:
        """The cluster ``task`` re-selects on (module docstring); ``models``: the models its
        problem lists (an instance of another model cannot be reused by it and is left out)."""
        used = self.used_gb()
        gpus = tuple(Gpu(id=g, mem_gb=s.mem_gb, used_gb=min(s.mem_gb, used[g])) for g, s in self.gpus.items())
        insts = list(self.outside)
        for h in self.held.values():
            if not h.live:
                continue
            others = [u for v, u in h.users.items() if self.task_of(v) != task]
            if not others or (models is not None and h.spec.model not in models):
                continue
            s = h.spec
            insts.append(Instance(id=s.id, model=s.model, tp=s.tp, pp=s.pp, gpus=s.gpus,
                                  utilization=min(1.0, max(0.0, sum(others)))))
        return Cluster(gpus=gpus, instances=tuple(insts), sharing=self.sharing)

    def own(self, task: str) -> list[Held]:
        """Live instances only ``task``'s versions use (they drain if it moves away)."""
        return [h for h in self.held.values()
                if h.live and h.users and all(self.task_of(v) == task for v in h.users)]

    # ---- changes ----------------------------------------------------------------------
    def match(self, task: str, raw: Deployment, *, keep: bool = True) -> tuple[dict[str, str], list[InstanceSpec]]:
        """Which of ``raw``'s new instances an old instance of ``task`` (same model and config, in
        order) can stand for (``{new id: old id}``; none unless ``keep``), and the ones to start."""
        spare: dict[tuple, list[Held]] = {}
        if keep:
            for h in self.own(task):
                spare.setdefault((h.spec.model, h.spec.tp, h.spec.pp), []).append(h)
        rename: dict[str, str] = {}
        started: list[InstanceSpec] = []
        for inst in raw.instances:
            pool = spare.get((inst.model, inst.tp, inst.pp))
            if pool:
                rename[inst.id] = pool.pop(0).spec.id
            else:
                started.append(inst)
        return rename, started

    def commit(self, version: Version, raw: Deployment, view: Cluster, *, rename: dict[str, str],
               started: list[InstanceSpec], now: float, startup_s: Callable[[InstanceSpec], float],
               warm: bool = False) -> Version:
        """Record ``raw`` (a selector's deployment on ``view``) as ``version``: spec section 8's
        update (``raw.apply(view)``, which also refuses clashing ids); the instances of
        ``rename`` (:meth:`match`) are kept under their old ids, ``started`` start now (ready after
        ``startup_s``; ``warm``: at once). Returns the version with its routing deployment, which
        lists the started instances as its own and the kept ones as reused."""
        raw.apply(view)
        util = {i.id: i.utilization for i in raw.instances}
        kept = [(old, util[new]) for new, old in rename.items()]
        for old, u in kept:
            self.held[old].users[version.name] = u
            self.held[old].routed_by.append(version.name)
        for inst in started:
            self.held[inst.id] = Held(inst, version.name, now, now if warm else None,
                                      {version.name: inst.utilization}, [version.name])
            self._ready_at[inst.id] = now if warm else now + startup_s(inst)
        for iid, u in raw.reuse:
            h = self.held.get(iid)
            if h is not None:
                h.users[version.name] = h.users.get(version.name, 0.0) + u
                h.routed_by.append(version.name)
        stages = tuple(StageRoute(s.stage, s.calls, tuple(Route(tuple(rename.get(i, i) for i in r.instances), r.share)
                                                          for r in s.routes)) for s in raw.stages)
        dep = Deployment(version.task, raw.workflow, tuple(started), stages, tuple(raw.reuse) + tuple(kept), raw.rule)
        version = replace(version, deployment=dep, started=tuple(i.id for i in started),
                          kept=tuple(i for i, _ in kept))
        self.versions[version.name] = version
        self.pending[version.task] = version
        return version

    def ready_at(self, iid: str) -> float:
        """When instance ``iid`` is modelled to be ready (start + start-up time)."""
        return self._ready_at[iid]

    def promote(self, version: Version, now: float) -> list[str]:
        """``version`` starts serving: the task's previous version is retired (:meth:`retire`).
        Returns the ids that start draining."""
        version.serving_s = now
        self.pending.pop(version.task, None)
        old = self.current.get(version.task)
        self.current[version.task] = version
        return self.retire(old, now) if old is not None else []

    def retire(self, version: Version, now: float) -> list[str]:
        """The reverse of commit: ``version``'s utilisation leaves every instance; an instance
        left without users starts draining. Returns those ids."""
        version.retired_s = now
        out = []
        for h in self.held.values():
            if version.name in h.users:
                del h.users[version.name]
                if not h.users and h.live:
                    h.drain_s = now
                    out.append(h.spec.id)
        return out

    def drop_pending(self, task: str, now: float) -> list[str]:
        """Abandon ``task``'s pending version (an instance failed to start): it is retired before
        serving; returns the ids that start draining (its own new instances among them)."""
        return self.retire(self.pending.pop(task), now)

    def free(self, iid: str, now: float) -> None:
        """Instance ``iid`` has drained: its memory is released."""
        self.held[iid].released_s = now

    # ---- accounting -------------------------------------------------------------------
    def gb_steps(self, end_s: float) -> list[tuple[float, float]]:
        """``(time, GB held from then on)`` at every change up to ``end_s``, starting at 0."""
        deltas: dict[float, float] = {0.0: 0.0}
        for h in self.held.values():
            a = min(h.start_s, end_s)
            b = end_s if h.released_s is None else min(h.released_s, end_s)
            if b <= a:
                continue
            deltas[a] = deltas.get(a, 0.0) + h.spec.mem_gb
            deltas[b] = deltas.get(b, 0.0) - h.spec.mem_gb
        steps, level = [], 0.0
        for t in sorted(deltas):
            level += deltas[t]
            steps.append((t, max(0.0, level)))
        return steps

    def spans(self, end_s: float) -> list[tuple[InstanceSpec, float, float]]:
        """``(instance, start, end)`` of every instance held within ``[0, end_s]`` (from its
        start to its release, or ``end_s``)."""
        return [(h.spec, min(h.start_s, end_s), end_s if h.released_s is None else min(h.released_s, end_s))
                for h in self.held.values()]

    def gb_s(self, end_s: float) -> float:
        """GB x seconds held over ``[0, end_s]`` (each instance from its start to its release)."""
        return sum(spec.mem_gb * max(0.0, b - a) for spec, a, b in self.spans(end_s))


#: one task's view of the cluster as far as the back-off asks (:func:`room`): the free memory over
#: all GPUs and the reusable instances
Room = tuple[float, frozenset[str]]


def room(view: Cluster) -> Room:
    """What a selection on ``view`` (:meth:`Ledger.view`) has to place on: the GPUs' free memory
    in all and the ids of the instances it may reuse."""
    return sum(g.mem_gb - g.used_gb for g in view.gpus), frozenset(i.id for i in view.instances)


def roomier(now: Room, then: Room, tol: float = 1e-6) -> bool:
    """Whether ``now`` offers more than ``then``: memory freed in all (GPUs released by a move
    down or a drained instance, net of what other tasks started since), or an instance to reuse
    that was not there. A blocked target stays blocked otherwise (the controller's back-off):
    with no more free memory and nothing new to reuse, the plans a selection can find are those
    it could find then, up to how the free memory is spread over GPUs and the utilisation other
    tasks put on shared instances, which change on most ticks and are not followed."""
    return now[0] > then[0] + tol or bool(now[1] - then[1])
