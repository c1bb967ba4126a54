"""Simulated engine instances: outputs from the deterministic semantics in ``orchestrator.ops``,
durations from latency profiles. No clocks, no threads: the discrete-event runtime advances time.

Non-LLM engines (:class:`SimEngine`) time each submitted batch from a batch profile. The LLM
engine (:class:`SimLLMEngine`) runs Teola's LLM primitives as sequences of the one engine core
(``orchestrator.engines.llm_core``), the core the cluster and what-if simulators run too."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Mapping, Protocol, Sequence

from orchestrator import ops
from orchestrator.engines.base import (BatchResult, Engine, EngineError, Invocation,
                                       InvocationOutput, PendingBatch, PieceCallback, check_kinds)
from orchestrator.engines.llm_core import LLMCore
from orchestrator.engines.llm_seq import Seq
from orchestrator.engines.cpu_sharing import SharedCores, SharedCoresLLMCore
from orchestrator.engines.llm_timing import StepTime
from orchestrator.engines.profiles import BatchProfile, max_efficient_batch
from orchestrator.jsonstream import stream_pieces
from orchestrator.primitives import Kind, PREFILL_KINDS
from orchestrator.runtime.events import Event, Simulator
from profiler.engine import EngineConfig


def _items(inv: Invocation) -> int:
    """Items a non-LLM invocation computes: a reranking scores each distinct candidate once (the
    candidates of several searches overlap; ``ops.flatten_candidates`` drops the repeats, as the
    real reranker and LlamaIndex's fusion retriever do), every other kind its ``n_items``."""
    if inv.kind == Kind.RERANKING:
        return len(ops.flatten_candidates(inv.inputs["candidates"]))
    return inv.n_items


def _item_tokens(inv: Invocation) -> float:
    """Mean tokens per item of a non-LLM invocation (what its profile is indexed by)."""
    if inv.kind == Kind.EMBEDDING:
        texts = inv.inputs["texts"]
        return ops.n_tokens(texts) / max(1, len(texts))
    if inv.kind == Kind.RERANKING:
        flat = ops.rerank(inv.inputs["query"], inv.inputs["candidates"], 10**9)
        return ops.n_tokens(inv.inputs["query"]) + ops.n_tokens(flat) / max(1, len(flat))
    return 0.0


def _run(inv: Invocation) -> object:
    x, p = inv.inputs, inv.params
    if inv.kind == Kind.EMBEDDING:
        return ops.embed(x["texts"])
    if inv.kind == Kind.INGESTION:
        return ops.ingest(x["texts"], x["vectors"])
    if inv.kind == Kind.SEARCHING:
        if "index" in x:
            return ops.vector_search(x["queries"], x["index"], p["top_k"])
        return ops.web_search([ops.as_text(q) for q in x["queries"]], p["top_k"], p["result_tokens"])
    if inv.kind == Kind.RERANKING:
        return ops.rerank(x["query"], x["candidates"], p["top_n"], scored=bool(p.get("scored")))
    raise EngineError(f"no semantics for {inv.kind}")


class SimEngine(Engine):
    """A non-LLM engine instance: a batch costs the sum over the kinds in it of
    ``profile[kind].batch_s(items, mean tokens per item)``."""

    def __init__(self, *, name: str, kind: str, profiles: Mapping[Kind, BatchProfile],
                 ref_tokens: float = 256.0, batch_limit: int = 1024) -> None:
        self.name, self.kind = name, kind
        self.profiles = dict(profiles)
        self.serves = frozenset(self.profiles)
        self._ref_tokens, self._limit = ref_tokens, batch_limit
        self._max_batch: int | None = None
        #: the CPU cores it shares (:meth:`share_cpu`); None: its own
        self.shared: SharedCores | None = None

    def share_cpu(self, shared: SharedCores) -> None:
        """Run on the CPU cores ``shared``, beside the engines given the same cores: :meth:`submit`
        still gives a batch's time alone, and the discrete-event runtime runs that much work on the
        cores (``SharedCores.start``), where it ends later while other executions run."""
        self.shared = shared

    @property
    def cpu_cores(self) -> int | None:
        """How many CPU cores it shares with other engines (:meth:`share_cpu`); None: its own."""
        return None if self.shared is None else self.shared.cores

    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> PendingBatch:
        check_kinds(self, batch)
        dur = self.estimate_s(batch)
        outs = tuple(InvocationOutput(_run(i), dur) for i in batch)
        return PendingBatch(BatchResult(outs, dur))

    def estimate_s(self, batch: Sequence[Invocation]) -> float:
        """The time :meth:`submit` takes for ``batch`` (the engine scheduler's batch trimming)."""
        by_kind: dict[Kind, list[Invocation]] = {}
        for inv in batch:
            by_kind.setdefault(inv.kind, []).append(inv)
        dur = 0.0
        for kind, invs in by_kind.items():
            items = sum(_items(i) for i in invs)
            tok = sum(_item_tokens(i) * _items(i) for i in invs) / max(1, items)
            dur += self.profiles[kind].batch_s(items, tok)
        return dur

    def max_batch_size(self) -> int:
        if self._max_batch is None:
            prof = next(iter(self.profiles.values()))
            self._max_batch = max_efficient_batch(lambda b: prof.batch_s(b, self._ref_tokens), limit=self._limit)
        return self._max_batch


class LLMTarget(Protocol):
    """Where a :class:`SimLLMEngine` reports finished primitives (the discrete-event runtime, or
    :meth:`SimLLMEngine.submit`'s recorder); each returns the events it causes."""

    def done(self, key: str, value: Any, now: float) -> Iterable[Event] | None: ...

    def piece(self, key: str, index: int, value: Any, now: float) -> Iterable[Event] | None: ...

    def failed(self, key: str, reason: str, now: float) -> Iterable[Event] | None: ...


#: EngineConfig of Teola's LLM engines unless a spec says otherwise: Ayo's padded-prefill fork
AYO_ENGINE = EngineConfig(scheduler="padded")
#: KV-cache capacity (tokens) of a simulated LLM instance no memory plan sizes (Teola's apps)
DEFAULT_KV_TOKENS = 16_000


class SimLLMEngine(Engine):
    """An LLM engine instance whose primitives run on one :class:`LLMCore` (``config``: its
    admission policy, batch limits and KV paging; ``kv_capacity_tokens`` its cache). Each
    primitive is a sequence: a Prefilling parks its KV under the invocation's ``kv_key`` (its
    logits give the first output token), a PartialPrefilling parks a prefix (no token), a
    FullPrefilling continues a parked prefix (queued first, as Ayo's vLLM re-queues a continued
    prompt) and a Decoding continues a parked KV with nothing to prefill, streaming JSON-list items
    as their tokens are generated (the list closes after ``params['close_tokens']`` tokens when
    given). With ``prefix_caching`` a prompt's first segment, once seen, is not prefilled again.

    A PartialPrefilling is a background sequence (``Seq.background``: it only fills a prefill
    pass that runs anyway or an idle instance) until :meth:`promote` says its full prefill waits
    for it. :meth:`load_tokens` (KV held + prompt tokens queued or announced) is what the engine
    scheduler balances; :meth:`takes_background` says whether a background prefill would run
    soon here.

    Under the discrete-event runtime the core runs on the runtime's loop (``iterative``:
    :meth:`attach`, then :meth:`enqueue`). ``submit`` (the batch-at-once protocol of the other
    runtimes) runs the batch alone on the same core and a private loop: concurrent batches are
    not timed together (a documented approximation)."""
    continuous = True
    iterative = True
    #: partial prefills run as background sequences (``Seq.background``); see
    #: ``orchestrator.rewrite.worthwhile_prefix_tokens``
    background_partials = True
    #: a partial prefill not started when its full prefill becomes ready is taken back
    #: (:meth:`withdraw`) and merged into the full prefill (``ops.Unprefilled``)
    merges_partials = True

    def __init__(self, *, name: str, step: StepTime, kv_capacity_tokens: int = DEFAULT_KV_TOKENS,
                 config: EngineConfig = AYO_ENGINE, ref_context_tokens: int = 1024) -> None:
        self.name, self.kind = name, "llm"
        self.serves = frozenset(PREFILL_KINDS | {Kind.DECODING})
        self.step, self.config = step, config
        self.kv_capacity_tokens = kv_capacity_tokens
        self._ref_ctx = ref_context_tokens
        self.core = self._new_core()
        self._kv: dict[str, tuple[str, ...]] = {}        # kv_key -> prompt segments (content)
        self._prefixes: set[str] = set()
        self._seqs: dict[int, tuple[Invocation, Any, list]] = {}   # seq id -> (invocation, value, pieces)
        self._live: dict[str, Seq] = {}              # invocation key -> its sequence in the core
        self._critical: set[str] = set()             # partial prefills promoted before they arrived
        self._announced: dict[str, int] = {}         # invocation key -> prompt tokens on their way
        self._next = 0
        self._target: LLMTarget | None = None

    def _new_core(self, shared: SharedCores | None = None) -> LLMCore:
        kw = {"name": self.name, "step": self.step, "kv_tokens": self.kv_capacity_tokens, "config": self.config,
              "sink": self._seq_done, "on_piece": self._seq_piece}
        return LLMCore(**kw) if shared is None else SharedCoresLLMCore(shared=shared, **kw)

    def share_cpu(self, shared: SharedCores) -> None:
        """Run on the CPU cores ``shared`` (``SimEngine.share_cpu``): each iteration is its step time
        of work on them (``SharedCoresLLMCore``). Before any work."""
        if self.core.outstanding:
            raise RuntimeError(f"{self.name}: share_cpu after work arrived")
        self.core = self._new_core(shared)

    @property
    def cpu_cores(self) -> int | None:
        """How many CPU cores it shares with other engines (:meth:`share_cpu`); None: its own."""
        shared = getattr(self.core, "shared", None)
        return None if shared is None else shared.cores

    @property
    def prefix_caching(self) -> bool:
        return self.config.prefix_caching

    @property
    def busy(self) -> bool:
        return self.core.busy

    @property
    def iterations(self) -> dict[str, int]:
        pre = self.core.prefill_iterations
        return {"prefill": pre, "decode": self.core.iterations - pre}

    def occupied_kv_tokens(self) -> int:
        return self.core.used_kv_tokens

    def load_tokens(self) -> int:
        """KV tokens held plus prompt tokens still to prefill (queued here or announced)."""
        c = self.core
        queued = sum(s.eff - s.filled for q in (c.waiting, c.background, c.prefilling) for s in q)
        return c.used_kv_tokens + queued + sum(self._announced.values())

    def takes_background(self) -> bool:
        """Whether a background prefill handed over now would run soon: the instance is idle, or
        a regular prompt is queued or announced (a prefill pass is due)."""
        c = self.core
        return bool(c.waiting or self._announced) or not (c.busy or c.running or c.prefilling or c.ready)

    def announce(self, batch: Sequence[Invocation]) -> None:
        """``batch`` is on its way here (:meth:`enqueue` follows after the dispatch overhead)."""
        for inv in batch:
            if inv.kind in PREFILL_KINDS:
                self._announced[inv.key] = ops.prefill_tokens(inv.inputs)

    def promote(self, key: str, now_s: float) -> list[Event]:
        """The partial prefill ``key`` became critical (its full prefill waits only for it)."""
        s = self._live.get(key)
        if s is None:
            self._critical.add(key)
            return []
        self.core.promote(s, now_s)
        return []

    def withdraw(self, key: str, now_s: float) -> Invocation | None:
        """Partial prefill ``key`` back if the core has not admitted it (``LLMCore.withdraw``):
        its invocation, for the graph runtime to merge into its full prefill; else None."""
        s = self._live.get(key)
        if s is None or not self.core.withdraw(s, now_s):
            return None
        inv, _, _ = self._seqs.pop(s.id)
        del self._live[key]
        self._critical.discard(key)
        return inv

    def holds_kv(self, kv_key: str) -> bool:
        return kv_key in self.core.parked

    def has_work(self) -> bool:
        return self.core.outstanding > 0

    def max_batch_size(self) -> int:
        by_thr = max_efficient_batch(lambda b: self.step.step_s(0, 0.0, b, float(b * self._ref_ctx)),
                                     limit=self.config.max_num_seqs)
        return max(1, min(by_thr, self.kv_capacity_tokens // self._ref_ctx))

    # ---- primitives -> sequences --------------------------------------------------------------
    def attach(self, target: LLMTarget) -> None:
        """Report finished primitives to ``target`` (the discrete-event runtime)."""
        self._target = target

    def bind(self, loop: Simulator) -> None:
        """Run the core's iterations on ``loop`` (the discrete-event runtime's)."""
        self.core.bind(loop)

    def enqueue(self, batch: Sequence[Invocation], now_s: float) -> list[Event]:
        """Hand primitives to the core at ``now_s``; returns the events this causes."""
        check_kinds(self, batch)
        events: list[Event] = []
        for inv in batch:
            self._announced.pop(inv.key, None)
            seq, front = self._seq(inv)
            self._live[inv.key] = seq
            events.extend(self.core.submit(seq, now_s, front=front) or ())
        return events

    def _seq(self, inv: Invocation) -> tuple[Seq, bool]:
        self._next += 1
        pieces: list = []
        if inv.kind == Kind.DECODING:
            if inv.kv_key not in self.core.parked:
                raise EngineError(f"{self.name}: Decoding {inv.key} has no KV cache {inv.kv_key!r} here")
            n = int(inv.params["output_tokens"])
            fmt = inv.params["fmt"]
            close = inv.params.get("close_tokens")
            text = ops.generate(self._kv.pop(inv.kv_key), fmt=fmt, n_tokens_out=n,
                                n_items=int(inv.params.get("n_items", 1)), close_tokens=close)
            pieces = stream_pieces(text, n, close) if fmt == "json_list" else []
            self._seqs[self._next] = (inv, text, pieces)
            return Seq(self._next, 0, n, kv_from=inv.kv_key, marks=[st for st, _ in pieces]), False
        segs = ops.prompt_segments(inv.inputs["segments"])
        merged = inv.inputs.get("kv")
        if isinstance(merged, ops.Unprefilled):     # a full prefill with its partial's prompt: one new prompt
            segs = merged.segments + segs
        elif inv.kind == Kind.FULL_PREFILLING:
            if inv.kv_key not in self.core.parked:
                raise EngineError(f"{self.name}: FullPrefilling {inv.key} has no KV cache {inv.kv_key!r} here")
            kv = self._kv[inv.kv_key] + segs
            self._seqs[self._next] = (inv, kv, pieces)
            return Seq(self._next, ops.n_tokens(segs), 0, kv_from=inv.kv_key, park=inv.kv_key), True
        cached = 0
        if self.prefix_caching and segs:
            if segs[0] in self._prefixes:
                cached = ops.n_tokens(segs[0])
            self._prefixes.add(segs[0])
        self._seqs[self._next] = (inv, segs, pieces)
        partial = inv.kind == Kind.PARTIAL_PREFILLING
        return Seq(self._next, ops.n_tokens(segs) - cached, 0, cached=cached, park=inv.kv_key,
                   final=not partial, background=partial and inv.key not in self._critical), False

    def _seq_done(self, seq: Seq, now: float) -> Iterable[Event] | None:
        inv, value, _ = self._seqs.pop(seq.id)
        self._live.pop(inv.key, None)
        self._critical.discard(inv.key)
        if seq.failed:
            return self._target.failed(inv.key, f"{self.name}: {inv.kind} needs {seq.tokens0 + seq.output} "
                                       f"KV tokens, more than the cache holds", now)
        if inv.kind in PREFILL_KINDS:
            self._kv[inv.kv_key] = value
        return self._target.done(inv.key, value, now)

    def _seq_piece(self, seq: Seq, index: int, now: float) -> Iterable[Event] | None:
        inv, _, pieces = self._seqs[seq.id]
        return self._target.piece(inv.key, index, [pieces[index][1]], now)

    # ---- batch-at-once protocol ---------------------------------------------------------------
    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> PendingBatch:
        """Run ``batch`` alone on the core (class docstring); offsets from its start."""
        if isinstance(self.core, SharedCoresLLMCore):
            raise EngineError(f"{self.name}: on shared CPU cores only the discrete-event runtime times it")
        rec = _Recorder()
        outer, self._target = self._target, rec
        outer_loop, loop = self.core.loop, Simulator()
        self.core.bind(loop)
        try:
            loop.push_all(self.enqueue(batch, 0.0))
            loop.run()
        finally:
            self._target = outer
            self.core.loop = outer_loop
        if rec.failed:
            raise EngineError(next(iter(rec.failed.values())))
        outs = tuple(InvocationOutput(rec.values[i.key], rec.done_s[i.key], tuple(rec.pieces.get(i.key, ())))
                     for i in batch)
        return PendingBatch(BatchResult(outs, max(rec.done_s.values(), default=0.0)))


class _Recorder:
    """An :class:`LLMTarget` that records when each primitive finished (``submit``)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.done_s: dict[str, float] = {}
        self.pieces: dict[str, list[tuple[float, Any]]] = {}
        self.failed: dict[str, str] = {}

    def done(self, key: str, value: Any, now: float) -> None:
        self.values[key], self.done_s[key] = value, now

    def piece(self, key: str, index: int, value: Any, now: float) -> None:
        self.pieces.setdefault(key, []).append((now, value))

    def failed(self, key: str, reason: str, now: float) -> None:
        self.failed[key] = reason
