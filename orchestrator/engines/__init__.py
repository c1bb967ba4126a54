"""Engines: the interface, latency profiles, simulated instances and their factory."""
from orchestrator.engines.base import (BatchResult, Engine, EngineError, Invocation,
                                       InvocationOutput, PendingBatch)
from orchestrator.engines.factory import (build_instances, llm_instances, load_engine_spec,
                                          profiler_llm_instances)
from orchestrator.engines.llm_core import LLMCore, Seq, StepTime
from orchestrator.engines.profiles import (BatchProfile, LinearLLMProfile, LinearProfile, TableProfile,
                                           max_efficient_batch)
from orchestrator.engines.sim import AYO_ENGINE, SimEngine, SimLLMEngine

__all__ = ["BatchResult", "Engine", "EngineError", "Invocation", "InvocationOutput", "PendingBatch",
           "build_instances", "llm_instances", "load_engine_spec", "profiler_llm_instances",
           "LLMCore", "Seq", "StepTime", "BatchProfile", "LinearLLMProfile", "LinearProfile", "TableProfile",
           "max_efficient_batch", "AYO_ENGINE", "SimEngine", "SimLLMEngine"]
