"""Serving backends for real execution: an OpenAI-compatible HTTP client (streamed, with an
overall deadline and counted faults) that is also an orchestrator
:class:`~orchestrator.engines.base.Engine`, launchers that start one server process per planned
instance (``transformers serve``, ``vllm serve``, ``trtllm-serve``) with its TP/PP degree, GPU
mapping, engine configuration and memory share, wait for health, and stop them, and synthetic
load prompts (``prompts``).

    from harness.servers import ServerSpec, Fleet, OpenAIClient
    with Fleet([ServerSpec(name="llm0", backend="transformers", model="/path/model", port=8100)]) as fleet:
        client = fleet.client("llm0")

``httpx`` is imported only when a client is made.
"""
from harness.servers.client import (FAULT_KINDS, Completion, EngineDeadError, Generation, OpenAIClient, OpenAIEngine,
                                    ServerError, exact_output_body, served_model)
from harness.servers.launcher import BACKENDS, Fleet, ServerProcess, ServerSpec, build_command, config_files

__all__ = ["Completion", "Generation", "FAULT_KINDS", "exact_output_body", "served_model", "EngineDeadError",
           "OpenAIClient", "OpenAIEngine", "ServerError", "BACKENDS", "Fleet", "ServerProcess", "ServerSpec",
           "build_command", "config_files"]
