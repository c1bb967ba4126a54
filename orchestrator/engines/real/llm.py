"""A real LLM engine on PyTorch + transformers with true partial / full prefilling.

* PREFILLING and PARTIAL_PREFILLING create a KV cache (``transformers.DynamicCache``) for the
  invocation's ``kv_key`` from its prompt segments; FULL_PREFILLING runs only the new segments
  on top of that cache (the prefix is never recomputed): its logits equal a single prefill's.
* DECODING reads the cache, decodes greedily and frees it. Sequences of one batch decode
  together (left-padded KV, attention mask, per-row positions), one forward per step.
* Output formats (``params['fmt']``): ``text``; ``yesno`` (the first word is whichever of "yes"
  / "no" the model scores higher); ``json_list`` (structured generation: ``n_items`` strings,
  brackets, quotes and commas forced, word tokens chosen by the model). A JSON list streams
  through :class:`orchestrator.jsonstream.IncrementalJsonList`: each completed item is reported
  to ``on_piece`` at once (PartialDecoding) and kept in ``InvocationOutput.pieces``.

A prompt is the concatenation of its segments' token ids (``<s>`` first, ``\\n`` before every
later segment), each segment tokenized on its own, so a split at a segment boundary sees exactly
the tokens of the unsplit prompt. ``eos`` is ignored: a decode produces exactly its tokens.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from orchestrator import ops
from orchestrator.engines.base import EngineError, Invocation, InvocationOutput, PieceCallback
from orchestrator.engines.real.worker import WorkerEngine
from orchestrator.jsonstream import IncrementalJsonList
from orchestrator.primitives import Kind, PREFILL_KINDS


@dataclass
class _Seq:
    cache: Any           # DynamicCache, batch 1
    n_tokens: int
    last_logits: Any     # (vocab,) logits after the last prompt token
    segments: tuple[str, ...]


class TorchLLMEngine(WorkerEngine):
    """One instance of a causal LM from ``model_dir`` (a local Hugging Face checkpoint)."""
    continuous = False
    streams = True

    def __init__(self, *, name: str, model_dir: str | Path, dtype: str = "float32",
                 max_batch: int = 8, kv_capacity_tokens: int = 1 << 20) -> None:
        super().__init__(name=name, kind="llm", serves=frozenset(PREFILL_KINDS | {Kind.DECODING}),
                         max_batch=max_batch)
        self.model_dir, self.dtype = str(model_dir), dtype
        self.kv_capacity_tokens = kv_capacity_tokens
        self._kv: dict[str, _Seq] = {}
        self._model = self._tok = None

    # ---- loading ----
    def load(self) -> "TorchLLMEngine":
        """Load model and tokenizer now (otherwise on the first batch)."""
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            self._torch = torch
            self._tok = AutoTokenizer.from_pretrained(self.model_dir)
            self._model = AutoModelForCausalLM.from_pretrained(
                self.model_dir, dtype=getattr(torch, self.dtype)).eval()
            self._build_vocab_masks()
        return self

    def _build_vocab_masks(self) -> None:
        torch, tok = self._torch, self._tok
        n = self._model.config.vocab_size
        special = set(tok.all_special_ids)
        self._special = torch.zeros(n, dtype=torch.bool)
        self._word = torch.zeros(n, dtype=torch.bool)
        for i in range(n):
            if i in special:
                self._special[i] = True
                continue
            s = tok.decode([i]) if i < len(tok) else ""
            self._word[i] = bool(s) and s.isprintable() and not any(c in s for c in '"\\\ufffd[]')
        self._enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]

    def warm(self) -> None:
        self.load()
        self.forward(self.prompt_ids(("warm up",), first=True))

    # ---- interface ----
    def occupied_kv_tokens(self) -> int:
        return sum(s.n_tokens for s in list(self._kv.values()))

    def holds_kv(self, kv_key: str) -> bool:
        return kv_key in self._kv

    # ---- execution ----
    def _run(self, batch: list[Invocation], t0: float, on_piece: PieceCallback | None) -> list[InvocationOutput]:
        self.load()
        outs: dict[str, InvocationOutput] = {}
        with self._torch.inference_mode():
            for inv in batch:
                if inv.kind in PREFILL_KINDS:
                    outs[inv.key] = InvocationOutput(self._prefill(inv), time.perf_counter() - t0)
            dec = [i for i in batch if i.kind == Kind.DECODING]
            if dec:
                outs.update(self._decode(dec, t0, on_piece))
        return [outs[i.key] for i in batch]

    def prompt_ids(self, segments: Sequence[Any], *, first: bool) -> list[int]:
        """Token ids of prompt segments (``first``: they open the prompt, so ``<s>`` leads)."""
        self.load()
        ids: list[int] = [self._tok.bos_token_id] if first else []
        for j, seg in enumerate(ops.prompt_segments(segments)):
            ids += self._enc(seg if (first and j == 0) else "\n" + seg)
        return ids

    def forward(self, ids: Sequence[int], cache: Any | None = None) -> tuple[Any, Any]:
        """Run ``ids`` on top of ``cache`` (a new DynamicCache when None); return
        ``(cache, logits of every new position)``. The prefill primitive in one call."""
        from transformers import DynamicCache
        self.load()
        cache = cache if cache is not None else DynamicCache(config=self._model.config)
        x = self._torch.tensor([list(ids)], dtype=self._torch.long)
        with self._torch.inference_mode():
            out = self._model(input_ids=x, cache=cache, use_cache=True)
        return cache, out.logits[0]

    def _prefill(self, inv: Invocation) -> tuple[str, ...]:
        segs = ops.prompt_segments(inv.inputs["segments"])
        if inv.kind == Kind.FULL_PREFILLING:
            prev = self._kv.get(inv.kv_key)
            if prev is None:
                raise EngineError(f"{self.name}: FullPrefilling {inv.key} has no KV cache {inv.kv_key!r} here")
            ids = self.prompt_ids(segs, first=False)
            if not ids:
                return prev.segments + segs
            cache, logits = self.forward(ids, prev.cache)
            self._kv[inv.kv_key] = _Seq(cache, prev.n_tokens + len(ids), logits[-1], prev.segments + segs)
            return prev.segments + segs
        ids = self.prompt_ids(segs, first=True)
        cache, logits = self.forward(ids)
        self._kv[inv.kv_key] = _Seq(cache, len(ids), logits[-1], segs)
        return segs

    def _plan(self, inv: Invocation) -> Iterator:
        """Yields per decode step ``("force", id)`` or ``("free", mask|None)``; receives the id."""
        fmt, n_out = inv.params.get("fmt", "text"), max(1, int(inv.params.get("output_tokens", 16)))
        if fmt == "json_list":
            k = max(1, int(inv.params.get("n_items", 1)))
            close = min(n_out, int(inv.params.get("close_tokens") or n_out))   # the list may close early
            per = max(1, close // k - 1)
            for j in range(k):
                for t in self._enc('["' if j == 0 else '", "'):
                    yield ("force", t)
                for _ in range(per):
                    yield ("free", self._word)
            for t in self._enc('"]'):
                yield ("force", t)
            for _ in range(n_out - close):           # free text after it, ignored by the parsers
                yield ("free", None)
            return
        left = n_out
        if fmt == "yesno":
            yes, no = self._enc("yes"), self._enc("no")
            first = yield ("choose", (yes[0], no[0]))
            for t in (yes if first == yes[0] else no)[1:]:
                yield ("force", t)
            left -= len(yes if first == yes[0] else no)
        elif fmt != "text":
            raise EngineError(f"unknown output format {fmt!r}; known: text, yesno, json_list")
        for _ in range(max(0, left)):
            yield ("free", None)

    def _pick(self, step: tuple, logits: Any) -> int:
        torch = self._torch
        what, arg = step
        if what == "force":
            return int(arg)
        if what == "choose":
            return int(arg[0]) if logits[arg[0]] >= logits[arg[1]] else int(arg[1])
        masked = logits.masked_fill(self._special, float("-inf"))
        if arg is not None:
            masked = masked.masked_fill(~arg, float("-inf"))
        return int(torch.argmax(masked))

    def _decode(self, dec: list[Invocation], t0: float, on_piece: PieceCallback | None) -> dict[str, InvocationOutput]:
        torch = self._torch
        seqs = []
        for inv in dec:
            if inv.kv_key not in self._kv:
                raise EngineError(f"{self.name}: Decoding {inv.key} has no KV cache {inv.kv_key!r} here")
            seqs.append(self._kv.pop(inv.kv_key))
        cache, mask = _stack_caches([s.cache for s in seqs], [s.n_tokens for s in seqs], torch)
        plans = [self._plan(i) for i in dec]
        steps = [next(p) for p in plans]
        logits = torch.stack([s.last_logits for s in seqs])
        pos = torch.tensor([s.n_tokens for s in seqs], dtype=torch.long)
        rows = list(range(len(dec)))                # live row -> index into dec
        gen: list[list[int]] = [[] for _ in dec]
        parsers = [IncrementalJsonList() if i.params.get("fmt") == "json_list" else None for i in dec]
        pieces: list[list] = [[] for _ in dec]
        outs: dict[str, InvocationOutput] = {}
        while rows:
            toks, keep = [], []
            for r, b in enumerate(rows):
                t = self._pick(steps[b], logits[r])
                gen[b].append(t)
                self._stream(dec[b], parsers[b], t, pieces[b], t0, on_piece)
                try:
                    steps[b] = plans[b].send(t) if steps[b][0] == "choose" else next(plans[b])
                    toks.append(t)
                    keep.append(r)
                except StopIteration:
                    outs[dec[b].key] = InvocationOutput(self._tok.decode(gen[b], skip_special_tokens=True),
                                                        time.perf_counter() - t0, tuple(pieces[b]))
            if not keep:
                break
            if len(keep) < len(rows):
                idx = torch.tensor(keep, dtype=torch.long)
                cache.batch_select_indices(idx)
                mask, pos = mask[idx], pos[idx]
                rows = [rows[r] for r in keep]
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype)], dim=1)
            out = self._model(input_ids=torch.tensor(toks, dtype=torch.long)[:, None], attention_mask=mask,
                              position_ids=pos[:, None], cache=cache, use_cache=True)
            logits = out.logits[:, -1]
            pos = pos + 1
        return outs

    def _stream(self, inv: Invocation, parser: IncrementalJsonList | None, tok_id: int, pieces: list,
                t0: float, on_piece: PieceCallback | None) -> None:
        if parser is None or parser.done:
            return
        for el in parser.feed(self._tok.decode([tok_id])):
            i = len(pieces)
            pieces.append((time.perf_counter() - t0, [el]))
            if on_piece is not None:
                on_piece(inv.key, i, [el])


def _stack_caches(caches: list, lens: list[int], torch: Any) -> tuple[Any, Any]:
    """One left-padded batch cache from per-sequence caches, and its 2-D attention mask."""
    from transformers import DynamicCache
    if len(caches) == 1:
        return caches[0], torch.ones(1, lens[0], dtype=torch.long)
    L = max(lens)
    data = []
    for li in range(len(caches[0].layers)):
        ks, vs = [], []
        for c, n in zip(caches, lens):
            k, v = c.layers[li].keys, c.layers[li].values
            pad = (0, 0, L - n, 0)
            ks.append(torch.nn.functional.pad(k, pad))
            vs.append(torch.nn.functional.pad(v, pad))
        data.append((torch.cat(ks), torch.cat(vs)))
    mask = torch.zeros(len(caches), L, dtype=torch.long)
    for b, n in enumerate(lens):
        mask[b, L - n:] = 1
    return DynamicCache(ddp_cache_data=data), mask
