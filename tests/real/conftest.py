"""Fixtures for the real-engine tests: a random tiny Llama with a locally built tokenizer, a real
PostgreSQL + pgvector from ``pgserver``, and the offline MiniLM. Nothing is downloaded."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    from orchestrator.engines.real.tinyllm import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def llm(tiny_llama_dir):
    import torch
    torch.set_num_threads(1)
    from orchestrator.engines.real.llm import TorchLLMEngine
    eng = TorchLLMEngine(name="llm#0", model_dir=tiny_llama_dir).load()
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory):
    from orchestrator.engines.real.pgvector import embedded_server
    return embedded_server(tmp_path_factory.mktemp("pgdata"))
