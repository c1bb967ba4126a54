"""One engine scheduler per engine: pending primitives from all queries, batched by a policy,
placed on an idle instance chosen by a balancer, KV-cache affinity respected.

A launch never waits for its batch: it returns the instance's :class:`PendingBatch` and the
runtime decides when to take the result (the discrete-event runtime at once, the wall-clock one
on a thread)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from orchestrator.batching import Balancer, BatchingPolicy, ByExecuted, ByKVSlots, Pending
from orchestrator.engines.base import Engine, Invocation, PendingBatch, PieceCallback
from orchestrator.primitives import Kind, PREFILL_KINDS


@dataclass(frozen=True)
class Launch:
    instance: int
    batch: tuple[Pending, ...]
    pending: PendingBatch | None   # None: an iterative instance, whose iterations deliver results


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
        self.drives_iterations = drives_iterations
        self.on_piece = on_piece

    def enqueue(self, p: Pending) -> None:
        self.pending.append(p)

    def free(self, instance: int, items: int) -> None:
        self.inflight[instance] -= items

    def _room(self, i: int) -> int:
        if self.instances[i].continuous:
            return self.max_batch - self.inflight[i]
        return self.max_batch if self.inflight[i] == 0 else 0

    def _eligible(self, i: int) -> list[Pending]:
        out = []
        for p in self.pending:
            inv: Invocation = p.payload
            if inv.kind in (Kind.FULL_PREFILLING, Kind.DECODING) and self._affinity.get(inv.kv_key, i) != i:
                continue
            out.append(p)
        return out

    def dispatch(self, now_s: float) -> list[Launch]:
        """Start batches on idle instances while work can be placed."""
        launches: list[Launch] = []
        while self.pending:
            idle = [i for i in range(len(self.instances)) if self._room(i) > 0]
            idle.sort(key=lambda i: (self.balancer.key(self.instances[i], self.executed[i]), i))
            launched = False
            for i in idle:
                elig = self._eligible(i)
                if not elig:
                    continue
                batch = self.policy.select(elig, capacity=self._room(i))
                launches.append(self._launch(i, batch, now_s))
                launched = True
                break
            if not launched:
                break
        return launches

    def _launch(self, i: int, batch: list[Pending], now_s: float) -> Launch:
        chosen = {id(p) for p in batch}
        self.pending = [p for p in self.pending if id(p) not in chosen]
        for p in batch:
            inv: Invocation = p.payload
            if inv.kind in PREFILL_KINDS:
                self._affinity[inv.kv_key] = i
            elif inv.kind == Kind.DECODING:
                self._affinity.pop(inv.kv_key, None)
        pending = self._submit(i, batch, now_s)
        self.inflight[i] += sum(p.size for p in batch)
        self.executed[i] += sum(p.size for p in batch)
        self.batches[i] += 1
        return Launch(i, tuple(batch), pending)

    def _submit(self, i: int, batch: list[Pending], now_s: float) -> PendingBatch | None:
        inst = self.instances[i]
        if self.drives_iterations and getattr(inst, "iterative", False):
            return None         # the runtime enqueues it and drives the instance's iterations
        kw = {"on_piece": self.on_piece} if self.on_piece is not None and getattr(inst, "streams", False) else {}
        return inst.submit([p.payload for p in batch], now_s=now_s, **kw)
