"""Real instances for an application's engine names (``configs/apps/*.yaml``): each name's
simulated spec says what kind of engine it is; this builds the real one of that kind."""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from orchestrator.engines.base import Engine
from orchestrator.engines.factory import load_engine_spec


def build_real_engines(app: Any, *, llm_dir: str | Path, pg_url: str, llm_instances: int | None = None,
                       llm_dtype: str = "float32", llm_max_batch: int = 8, embed_max_batch: int = 8,
                       embed_model_dir: str | None = None, table: str = "teola_chunks",
                       cross_encoder_dir: str | Path | None = None) -> dict[str, list[Engine]]:
    """Fresh real instances for every engine of ``app`` (an ``AppSpec``): ``llm`` ->
    :class:`TorchLLMEngine` on ``llm_dir`` (``llm_instances`` or the app's count), ``embedding``
    -> MiniLM, ``reranker`` -> the cross-encoder in ``cross_encoder_dir`` (``embedding.build_minilm_cross_encoder``)
    or, without one, the embedding-similarity reranker, ``vectordb`` -> pgvector at
    ``pg_url``. ``websearch`` has no offline real engine and is refused."""
    from orchestrator.engines.real.embedding import EmbeddingReranker, SentenceEmbeddingEngine
    from orchestrator.engines.real.llm import TorchLLMEngine
    from orchestrator.engines.real.pgvector import PgVectorEngine

    out: dict[str, list[Engine]] = {}
    for name, b in app.engines.items():
        kind = load_engine_spec(b.spec).kind
        if kind == "llm":
            n = llm_instances or b.instances
            out[name] = [TorchLLMEngine(name=f"{name}#{i}", model_dir=llm_dir, dtype=llm_dtype,
                                        max_batch=llm_max_batch).load() for i in range(n)]
        elif kind == "embedding":
            out[name] = [SentenceEmbeddingEngine(name=f"{name}#{i}", model_dir=embed_model_dir,
                                                 max_batch=embed_max_batch) for i in range(b.instances)]
        elif kind == "reranker":
            out[name] = [EmbeddingReranker(name=f"{name}#{i}", model_dir=embed_model_dir,
                                           cross_encoder_dir=cross_encoder_dir) for i in range(b.instances)]
        elif kind == "vectordb":
            dim = SentenceEmbeddingEngine(name="probe", model_dir=embed_model_dir).dim
            out[name] = [PgVectorEngine(name=f"{name}#{i}", url=pg_url, dim=dim, table=table)
                         for i in range(b.instances)]
        else:
            raise KeyError(f"engine {name!r} of app {app.name!r} is a {kind!r} engine; real engines exist for "
                           f"llm, embedding, reranker, vectordb")
    for insts in out.values():
        for e in insts:
            e.warm()
    # As vLLM's engine core does once it is built (vllm/utils/gc_utils.py freeze_gc_heap, called at the
    # end of EngineCore.__init__): what start-up allocated (weights, tokenizers, clients) is frozen out of
    # the collector, so a full collection in the middle of a query does not scan it; close_engines undoes it.
    gc.collect()
    gc.freeze()
    return out


def close_engines(engines: dict[str, list[Engine]]) -> None:
    """Close every instance and give what :func:`build_real_engines` froze back to the collector."""
    for insts in engines.values():
        for e in insts:
            close = getattr(e, "close", None)
            if close is not None:
                close()
    gc.unfreeze()
    gc.collect()
