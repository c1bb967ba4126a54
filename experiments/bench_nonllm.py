"""Measure the real non-LLM engines on this CPU (issue 15, item 6): the MiniLM embedder, the
embedding-similarity reranker and PostgreSQL + pgvector (insert, search), through the same
``Engine.submit`` the wall-clock runtime uses; each point is the fastest of ``--repeats`` runs
(``BatchResult.duration_s``, after a warm-up): on a shared machine the fastest run is the one
least disturbed by other processes.

    python -m experiments.bench_nonllm [--threads 1] [--repeats 3] [--out bench_nonllm.yaml]

Texts are made of common English words that MiniLM's WordPiece vocabulary holds whole, so a
text of ``t`` words is ``t`` tokens (+2 special ones; checked against the tokenizer). Prints
YAML tables in the ``configs/engines`` profile schema (``latency_ms[tokens][batch]``);
``configs/engines/*_cpu.yaml`` hold one such run, with the machine named.
"""
from __future__ import annotations

import os
import platform
import tempfile
from typing import Any, Callable, Sequence

import yaml

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


def main(argv: Sequence[str] | None = None) -> int:
    from flowmaker.entry import OneLineParser, add_version
    ap = OneLineParser(prog="python -m experiments.bench_nonllm", description=__doc__.split("\n\n")[0])
    add_version(ap)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per size; the fastest counts (default 5)")
    ap.add_argument("--only", choices=("embedding", "reranker", "cross-encoder", "pgvector"), action="append",
                    help="measure only this engine (repeatable; default all but cross-encoder, the MiniLM "
                         "cross-encoder reranker of the real runs)")
    ap.add_argument("--out", default=None, help="also write the YAML here")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    torch.set_num_threads(a.threads)
    which = a.only or ["embedding", "reranker", "pgvector"]
    out: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                                      f"torch threads {a.threads}", "repeats": a.repeats}
    fns = {"embedding": bench_embedding, "reranker": bench_reranker, "pgvector": bench_pgvector,
           "cross-encoder": lambda r: bench_reranker(r, cross_encoder=True)}
    for w in which:
        out[w] = fns[w](a.repeats)
        print(yaml.safe_dump({w: out[w]}, sort_keys=False, default_flow_style=None), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            yaml.safe_dump(out, f, sort_keys=False, default_flow_style=None)
    return 0


if __name__ == "__main__":
    from flowmaker.entry import run
    run(main)
