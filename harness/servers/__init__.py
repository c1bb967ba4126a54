"""Serving backends for real execution: an OpenAI-compatible HTTP client (streamed, with an
overall deadline and counted faults) that is also an orchestrator
:class:`~orchestrator.engines.base.Engine`, launchers that start one server process per planned
instance (``transformers serve``, ``vllm serve``, ``trtllm-serve``) with its TP/PP degree, GPU
mapping, engine configuration and memory share, wait for health, and stop them, and synthetic
load prompts (``prompts``).

    from harness.servers.launcher import Fleet, ServerSpec
    with Fleet([ServerSpec(name="llm0", backend="transformers", model="/path/model", port=8100)]) as fleet:
        client = fleet.client("llm0")

The package exports nothing itself: import from the module that defines a name
(``launcher``: ``Fleet``, ``ServerSpec``, ``build_command``; ``client``: ``OpenAIClient``;
``calls``: ``ServerError``, ``ServerDeadError``, ``Generation``, ``run_sync``; ``engine``:
``OpenAIEngine``; ``deploy``, ``export``, ``prompts``, ``torchserve``). ``httpx`` is imported
only when a client is made.
"""
