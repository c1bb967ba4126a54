"""Tokens per word of each real engine on the real CPU run's own calls (issue 26): the simulated
workload counts words (``orchestrator.ops.n_tokens``), the measured CPU tables count each engine's
tokens, so ``teola_real_cpu_sim`` re-indexes the tables by these ratios (``tokens_per_word``).

Runs ``teola_real_cpu``'s cells (naive RAG: teola, llamadist-open-to; advanced RAG: teola,
llamadistpc-to, llamadistpc-open-to; 3 queries each, its default workload) on the real engines and
counts, for every prefill, embedding and reranking invocation, the words of its input and the
engine's own tokens: the tiny Llama's prompt ids (``TorchLLMEngine.prompt_ids``), MiniLM WordPiece
tokens without the special ones (what the MiniLM tables count), per reranked pair those of the
question and the candidate. Prints the ratio of the sums per engine and app. Token counts do not
depend on timing, so the figures are exact on any load::

    PYTHONPATH=. python experiments/scripts/real_tokens_per_word.py
"""
from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from pathlib import Path

CELLS = {"naive_rag": ["teola", "llamadist-open-to"], "advanced_rag": ["teola", "llamadistpc-to", "llamadistpc-open-to"]}


def _counts(engine, inv) -> tuple[str, int, int] | None:
    """(engine family, words, engine tokens) of one invocation, None for other kinds."""
    from orchestrator import ops
    from orchestrator.engines.real.embedding import load_sentence_model
    x = inv.inputs
    if "segments" in x:
        segs = ops.prompt_segments(x["segments"])
        return "llm", ops.n_tokens(segs), len(engine.prompt_ids(segs, first=inv.kind.name != "FULL_PREFILLING"))
    n = lambda t: len(load_sentence_model(None).tokenizer(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    if "texts" in x and inv.kind.name == "EMBEDDING":
        return "embedder", ops.n_tokens(x["texts"]), sum(n(t) for t in x["texts"])
    if "candidates" in x:
        q, flat = str(x["query"]), ops.flatten_candidates(x["candidates"])
        return "reranker", sum(ops.n_tokens(q) + ops.n_tokens(t) for t in flat), sum(n(q) + n(t) for t in flat)
    return None


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from experiments.kinds import teola_real_cpu as trc
    from orchestrator.engines.real import worker
    from orchestrator.engines.real.embedding import build_minilm_cross_encoder
    from orchestrator.engines.real.pgvector import embedded_server, stop_embedded_server
    from orchestrator.engines.real.tinyllm import build_tiny_llama
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    app = [""]
    submit = worker.WorkerEngine.submit

    def counting(self, batch, **kw):
        for inv in batch:
            c = _counts(self, inv)
            if c is not None:
                s = sums[(app[0], c[0])]
                s[0], s[1], s[2] = s[0] + c[1], s[1] + c[2], s[2] + 1
        return submit(self, batch, **kw)
    worker.WorkerEngine.submit = counting
    tmp = Path(tempfile.gettempdir())
    llm, ce = str(build_tiny_llama(tmp / "flowmaker_tiny_llama")), str(build_minilm_cross_encoder(tmp / "flowmaker_minilm_cross_encoder"))
    pgdata = Path(tempfile.mkdtemp(prefix="tpw-pg-"))
    pg = embedded_server(pgdata)
    try:
        for a, schemes in CELLS.items():
            app[0] = a
            params = trc.Params(apps=[a], schemes=schemes)
            for s in schemes:
                trc.run_cell(a, s, params, llm, pg, 0, 1.0, ce)
    finally:
        stop_embedded_server(pgdata)
    for eng in ("llm", "embedder", "reranker"):
        per = {a: sums[(a, eng)] for a in CELLS if sums[(a, eng)][2]}
        w, t, n = (sum(v[i] for v in per.values()) for i in range(3))
        apps = ", ".join(f"{a} {v[1] / v[0]:.2f} ({v[2]} calls)" for a, v in per.items())
        print(f"{eng}: {t / w:.2f} tokens per word over {n} calls ({apps})")


if __name__ == "__main__":
    main()
