"""Simulated engine instances: outputs from the deterministic semantics in ``orchestrator.ops``,
durations from latency profiles. No clocks, no threads: ``submit`` resolves immediately with the
modelled duration; the discrete-event runtime advances time."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from orchestrator import ops
from orchestrator.engines.base import (BatchResult, Engine, EngineError, Invocation,
                                       InvocationOutput, PendingBatch, PieceCallback, check_kinds)
from orchestrator.engines.profiles import BatchProfile, LatencyProfile, max_efficient_batch
from orchestrator.jsonstream import stream_pieces
from orchestrator.primitives import Kind, PREFILL_KINDS


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
        return ops.rerank(x["query"], x["candidates"], p["top_n"])
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

    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> PendingBatch:
        check_kinds(self, batch)
        by_kind: dict[Kind, list[Invocation]] = {}
        for inv in batch:
            by_kind.setdefault(inv.kind, []).append(inv)
        dur = 0.0
        for kind, invs in by_kind.items():
            items = sum(i.n_items for i in invs)
            tok = sum(_item_tokens(i) * i.n_items for i in invs) / max(1, items)
            dur += self.profiles[kind].batch_s(items, tok)
        outs = tuple(InvocationOutput(_run(i), dur) for i in batch)
        return PendingBatch(BatchResult(outs, dur))

    def max_batch_size(self) -> int:
        if self._max_batch is None:
            prof = next(iter(self.profiles.values()))
            self._max_batch = max_efficient_batch(lambda b: prof.batch_s(b, self._ref_tokens), limit=self._limit)
        return self._max_batch


class SimLLMEngine(Engine):
    """An LLM engine instance with a KV cache per ``kv_key``. A batch runs its prefills as one
    forward pass, then decodes its sequences together (static batching): sequence i is final
    after its own last step; JSON-list outputs stream each item when the parser completes it.
    With ``prefix_caching`` a prompt's first segment, once seen, is not prefilled again.

    The instance is ``continuous``: the scheduler may submit more batches while others run (up to
    the max batch in flight), approximating iteration-level batching: prefills are compute-bound so
    they queue behind earlier prefills on the instance; a batch's decode steps are timed with the
    sequences still decoding from earlier batches (at its decode start) added to its own, so it
    pays the joint step cost. Earlier batches are not re-timed (a documented approximation)."""
    continuous = True

    def __init__(self, *, name: str, profile: LatencyProfile, kv_capacity_tokens: int = 16_000,
                 ref_context_tokens: int = 1024, prefix_caching: bool = False, batch_limit: int = 256) -> None:
        self.name, self.kind = name, "llm"
        self.serves = frozenset(PREFILL_KINDS | {Kind.DECODING})
        self.profile = profile
        self.kv_capacity_tokens, self.prefix_caching = kv_capacity_tokens, prefix_caching
        self._ref_ctx, self._limit = ref_context_tokens, batch_limit
        self._kv: dict[str, tuple[str, ...]] = {}
        self._prefixes: set[str] = set()
        self._prefill_free_s = 0.0
        self._timed = False
        self._decoding: list[tuple[float, float, int, int]] = []  # (start_s, end_s, seqs, ctx tokens)

    def occupied_kv_tokens(self) -> int:
        return sum(ops.n_tokens(v) for v in self._kv.values())

    def holds_kv(self, kv_key: str) -> bool:
        return kv_key in self._kv

    def max_batch_size(self) -> int:
        by_thr = max_efficient_batch(lambda b: self.profile.decode_step_s(b, b * self._ref_ctx), limit=self._limit)
        return max(1, min(by_thr, self.kv_capacity_tokens // self._ref_ctx))

    def _prefill(self, inv: Invocation) -> tuple[tuple[str, ...], int, int]:
        segs = ops.prompt_segments(inv.inputs["segments"])
        if inv.kind == Kind.FULL_PREFILLING:
            if inv.kv_key not in self._kv:
                raise EngineError(f"{self.name}: FullPrefilling {inv.key} has no KV cache {inv.kv_key!r} here")
            prev = self._kv[inv.kv_key]
            return prev + segs, ops.n_tokens(segs), ops.n_tokens(prev)
        cached = 0
        if self.prefix_caching and segs:
            if segs[0] in self._prefixes:
                cached = ops.n_tokens(segs[0])
            self._prefixes.add(segs[0])
        return segs, ops.n_tokens(segs) - cached, cached

    def _prefill_all(self, invs: Sequence[Invocation]) -> tuple[list[int], list[int], list[tuple[str, ...]]]:
        """Prefill ``invs`` in order into the KV cache: their new and cached token counts and prompts."""
        news, cached, kvs = [], [], []
        for inv in invs:
            kv, n, c = self._prefill(inv)
            self._kv[inv.kv_key] = kv
            news.append(n)
            cached.append(c)
            kvs.append(kv)
        return news, cached, kvs

    def submit(self, batch: Sequence[Invocation], *, now_s: float | None = None,
               on_piece: PieceCallback | None = None) -> PendingBatch:
        now = 0.0 if now_s is None else now_s
        self._timed = now_s is not None
        pre = [i for i in batch if i.kind in PREFILL_KINDS]
        dec = [i for i in batch if i.kind == Kind.DECODING]
        if len(pre) + len(dec) != len(batch):
            raise EngineError(f"engine {self.name!r} only runs LLM primitives")
        news, cached, kvs = self._prefill_all(pre)
        values = {inv.key: kv for inv, kv in zip(pre, kvs)}
        wait = 0.0
        t_pre = 0.0
        if pre:
            wait = 0.0 if now_s is None else max(0.0, self._prefill_free_s - now)  # None: timed alone
            t_pre = self.profile.prefill_s(news, cached)
            self._prefill_free_s = now + wait + t_pre
        t0 = wait + t_pre
        outs = {i.key: InvocationOutput(values[i.key], t0) for i in pre}
        t_dec = self._decode(dec, t0, outs, now + t0)
        return PendingBatch(BatchResult(tuple(outs[i.key] for i in batch), t0 + t_dec))

    def _background(self, at_s: float) -> tuple[int, int]:
        self._decoding = [d for d in self._decoding if d[1] > at_s]
        live = [d for d in self._decoding if d[0] <= at_s]
        return sum(d[2] for d in live), sum(d[3] for d in live)

    def _decode(self, dec: list[Invocation], t0: float, outs: dict, start_s: float) -> float:
        if not dec:
            return 0.0
        bg_seqs, bg_ctx = self._background(start_s) if self._timed else (0, 0)
        lens, ctx, kvs = [], [], []
        for inv in dec:
            if inv.kv_key not in self._kv:
                raise EngineError(f"{self.name}: Decoding {inv.key} has no KV cache {inv.kv_key!r} here")
            kvs.append(self._kv.pop(inv.kv_key))
            lens.append(int(inv.params["output_tokens"]))
            ctx.append(ops.n_tokens(kvs[-1]))
        lens_a, ctx_a = np.asarray(lens), np.asarray(ctx)
        cum = [0.0]
        for t in range(1, int(lens_a.max()) + 1):
            active = lens_a >= t
            cum.append(cum[-1] + self.profile.decode_step_s(
                int(active.sum()) + bg_seqs, int((ctx_a[active] + t - 1).sum()) + bg_ctx))
        for inv, kv, n in zip(dec, kvs, lens):
            fmt = inv.params["fmt"]
            text = ops.generate(kv, fmt=fmt, n_tokens_out=n, n_items=int(inv.params.get("n_items", 1)))
            pieces = ()
            if fmt == "json_list":
                pieces = tuple((t0 + cum[step], [el]) for step, el in stream_pieces(text, n))
            outs[inv.key] = InvocationOutput(text, t0 + cum[n], pieces)
        self._decoding.append((start_s, start_s + cum[-1], len(dec), int(ctx_a.sum() + lens_a.sum() // 2)))
        return cum[-1]
