"""The real embedder's cost per batch of the real run's own texts, measured apart from any run
(issue 26): an independent check of the batch costs `teola_real_cpu_sim` prices the embedder by.

Batches as the real CPU run sends them (``teola_real_cpu``, corpus ``ostvik_guide``, 12 paragraphs per
document): one question; 4, 8 and 12 paragraphs in one invocation; 4 paragraphs and a question as two
invocations batched together (Teola's second batch). Each round takes the next window of
paragraphs and question and times every batch once, in a rotated order, through the engine's own
``submit`` (``BatchResult.duration_s``), after a warm-up; prints the median and quartiles per batch.

    PYTHONPATH=. python experiments/scripts/embed_batches.py [ROUNDS]
"""
from __future__ import annotations

import statistics
import sys

from experiments.kinds.teola_real_cpu import load_corpus
from orchestrator.engines.base import Invocation
from orchestrator.primitives import Kind


def _inv(texts: list[str]) -> Invocation:
    return Invocation("e", Kind.EMBEDDING, {"texts": texts}, n_items=len(texts))


def batches(paras: list[str], questions: list[str], r: int) -> dict[str, list[Invocation]]:
    doc = [paras[(12 * r + k) % len(paras)] for k in range(12)]
    q = questions[r % len(questions)]
    return {"1 question": [_inv([q])], "4 chunks": [_inv(doc[8:])], "4 chunks + question": [_inv(doc[8:]), _inv([q])],
            "8 chunks": [_inv(doc[:8])], "12 chunks": [_inv(doc)]}


def main(rounds: int = 15) -> None:
    import torch
    from orchestrator.engines.real.embedding import SentenceEmbeddingEngine
    torch.set_num_threads(1)
    paras, questions = load_corpus("ostvik_guide")
    eng = SentenceEmbeddingEngine(name="minilm", max_batch=16)
    eng.warm()
    times: dict[str, list[float]] = {}
    for r in range(rounds + 1):
        b = list(batches(paras, questions, r).items())
        for name, invs in b[r % len(b):] + b[:r % len(b)]:
            ms = 1e3 * eng.submit(invs).result().duration_s
            if r:                                       # round 0 is the warm-up
                times.setdefault(name, []).append(ms)
    eng.close()
    for name, t in times.items():
        qs = statistics.quantiles(t, n=4)
        print(f"{name:22s} median {statistics.median(t):6.1f} ms  [{qs[0]:.1f}-{qs[2]:.1f}]  n={len(t)}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
