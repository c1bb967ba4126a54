"""Engine-scheduler policies: how a batch is formed from pending primitives, and which idle
instance gets it.

* :class:`TopologyAware` (Algorithm 2): one bucket per query, buckets in order of query arrival;
  the batch takes, bucket after bucket, the bucket's deepest primitives (all those at its
  highest depth: the most work still behind them) until it is full; capacity left after every
  bucket's deepest level goes to the rest, bucket by bucket, deepest first. ``direction="highest"``
  is the paper's rule; ``"lowest"`` ranks the other way round, as the public code does
  (NetX-lab/Ayo ``Ayo/schedulers/engine_scheduler.py``, ``_select_batch_topology_from_pending``
  takes each query's nodes of rank ``max(-depth)``, its ``fill_strategy="same_query"`` the rest).
  It only changes anything when the batch cap binds (more pending than capacity). On an engine
  that takes one batch at a time and can estimate a batch's time (``estimate_s``: the simulated
  non-LLM engines), :meth:`TopologyAware.trim` also keeps a batch only as large as pays in latency
  (issue 26): another query's primitive joins it only if the time it adds, times the other queries
  already in it, is below the fixed cost it saves by not running alone after it (for two
  invocations ready together, merging lowers the sum of their completion times exactly then).
* :class:`Blind` (FIFO, the TO baselines): ready order until the batch is full.
* :class:`PerInvocation` (PO): one primitive invocation per batch.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence


@dataclass(frozen=True)
class Pending:
    """A primitive waiting at an engine scheduler. ``size``: items it adds to a batch."""
    qid: int
    query_arrival_s: float
    ready_s: float
    seq: int
    depth: int
    size: int
    node_id: str
    payload: Any = None


class BatchingPolicy(ABC):
    name: str = "policy"

    @abstractmethod
    def select(self, pending: Sequence[Pending], *, capacity: int) -> list[Pending]:
        """A non-empty batch from non-empty ``pending``; total size <= capacity unless a single
        primitive alone exceeds it."""

    def trim(self, batch: list[Pending], cost: Callable[[Sequence[Pending]], float]) -> list[Pending]:
        """The part of ``batch`` (from :meth:`select`) to run now, given ``cost(batch) -> seconds``
        on the instance that takes it; the rest stays pending. Default: all of it."""
        return batch


def _fill(order: Sequence[Pending], capacity: int) -> list[Pending]:
    out, used = [], 0
    for p in order:
        if not out or used + p.size <= capacity:
            out.append(p)
            used += p.size
        if used >= capacity:
            break
    return out


class PerInvocation(BatchingPolicy):
    name = "po"

    def select(self, pending: Sequence[Pending], *, capacity: int) -> list[Pending]:
        return [min(pending, key=lambda p: (p.ready_s, p.seq))]


class Blind(BatchingPolicy):
    name = "fifo"

    def select(self, pending: Sequence[Pending], *, capacity: int) -> list[Pending]:
        return _fill(sorted(pending, key=lambda p: (p.ready_s, p.seq)), capacity)


class TopologyAware(BatchingPolicy):
    def __init__(self, *, direction: Literal["highest", "lowest"] = "highest") -> None:
        if direction not in ("highest", "lowest"):
            raise ValueError(f"direction must be 'highest' or 'lowest', not {direction!r}")
        self.direction = direction
        self.name = f"topo-{direction}"

    def select(self, pending: Sequence[Pending], *, capacity: int) -> list[Pending]:
        sign = -1 if self.direction == "highest" else 1
        buckets: dict[int, list[Pending]] = {}
        for p in sorted(pending, key=lambda p: (sign * p.depth, p.ready_s, p.seq)):
            buckets.setdefault(p.qid, []).append(p)
        order = sorted(buckets.values(), key=lambda b: (min(p.query_arrival_s for p in b), b[0].qid))
        top = [[p for p in b if p.depth == b[0].depth] for b in order]
        rest = [[p for p in b if p.depth != b[0].depth] for b in order]
        out: list[Pending] = []
        used = 0
        for level in (top, rest):
            for b in level:
                for p in b:
                    if used >= capacity:
                        return out
                    if not out or used + p.size <= capacity:
                        out.append(p)
                        used += p.size
        return out

    def trim(self, batch: list[Pending], cost: Callable[[Sequence[Pending]], float]) -> list[Pending]:
        """Keep ``batch``'s primitives in order while each pays (module docstring): ``p`` joins when
        ``m * w < a``, ``w`` the time it adds to the batch kept so far, ``a`` the fixed cost it
        would pay alone (its own time less ``w``), ``m`` the other queries in the batch. A
        primitive of a query already in the batch always joins (``m`` counts only others)."""
        kept = batch[:1]
        for p in batch[1:]:
            others = len({q.qid for q in kept} - {p.qid})
            w = cost([*kept, p]) - cost(kept) if others else 0.0
            if not others or others * w < cost([p]) - w:
                kept.append(p)
        return kept


class Balancer(ABC):
    """Orders idle instances: the first one that can take work gets the next batch."""

    @abstractmethod
    def key(self, engine: Any, executed: int) -> float: ...


class ByExecuted(Balancer):
    def key(self, engine: Any, executed: int) -> float:
        return float(executed)


class ByKVSlots(Balancer):
    """LLM instances by load: KV held plus prompt tokens queued (``load_tokens``) where the
    instance reports it, else KV held."""

    def key(self, engine: Any, executed: int) -> float:
        fn = getattr(engine, "load_tokens", None)
        return float(fn() if fn is not None else engine.occupied_kv_tokens())


POLICIES = {"po": PerInvocation, "fifo": Blind, "topo": TopologyAware}


def make_policy(name: str, **kwargs: Any) -> BatchingPolicy:
    if name not in POLICIES:
        raise KeyError(f"unknown batching policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[name](**kwargs)
