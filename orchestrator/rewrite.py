"""What every graph rewrite shares: the :class:`Pass` interface, the :class:`PassContext` it may
read, and the public rewrite helpers that split a primitive into parts synced by an Aggregate.

The Teola passes (``orchestrator.passes``) and the baselines' module rewrites
(``orchestrator.baselines``) both build on this module, so neither imports the other's
internals.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping

from orchestrator.graph import Graph, GraphEditor
from orchestrator.primitives import Kind, Node, Ref
from profiler.engine import DEFAULT


@dataclass(frozen=True)
class PassContext:
    """What passes may know about engines: the profiled maximum efficient batch size (items),
    and for LLM engines the shortest ready prefix worth a partial prefill
    (:func:`worthwhile_prefix_tokens`; an engine not named here has no cost model, and any
    ready prefix is split, the paper's rule)."""
    max_batch: Mapping[str, int] = field(default_factory=dict)
    split_min_tokens: Mapping[str, int] = field(default_factory=dict)

    def cap(self, engine: str | None) -> int | None:
        return None if engine is None else self.max_batch.get(engine)

    def key(self) -> tuple:
        """What an optimised graph depends on (the graph cache's key)."""
        return tuple(sorted(self.max_batch.items())), tuple(sorted(self.split_min_tokens.items()))


def worthwhile_prefix_tokens(step: Any, *, limit: int = 1 << 16, background: bool = False,
                             block_tokens: int = DEFAULT.block_size) -> int:
    """The shortest ready prefix whose partial prefill pays for itself on ``step``, an LLM
    engine's iteration cost model (``StepTime``).

    A partial prefill of ``P`` tokens takes its compute, ``saved(P) = step(P) - fixed``, off the
    critical path (the full prefill then prefills only the rest; attention over the cached
    prefix is paid either way).

    * An engine that runs partial prefills as ordinary work (``background=False``: the
      wall-clock and Ray runtimes' engines) may start an extra prefill pass for one, whose
      fixed cost ``fixed = 2 step(1) - step(2)`` (the pass's intercept) every running decode
      waits for; the split is worth it when ``saved(P) >= fixed``. For llama-2-7B on an RTX 3090
      (38.2 ms + 0.21 ms/token) that is 182 tokens.
    * An engine that admits them as background sequences (``background=True``: the simulated
      engine core, ``Seq.background``) runs one only inside a prefill pass that runs anyway (it
      adds its tokens, no fixed cost) or on an idle instance (no decode waits); the partial is
      promoted to regular work once its full prefill waits for it. No pass is added on anyone's
      critical path, so every prefix saves ``saved(P) > 0``; the rule keeps a floor of one KV
      block (``block_tokens``), below which a split saves less than a block's compute and still
      costs a sequence."""
    if background:
        return block_tokens

    def pf(n: int) -> float:
        return step.step_s(n, float(n) ** 2, 0, 0.0)
    fixed = max(0.0, 2 * pf(1) - pf(2))
    lo, hi = 1, limit
    if pf(hi) - fixed < fixed:
        return limit
    while lo < hi:
        mid = (lo + hi) // 2
        if pf(mid) - fixed >= fixed:
            hi = mid
        else:
            lo = mid + 1
    return lo


class Pass(ABC):
    """A graph rewrite: ``apply`` returns the same graph when its rule matches nothing,
    otherwise a new validated graph (it edits a copy)."""
    name: str = "pass"

    @abstractmethod
    def apply(self, g: Graph, ctx: PassContext) -> Graph: ...


def slice_ref(ref: Ref, lo: int, hi: int) -> Ref:
    """Items ``[lo, hi)`` of what ``ref`` points to (relative to its own slice)."""
    if ref.index is not None:
        raise ValueError(f"cannot slice an indexed ref {ref}")
    base = ref.lo or 0
    return Ref(ref.node, base + lo, base + hi, None, ref.transform)


def _control_parents(ed: GraphEditor, n: Node) -> list[str]:
    return [p for p in ed.parents(n.id) if p not in n.sources()]


def split_with_aggregate(ed: GraphEditor, n: Node, parts: list[Node], sizes: list[int], *,
                         merge: Mapping[str, Any] | None = None) -> None:
    """Replace ``n`` by ``parts`` plus an Aggregate that its consumers now read: a concat of the
    parts (a stage split, which element-wise consumers may be pushed through), or ``merge``
    (the Aggregate's params, e.g. a top-k merge of partial rerankings)."""
    ctrl = _control_parents(ed, n)
    params = dict(merge) if merge is not None else {"mode": "concat", "split": True, "part_sizes": tuple(sizes)}
    agg = Node(ed.fresh_id(f"{n.id}/agg"), Kind.AGGREGATE, n.component, None,
               {"parts": tuple(Ref(p.id) for p in parts)}, params)
    for p in parts:
        ed.add(p, extra_parents=ctrl)
    ed.add(agg)
    ed.replace_consumers(n.id, agg.id, skip=[p.id for p in parts] + [agg.id])
    ed.remove(n.id)


def decompose(g: Graph, n: Node, cap: int) -> Graph:
    """``n`` (batchable, element-wise) split into stages of at most ``cap`` items, ids
    ``<n>/s<j>``, synced by an Aggregate."""
    ed = GraphEditor.of(g)
    k = math.ceil(n.n_items / cap)
    sizes = [min(cap, n.n_items - j * cap) for j in range(k)]
    parts = []
    for j, size in enumerate(sizes):
        lo = j * cap
        inputs = dict(n.inputs)
        for port in n.elementwise:
            inputs[port] = slice_ref(n.inputs[port], lo, lo + size)
        parts.append(n.evolve(id=f"{n.id}/s{j}", inputs=inputs, n_items=size))
    split_with_aggregate(ed, n, parts, sizes)
    return ed.freeze()


def push_through(g: Graph, n: Node, agg: Node) -> Graph:
    """``n``, an element-wise consumer of the split Aggregate ``agg``, split the same way (ids
    ``<n>/p<j>``): part ``j`` of ``n`` reads part ``j`` of the split, so the stages pipeline."""
    ed = GraphEditor.of(g)
    sizes = list(agg.params["part_sizes"])
    parts, lo = [], 0
    for j, (part, size) in enumerate(zip(agg.inputs["parts"], sizes)):
        inputs = dict(n.inputs)
        for port in n.elementwise:
            v = n.inputs[port]
            inputs[port] = part if (isinstance(v, Ref) and v.node == agg.id) else slice_ref(v, lo, lo + size)
        parts.append(n.evolve(id=f"{n.id}/p{j}", inputs=inputs, n_items=size))
        lo += size
    split_with_aggregate(ed, n, parts, sizes)
    return ed.freeze()
