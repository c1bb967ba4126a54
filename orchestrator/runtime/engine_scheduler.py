"""One engine scheduler per engine: pending primitives from all queries, batched by a policy and
placed on instances, KV-cache affinity respected.

Placement. An engine whose instances take one batch at a time (``continuous`` False: the non-LLM
engines) gets a batch per idle instance, the instance chosen by a balancer; where the instance
estimates a batch's time (``estimate_s``) the policy may run only part of it
(``BatchingPolicy.trim``: Teola's keeps a batch only as large as pays in latency). An engine with
iteration-level instances (``continuous``: the LLMs) places each *primitive* of the policy's
batch on its own: a FullPrefilling or Decoding on the instance holding its KV, anything else on
the instance with the least load (``load_tokens()``: KV held plus prompt tokens queued, counting
what this round placed), so one burst is spread over instances instead of sent to the first one.
The batch cap (``max_batch`` items in flight per instance) limits the sequences an instance
starts: a FullPrefilling or Decoding continues a sequence already there (in vLLM, one request)
and is placed whatever the cap, so a cap can never hold back the work that frees KV.

Partial prefills are background work (Teola sec. 5: they only help if they are free): they are
placed after every other primitive, only on an instance that would run them soon
(``takes_background()``: idle, or a prefill pass is due there) and never beside a regular prompt of
their own query placed in the same round (that prompt is ahead of them on the query's critical
path: a partial waits for a later input, so joining that pass only delays its own query), where
the engine core admits them only into what a pass that runs anyway leaves (``Seq.background``). On an
engine whose instances take one batch at a time (the real engines) nothing beside regular work is
free: a batch's prefills run one after another and its results come back at its end. There a batch
holds partial prefills only when no regular work can go to that instance. Until then they wait here,
unpinned. When a partial prefill becomes critical (its full prefill waits only for it) and has
not started, :meth:`withdraw` takes it back (pending here, or queued on an instance that gives it
back: the simulated LLM engines), so the graph runtime merges it into its full prefill, one
prompt placed like any new one (the least-loaded instance), instead of pinning the full prefill
to the partial's instance behind an extra prefill pass; otherwise :meth:`promote` turns it into
regular work, here or on its instance.

Shared CPU cores (:class:`CoreBudget`: the simulated CPU deployment, the real engines of one
process). An idle instance starts work only while fewer instances are busy than there are cores
(work for a busy iteration-level instance joins a pass that runs anyway): an execution beside
the cores' others slows them all, the critical path's among them, where it would otherwise wait
for a core. The runtimes place the oldest waiting work first and every engine's regular work
before any background work (two dispatch passes). A partial prefill never joins a regular pass
there (no pass is free on shared cores) and starts only on an idle instance with a free core.

A launch never waits for its batch: it returns the instance's :class:`PendingBatch` and the
runtime decides when to take the result (the discrete-event runtime at once, the wall-clock one
on a thread)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from orchestrator import ops
from orchestrator.batching import Balancer, BatchingPolicy, ByExecuted, ByKVSlots, Pending
from orchestrator.engines.base import Engine, Invocation, PendingBatch, PieceCallback
from orchestrator.primitives import Kind, PREFILL_KINDS

_KV_BOUND = (Kind.FULL_PREFILLING, Kind.DECODING)


class CoreBudget:
    """``cores`` CPU cores under every instance of ``schedulers``: a core is free while fewer of
    those instances are busy (work in flight) than there are cores (module docstring)."""

    def __init__(self, cores: int, schedulers: Sequence[EngineScheduler]) -> None:
        if cores < 1:
            raise ValueError(f"cores: {cores} (at least 1)")
        self.cores, self.schedulers = cores, list(schedulers)
        for s in self.schedulers:
            s.cores = self

    def free(self, extra_busy: int = 0) -> bool:
        """Whether a core is free with ``extra_busy`` more instances busy than the schedulers count."""
        busy = sum(1 for s in self.schedulers for n in s.inflight if n > 0)
        return busy + extra_busy < self.cores


@dataclass(frozen=True)
class Launch:
    instance: int
    batch: tuple[Pending, ...]
    pending: PendingBatch | None   # None: an iterative instance, whose iterations deliver results


def prompt_tokens(p: Pending) -> int:
    """Prompt tokens a pending LLM primitive will prefill (0 for anything else)."""
    inv: Invocation = p.payload
    return ops.prefill_tokens(inv.inputs) if inv.kind in PREFILL_KINDS else 0


class EngineScheduler:
    """``drives_iterations``: the runtime runs iterative instances' forward passes itself (the
    discrete-event runtime), so a batch for one is not submitted but handed over (``pending``
    None); False: every instance gets whole batches through ``submit``. ``on_piece`` goes to the
    ``submit`` of instances that stream (``Engine.streams``)."""

    def __init__(self, *, name: str, instances: Sequence[Engine], policy: BatchingPolicy,
                 balancer: Balancer | None = None, max_batch: int | None = None,
                 drives_iterations: bool = True, on_piece: PieceCallback | None = None) -> None:
        if not instances:
            raise ValueError(f"engine {name!r} has no instances")
        self.name = name
        self.instances = list(instances)
        self.policy = policy
        self.balancer = balancer or (ByKVSlots() if instances[0].kind == "llm" else ByExecuted())
        self.max_batch = max_batch or instances[0].max_batch_size()
        self.pending: list[Pending] = []
        self.inflight = [0] * len(instances)
        self.executed = [0] * len(instances)
        self.batches = [0] * len(instances)
        self._affinity: dict[str, int] = {}
        self._where: dict[str, int] = {}        # launched partial prefill -> instance
        self.critical: set[str] = set()         # partial prefills promoted while pending here
        self.drives_iterations = drives_iterations
        self.on_piece = on_piece
        self.cores: CoreBudget | None = None   # set by CoreBudget: the CPU cores this engine shares

    def enqueue(self, p: Pending) -> None:
        self.pending.append(p)

    def free(self, instance: int, items: int) -> None:
        self.inflight[instance] -= items

    def promote(self, key: str, now_s: float) -> list:
        """Partial prefill ``key`` is critical now: regular work from here on. Returns the
        events its instance's core causes (a kick), if it was launched already."""
        if any(p.payload.key == key for p in self.pending):
            self.critical.add(key)
            return []
        i = self._where.pop(key, None)
        inst = None if i is None else self.instances[i]
        if inst is not None and hasattr(inst, "promote"):
            return list(inst.promote(key, now_s) or ())
        return []

    def withdraw(self, key: str, now_s: float) -> Invocation | None:
        """Partial prefill ``key`` back, if it has not started and its engine merges partials
        (``merges_partials``, ``withdraw``): its invocation; None where it runs, ran, or is on its
        way to an instance."""
        for p in self.pending:
            if p.payload.key == key:
                if not getattr(self.instances[0], "merges_partials", False):
                    return None
                self.pending.remove(p)
                self.critical.discard(key)
                return p.payload
        i = self._where.get(key)
        take = None if i is None else getattr(self.instances[i], "withdraw", None)
        inv = None if take is None else take(key, now_s)
        if inv is not None:
            del self._where[key]
            self._affinity.pop(inv.kv_key, None)
            self.inflight[i] -= 1
        return inv

    def background(self, p: Pending) -> bool:
        inv: Invocation = p.payload
        return inv.kind == Kind.PARTIAL_PREFILLING and inv.key not in self.critical

    def _room(self, i: int) -> int:
        if self.instances[i].continuous:
            return self.max_batch - self.inflight[i]
        return self.max_batch if self.inflight[i] == 0 else 0

    def _eligible(self, i: int) -> list[Pending]:
        out = []
        for p in self.pending:
            inv: Invocation = p.payload
            if inv.kind in _KV_BOUND and self._affinity.get(inv.kv_key, i) != i:
                continue
            out.append(p)
        return out

    def dispatch(self, now_s: float, *, background: bool = True) -> list[Launch]:
        """Start work on instances while it can be placed (module docstring); ``background``
        False: regular work only (the first of the runtimes' passes over shared cores)."""
        if not self.pending:
            return []
        if self.instances[0].continuous:
            return self._dispatch_primitives(now_s, background)
        return self._dispatch_batches(now_s, background)

    def _core_free(self, placed: dict[int, list[Pending]] | None = None) -> bool:
        if self.cores is None:
            return True
        return self.cores.free(sum(1 for i in placed or () if self.inflight[i] == 0))

    def _dispatch_batches(self, now_s: float, background: bool = True) -> list[Launch]:
        launches: list[Launch] = []
        while self.pending and self._core_free():     # a batch takes a core of its own
            idle = [i for i in range(len(self.instances)) if self._room(i) > 0]
            idle.sort(key=lambda i: (self.balancer.key(self.instances[i], self.executed[i]), i))
            for i in idle:
                elig = self._eligible(i)
                # background partials only in a batch of their own, and none in a regular-only pass
                elig = [p for p in elig if not self.background(p)] or (elig if background else [])
                if elig:
                    batch = self.policy.select(elig, capacity=self._room(i))
                    est = getattr(self.instances[i], "estimate_s", None)
                    if est is not None:
                        batch = self.policy.trim(batch, lambda b: est([p.payload for p in b]))
                    launches.append(self._launch(i, batch, now_s))
                    break
            else:
                break
        return launches

    def _dispatch_primitives(self, now_s: float, background: bool = True) -> list[Launch]:
        live = [i for i in range(len(self.instances)) if i not in getattr(self, "dead", ())]
        load = {i: self._load(i) for i in live}
        placed: dict[int, list[Pending]] = {}
        fg = [p for p in self.pending if not self.background(p)]
        for p in fg:
            if (self._continues(p) and (i := self._affinity[p.payload.kv_key]) in load
                    and self._may_start(i, placed)):
                self._place(p, i, placed, {}, load)
        room = {i: r for i in live if (r := self._room(i) - sum(q.size for q in placed.get(i, ()))) > 0}
        fg = [p for p in fg if not self._continues(p)]
        room = {i: r for i, r in room.items() if self._may_start(i, placed)}
        while fg and room:
            batch = self.policy.select(fg, capacity=sum(room.values()))
            chosen = {id(p) for p in batch}
            fg = [p for p in fg if id(p) not in chosen]
            for p in batch:
                i = self._target(p, room, load, placed)
                if i is not None:
                    self._place(p, i, placed, room, load)
        waiting = [p for p in self.pending if self.background(p)] if background else []
        for p in sorted(waiting, key=lambda p: (p.ready_s, p.seq)):
            cand = [i for i in room if self._takes_background(i, placed) and not self._own_query(p, placed.get(i, ()))]
            if cand:
                self._place(p, min(cand, key=lambda i: (load[i], i)), placed, room, load)
        return [self._launch(i, placed[i], now_s) for i in sorted(placed)]

    def _continues(self, p: Pending) -> bool:
        inv: Invocation = p.payload
        return inv.kind in _KV_BOUND and inv.kv_key in self._affinity

    def _load(self, i: int) -> float:
        inst = self.instances[i]
        fn = getattr(inst, "load_tokens", None)
        return float(fn() if fn is not None else inst.occupied_kv_tokens())

    def _target(self, p: Pending, room: dict[int, int], load: dict[int, float],
                placed: dict[int, list[Pending]]) -> int | None:
        inv: Invocation = p.payload
        ok = [i for i in room if self._may_start(i, placed)]
        if inv.kind in _KV_BOUND and inv.kv_key in self._affinity:
            i = self._affinity[inv.kv_key]
            return i if i in ok else None
        return min(ok, key=lambda i: (load[i], i), default=None)

    def _may_start(self, i: int, placed: dict[int, list[Pending]]) -> bool:
        """Whether work may go to instance ``i`` now: it is busy already (its pass runs anyway),
        or it has a core (``CoreBudget``; always without one)."""
        return self.cores is None or self.inflight[i] > 0 or i in placed or self._core_free(placed)

    def _own_query(self, p: Pending, batch: Sequence[Pending]) -> bool:
        """Whether ``batch`` holds regular work of ``p``'s query: a partial prefill waits for a
        later input of its query, so that query's regular prompt placed now is ahead of it on the
        query's critical path, and adding the partial's tokens to that pass would delay it."""
        return any(q.qid == p.qid and not self.background(q) for q in batch)

    def _takes_background(self, i: int, placed: dict[int, list[Pending]]) -> bool:
        if self.cores is not None:   # shared cores: no pass is free, an idle instance only with a free core
            return self.inflight[i] == 0 and i not in placed and self._core_free(placed)
        if any(p.payload.kind in PREFILL_KINDS for p in placed.get(i, ())):
            return True          # a prefill pass is due there anyway
        fn = getattr(self.instances[i], "takes_background", None)
        return True if fn is None else bool(fn())

    @staticmethod
    def _place(p: Pending, i: int, placed: dict[int, list[Pending]], room: dict[int, int],
               load: dict[int, float]) -> None:
        placed.setdefault(i, []).append(p)
        if i in room:
            room[i] -= p.size
            if room[i] <= 0:
                del room[i]
        load[i] += prompt_tokens(p)

    def _launch(self, i: int, batch: list[Pending], now_s: float) -> Launch:
        chosen = {id(p) for p in batch}
        self.pending = [p for p in self.pending if id(p) not in chosen]
        for p in batch:
            inv: Invocation = p.payload
            if inv.kind in PREFILL_KINDS:
                self._affinity[inv.kv_key] = i
            elif inv.kind == Kind.DECODING:
                self._affinity.pop(inv.kv_key, None)
            if inv.kind == Kind.PARTIAL_PREFILLING:
                if inv.key in self.critical:
                    self.critical.discard(inv.key)
                    self._critical_at(i, inv.key)
                else:
                    self._where[inv.key] = i
        pending = self._submit(i, batch, now_s)
        self.inflight[i] += sum(p.size for p in batch)
        self.executed[i] += sum(p.size for p in batch)
        self.batches[i] += 1
        return Launch(i, tuple(batch), pending)

    def _critical_at(self, i: int, key: str) -> None:
        """A promoted partial prefill goes to instance ``i`` as regular work."""
        inst: Any = self.instances[i]
        if hasattr(inst, "promote"):
            inst.promote(key, 0.0)      # not there yet: only recorded, no events

    def _submit(self, i: int, batch: list[Pending], now_s: float) -> PendingBatch | None:
        inst = self.instances[i]
        if self.drives_iterations and getattr(inst, "iterative", False):
            if hasattr(inst, "announce"):
                inst.announce([p.payload for p in batch])
            return None         # the runtime enqueues it and drives the instance's iterations
        kw = {"on_piece": self.on_piece} if self.on_piece is not None and getattr(inst, "streams", False) else {}
        return inst.submit([p.payload for p in batch], now_s=now_s, **kw)
