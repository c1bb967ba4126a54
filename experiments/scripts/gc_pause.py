"""What one full garbage collection costs in a process holding the real CPU run's engines (stop 38):
the reason ``build_real_engines`` freezes the start-up heap (``gc.freeze``, as vLLM's engine core does).

Builds advanced RAG's real engines as ``teola_real_cpu`` does (tiny Llama x 2, MiniLM embedder, the
MiniLM cross-encoder, pgvector on an embedded pgserver), then times ``gc.collect()`` (wall and the
thread's CPU) ``ROUNDS`` times with the start-up heap frozen, then as often unfrozen.

    PYTHONPATH=. python experiments/scripts/gc_pause.py [ROUNDS]
"""
from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path


def _collect_ms() -> tuple[float, float]:
    t, c = time.perf_counter(), time.thread_time()
    gc.collect()
    return (time.perf_counter() - t) * 1e3, (time.thread_time() - c) * 1e3


def measure(rounds: int) -> list[str]:
    """Lines of the report: objects frozen, then one line per state of the heap."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from experiments.kinds import teola_real_cpu as trc
    from orchestrator.engines.real.embedding import build_minilm_cross_encoder
    from orchestrator.engines.real.factory import build_real_engines, close_engines
    from orchestrator.engines.real.pgvector import embedded_server
    from orchestrator.engines.real.tinyllm import build_tiny_llama
    tmp = Path(tempfile.gettempdir())
    params = trc.Params()
    app = trc.app_for_corpus("advanced_rag", params.n_paragraphs or 12, params)
    engines = build_real_engines(app, llm_dir=build_tiny_llama(tmp / "flowmaker_tiny_llama"),
                                 pg_url=embedded_server(Path(tempfile.mkdtemp()) / "pg"),
                                 llm_instances=params.llm_instances, table="gc_pause",
                                 cross_encoder_dir=build_minilm_cross_encoder(tmp / "flowmaker_minilm_cross_encoder"))
    frozen = gc.get_freeze_count()
    with_freeze = [_collect_ms() for _ in range(rounds)]
    gc.unfreeze()
    without = [_collect_ms() for _ in range(rounds)]
    gc.freeze()
    close_engines(engines)
    fmt = lambda xs: ", ".join(f"{w:.1f} / {c:.1f}" for w, c in xs)  # noqa: E731
    return [f"objects frozen after the engines' start-up: {frozen}",
            f"full collection, start-up heap frozen (ms wall / CPU): {fmt(with_freeze)}",
            f"full collection, nothing frozen (ms wall / CPU): {fmt(without)}"]


def main(argv: list[str]) -> int:
    for line in measure(int(argv[0]) if argv else 5):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
