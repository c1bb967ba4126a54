"""Engines: the interface, latency profiles, simulated instances and their factory."""
from orchestrator.engines.base import (BatchResult, Engine, EngineError, Invocation,
                                       InvocationOutput, PendingBatch)
from orchestrator.engines.factory import (build_instances, llm_instances, load_engine_spec,
                                          profiler_llm_instances)
from orchestrator.engines.profiles import (BatchProfile, LatencyProfile, LinearLLMProfile,
                                           LinearProfile, StepModelProfile, TableProfile,
                                           max_efficient_batch, profiler_llm_profile)
from orchestrator.engines.sim import SimEngine, SimLLMEngine
from orchestrator.engines.iteration import Iteration, IterationLLMEngine

__all__ = ["BatchResult", "Engine", "EngineError", "Invocation", "InvocationOutput", "PendingBatch",
           "build_instances", "llm_instances", "load_engine_spec", "profiler_llm_instances",
           "BatchProfile", "LatencyProfile", "LinearLLMProfile", "LinearProfile", "StepModelProfile",
           "TableProfile", "max_efficient_batch", "profiler_llm_profile", "SimEngine", "SimLLMEngine",
           "Iteration", "IterationLLMEngine"]
