"""Measure the real non-LLM engines on this CPU (issue 15, item 6): the MiniLM embedder, the
embedding-similarity reranker and PostgreSQL + pgvector (insert, search), through the same
``Engine.submit`` the wall-clock runtime uses; each point is the fastest of ``params.repeats`` runs
(``BatchResult.duration_s``, after a warm-up): on a shared machine the fastest run is the one
least disturbed by other processes.

    python -m experiments.run bench_nonllm        (params: threads, repeats, only)

Texts are made of common English words that MiniLM's WordPiece vocabulary holds whole, so a
text of ``t`` words is ``t`` tokens (+2 special ones; checked against the tokenizer). Prints
YAML tables in the ``configs/engines`` profile schema (``latency_ms[tokens][batch]``) and writes
them to the run folder's ``profiles.yaml``; ``configs/engines/*_cpu.yaml`` hold one such run, with
the machine named.
"""
from __future__ import annotations

import os
import platform
import tempfile
from typing import Any, Callable, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext, atomic_write_text
from orchestrator.engines.base import Invocation
from orchestrator.primitives import Kind

VOCAB = ("the system data model query answer document search result paper question time work "
         "first people world state group number part place case point fact week government company "
         "program problem service power music money water history market city report level line "
         "family health book story story school study night result area").split()
BATCHES = (1, 2, 4, 8, 16, 32, 64)
TOKENS = (32, 128, 256)
DIM = 384


def text(i: int, n: int) -> str:
    return " ".join(VOCAB[(i * 7 + k * 13) % len(VOCAB)] for k in range(n))


def _best_ms(run: Callable[[], float], repeats: int) -> float:
    run()                                               # warm-up (first-call overheads)
    return round(1e3 * min(run() for _ in range(repeats)), 2)


def _timed(engine: Any, invs: Sequence[Invocation]) -> Callable[[], float]:
    return lambda: engine.submit(list(invs)).result().duration_s


def bench_embedding(repeats: int) -> dict:
    from orchestrator.engines.real.embedding import SentenceEmbeddingEngine, load_sentence_model
    eng = SentenceEmbeddingEngine(name="minilm", max_batch=max(BATCHES))
    eng.warm()
    tok = load_sentence_model().tokenizer
    assert len(tok(text(0, 32))["input_ids"]) == 34, "VOCAB words must be single WordPiece tokens"
    rows = []
    for t in TOKENS:
        rows.append([_best_ms(_timed(eng, [Invocation("e", Kind.EMBEDDING, {"texts": [text(i, t) for i in range(b)]},
                                                        n_items=b)]), repeats) for b in BATCHES])
    eng.close()
    return {"type": "table", "batch_sizes": list(BATCHES), "tokens": list(TOKENS), "latency_ms": rows}


def bench_reranker(repeats: int, query_tokens: int = 24, cross_encoder: bool = False) -> dict:
    from orchestrator.engines.real.embedding import EmbeddingReranker, build_minilm_cross_encoder
    ce = build_minilm_cross_encoder(os.path.join(tempfile.gettempdir(), "flowmaker_minilm_cross_encoder")) \
        if cross_encoder else None
    eng = EmbeddingReranker(name="rr", cross_encoder_dir=ce)
    eng.warm()
    rows = []
    for t in TOKENS:
        row = []
        for b in BATCHES:
            inv = Invocation("r", Kind.RERANKING, {"query": text(99, query_tokens),
                                                   "candidates": [[text(i, t) for i in range(b)]]},
                             {"top_n": 3}, n_items=b)
            row.append(_best_ms(_timed(eng, [inv]), repeats))
        rows.append(row)
    eng.close()
    # a pair is (query, candidate): index rows by pair tokens
    return {"type": "table", "batch_sizes": list(BATCHES), "tokens": [t + query_tokens for t in TOKENS],
            "latency_ms": rows}


def bench_pgvector(repeats: int, index_rows: Sequence[int] = (32, 256, 1024)) -> dict:
    import numpy as np
    from orchestrator.engines.real.pgvector import PgVectorEngine, embedded_server, stop_embedded_server
    data = tempfile.mkdtemp(prefix="bench-pg-")
    try:
        eng = PgVectorEngine(name="pg", url=embedded_server(data), dim=DIM, table="bench_rows")
        eng.warm()
        rng = np.random.default_rng(0)

        def vecs(n: int) -> list[list[float]]:
            v = rng.normal(size=(n, DIM))
            return (v / np.linalg.norm(v, axis=1, keepdims=True)).tolist()

        ins = {b: _best_ms(lambda b=b: _timed(eng, [Invocation("i", Kind.INGESTION, {"texts": [text(i, 8) for i in range(b)],
                                                                                       "vectors": vecs(b)}, n_items=b)])(), repeats)
               for b in BATCHES}
        search = {}
        for n in index_rows:
            handles = eng.ingest([([text(i, 8) for i in range(n)], vecs(n))])[0]
            search[n] = {q: _best_ms(lambda q=q: _timed(eng, [Invocation("s", Kind.SEARCHING, {"queries": vecs(q), "index": handles},
                                                                           {"top_k": 16}, n_items=q)])(), repeats)
                         for q in (1, 3, 8)}
        eng.close()
    finally:
        stop_embedded_server(data)
    return {"ingestion_ms_by_rows": ins, "searching_ms_by_index_rows_and_queries": search}


def bench_paired(repeats: int, batches: Sequence[int], tokens: Sequence[int], query_tokens: int = 24) -> dict:
    """The MiniLM cross-encoder and the MiniLM embedder on the same compute, timed alternately per
    point (each the fastest of ``repeats``), so both see the same machine load: a cross-encoder
    forward over N (query, candidate) pairs of t tokens against an embedding of N texts of t tokens.
    Their ratio is what the cross-encoder table (``cross-encoder-minilm_cpu.yaml``) is checked with."""
    from orchestrator.engines.real.embedding import EmbeddingReranker, SentenceEmbeddingEngine, build_minilm_cross_encoder
    ce = EmbeddingReranker(name="ce", cross_encoder_dir=build_minilm_cross_encoder(
        os.path.join(tempfile.gettempdir(), "flowmaker_minilm_cross_encoder")))
    emb = SentenceEmbeddingEngine(name="minilm", max_batch=max(batches))
    ce.warm()
    emb.warm()
    out: dict[str, Any] = {"batch_sizes": list(batches), "pair_tokens": [t + query_tokens for t in tokens],
                           "embedding_ms": [], "cross_encoder_ms": [], "ratio": [], "load_1min": []}
    for t in tokens:
        e_row, c_row, r_row, l_row = [], [], [], []
        for b in batches:
            e = _timed(emb, [Invocation("e", Kind.EMBEDDING, {"texts": [text(i, t + query_tokens) for i in range(b)]},
                                        n_items=b)])
            c = _timed(ce, [Invocation("r", Kind.RERANKING, {"query": text(99, query_tokens),
                                                             "candidates": [[text(i, t) for i in range(b)]]},
                                       {"top_n": 3}, n_items=b)])
            e(), c()                                     # warm-up
            es, cs = [], []
            for _ in range(repeats):                     # alternately: the same load for both
                es.append(e())
                cs.append(c())
            e_row.append(round(1e3 * min(es), 2))
            c_row.append(round(1e3 * min(cs), 2))
            r_row.append(round(min(cs) / min(es), 3))
            l_row.append(round(os.getloadavg()[0], 2))
        for k, row in zip(("embedding_ms", "cross_encoder_ms", "ratio", "load_1min"), (e_row, c_row, r_row, l_row)):
            out[k].append(row)
    ce.close()
    emb.close()
    return out


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    threads: int = Field(default=1, ge=1)                                 # torch intra-op threads
    repeats: int = Field(default=5, ge=1)                                 # timed runs per size; the fastest counts
    # default all but cross-encoder (the MiniLM cross-encoder reranker of the real runs)
    only: list[Literal["embedding", "reranker", "cross-encoder", "pgvector", "paired"]] | None = None
    # `paired`: the cross-encoder and the embedder timed alternately on these sizes (same load)
    paired_batches: list[int] = Field(default_factory=lambda: [1, 4, 16], min_length=1)
    paired_tokens: list[int] = Field(default_factory=lambda: [32, 128], min_length=1)


def run(params: Params, ctx: RunContext) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    torch.set_num_threads(params.threads)
    which = params.only or ["embedding", "reranker", "pgvector"]
    out: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                                      f"torch threads {params.threads}", "repeats": params.repeats,
                           "load_before": " / ".join(f"{x:.2f}" for x in os.getloadavg())}
    fns = {"embedding": bench_embedding, "reranker": bench_reranker, "pgvector": bench_pgvector,
           "cross-encoder": lambda r: bench_reranker(r, cross_encoder=True),
           "paired": lambda r: bench_paired(r, params.paired_batches, params.paired_tokens)}
    for w in which:
        out[w] = fns[w](params.repeats)
        print(yaml.safe_dump({w: out[w]}, sort_keys=False, default_flow_style=None), flush=True)
    out["load_after"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    text = yaml.safe_dump(out, sort_keys=False, default_flow_style=None)
    atomic_write_text(ctx.run_dir / "profiles.yaml", text)
    atomic_write_text(ctx.run_dir / "summary.md", f"# Non-LLM engines on this CPU (bench_nonllm)\n\n```yaml\n{text}```\n")
