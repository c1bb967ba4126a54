"""Engines: the interface, latency profiles, simulated instances and their factory. Names below
are resolved lazily (PEP 562): ``import orchestrator.engines.llm_core`` loads only the core."""
from __future__ import annotations

from flowmaker.lazy import lazy_exports

_EXPORTS = {
    "BatchResult": "base", "Engine": "base", "EngineError": "base", "Invocation": "base",
    "InvocationOutput": "base", "PendingBatch": "base",
    "build_instances": "factory", "per_word": "factory", "llm_instances": "factory", "load_engine_spec": "factory",
    "profiler_llm_instances": "factory", "share_cores": "factory", "LLMCore": "llm_core", "Seq": "llm_seq", "StepTime": "llm_timing",
    "BatchProfile": "profiles", "LinearLLMProfile": "profiles", "LinearProfile": "profiles",
    "TableProfile": "profiles", "max_efficient_batch": "profiles",
    "AYO_ENGINE": "sim", "SimEngine": "sim", "SimLLMEngine": "sim",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
