"""Deterministic semantics of every primitive, used by simulated engines and the graph scheduler.

Texts are whitespace-separated tokens, so a text's length in tokens is ``len(text.split())``.
Every function is pure: equal inputs give equal outputs, which is what lets the tests check that
an optimised graph computes exactly what the unoptimised one does.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from orchestrator.primitives import Ref

EMBED_DIM = 8


def stable_seed(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def words(tag: Any, n: int) -> str:
    """``n`` deterministic pseudo-words derived from ``tag``."""
    if n <= 0:
        return ""
    ids = np.random.default_rng(stable_seed(tag)).integers(0, 50_000, size=n)
    return " ".join(f"w{i}" for i in ids)


@dataclass(frozen=True)
class Unprefilled:
    """A partial prefill's prompt segments, not computed: the graph runtime merged the partial
    into its full prefill before it started (``SimState.promote_partial``), so the full prefill
    prefills them first, as one prompt, on whichever instance it is placed."""
    segments: tuple[str, ...]


def prefill_tokens(inputs: Mapping[str, Any]) -> int:
    """Prompt tokens a prefill invocation computes: its ``segments``, plus a merged partial's."""
    kv = inputs.get("kv")
    return n_tokens(inputs.get("segments", ())) + (n_tokens(kv.segments) if isinstance(kv, Unprefilled) else 0)


def n_tokens(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, (list, tuple)):
        return sum(n_tokens(v) for v in value)
    return 0


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return " ".join(as_text(v) for v in value if as_text(v))
    return str(value)


def resolve(port: Any, store: Mapping[str, Any]) -> Any:
    """The value of an input port given finished node outputs."""
    if isinstance(port, tuple):
        return tuple(resolve(p, store) for p in port)
    if not isinstance(port, Ref):
        return port.value
    v = store[port.node]
    if port.transform == "json_items":
        v = json_prefix(v)
    elif port.transform == "as_list":
        v = [v]
    elif port.transform is not None:
        raise KeyError(f"unknown transform {port.transform!r}; known: json_items, as_list")
    if isinstance(port.index, tuple):
        for i in port.index:
            v = v[i]
    elif port.index is not None:
        v = v[port.index]
    if port.lo is not None or port.hi is not None:
        v = v[port.lo:port.hi]
    return v


# ---- engine primitives --------------------------------------------------------------------

def embed(texts: Sequence[str]) -> list[tuple[float, ...]]:
    out = []
    for t in texts:
        v = np.random.default_rng(stable_seed("emb", t)).normal(size=EMBED_DIM)
        out.append(tuple(float(x) for x in np.round(v / np.linalg.norm(v), 12)))
    return out


def ingest(texts: Sequence[str], vectors: Sequence[tuple]) -> list[tuple[str, tuple]]:
    if len(texts) != len(vectors):
        raise ValueError(f"ingest: {len(texts)} texts but {len(vectors)} vectors")
    return list(zip(texts, vectors))


def vector_search(queries: Sequence[tuple], index: Sequence[tuple[str, tuple]], top_k: int) -> list[list[str]]:
    out = []
    for q in queries:
        scored = sorted(index, key=lambda r: (-round(float(np.dot(q, r[1])), 9), r[0]))
        out.append([r[0] for r in scored[:top_k]])
    return out


def web_search(queries: Sequence[str], top_k: int, result_tokens: int) -> list[list[str]]:
    return [[words(("web", q, j), result_tokens) for j in range(top_k)] for q in queries]


def flatten_candidates(candidates: Sequence[Any]) -> list[str]:
    """Reranking candidates (texts, or one list of texts per search query) deduplicated in order."""
    flat: list[str] = []
    for c in candidates:
        for t in (c if isinstance(c, (list, tuple)) else [c]):
            if t not in flat:
                flat.append(t)
    return flat


def unscored(candidates: Sequence[Any], seen: Sequence[str] | set[str]) -> list[str]:
    """The candidates (:func:`flatten_candidates`) not in ``seen``: what a part of a pipelined
    reranking still has to score when earlier parts of the same query scored ``seen``."""
    return [t for t in flatten_candidates(candidates) if t not in seen]


def ranked(scores: Sequence[float], texts: Sequence[str], top_n: int, *, scored: bool = False) -> list:
    """The ``top_n`` texts by descending score (ties by text); with ``scored`` each as a
    ``[score, text]`` pair, what a top-k merge of several rerankings needs (Ayo's reranker returns
    ``{"passage", "score"}`` records for its ``AggMode.TOP_K`` aggregator)."""
    order = sorted(zip(scores, texts), key=lambda st: (-st[0], st[1]))[:top_n]
    return [[sc, t] for sc, t in order] if scored else [t for _, t in order]


def rerank(query: str, candidates: Sequence[Any], top_n: int, *, scored: bool = False) -> list:
    """Pointwise reranking: each candidate's score depends on (query, candidate) alone, so the
    top ``top_n`` of a union equals the top ``top_n`` of the union of each part's top ``top_n``."""
    flat = flatten_candidates(candidates)
    return ranked([stable_seed("rr", query, t) % 10_007 for t in flat], flat, top_n, scored=scored)


def merge_top(parts: Sequence[Sequence[Sequence[Any]]], top_n: int) -> list[str]:
    """Merge scored rerankings (``[score, text]`` lists) into the overall top ``top_n`` texts."""
    best: dict[str, float] = {}
    for part in parts:
        for sc, t in part:
            best[t] = sc
    return ranked(list(best.values()), list(best), top_n)


def prompt_segments(segments: Sequence[Any]) -> tuple[str, ...]:
    """KV-cache content of a prompt: one text per segment (causal order)."""
    return tuple(as_text(s) for s in segments)


def json_prefix(text: str) -> Any:
    """The JSON value a text starts with (what follows it, e.g. text generated after a JSON list
    closed, is ignored, as LlamaIndex's and Ayo's output parsers do)."""
    s = text.lstrip()
    return json.JSONDecoder().raw_decode(s)[0]


def generate(kv: tuple[str, ...], *, fmt: str, n_tokens_out: int, n_items: int = 1,
             close_tokens: int | None = None) -> str:
    """The deterministic 'LLM' output for a prompt (its whole KV content). A ``json_list``
    closes after ``close_tokens`` of its ``n_tokens_out`` tokens (all of them when None); free
    text follows up to the length."""
    tag = ("gen", kv, fmt)
    if fmt == "text":
        return words(tag, n_tokens_out)
    if fmt == "yesno":
        head = "yes" if stable_seed(tag) % 3 else "no"  # two in three questions need a search
        return (head + " " + words(tag, n_tokens_out - 1)).strip()
    if fmt == "json_list":
        close = n_tokens_out if close_tokens is None else min(close_tokens, n_tokens_out)
        per = max(1, close // n_items - 1)
        body = json.dumps([words((tag, i), per) for i in range(n_items)])
        tail = words((tag, "tail"), n_tokens_out - close)
        return f"{body} {tail}" if tail else body
    raise KeyError(f"unknown output format {fmt!r}; known: text, yesno, json_list")


# ---- engine-free primitives ---------------------------------------------------------------

def aggregate(parts: Sequence[Any], mode: str, *, top_n: int | None = None) -> Any:
    """Merge ``parts``: ``concat`` lists, ``join`` texts, ``topk`` scored rerankings
    (:func:`merge_top`, ``top_n`` texts)."""
    if mode == "topk":
        if top_n is None:
            raise ValueError("aggregate mode 'topk' needs top_n")
        return merge_top(parts, top_n)
    if mode == "concat":
        out: list = []
        for p in parts:
            out.extend(p if isinstance(p, list) else [p])
        return out
    if mode == "join":
        return " ".join(as_text(p) for p in parts if as_text(p))
    raise KeyError(f"unknown aggregate mode {mode!r}; known: concat, join, topk")


def condition(x: Any) -> bool:
    return as_text(x).strip().lower().startswith("yes")
