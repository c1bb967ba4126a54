"""Synthetic prompts of a given token length for load runs, as ``vllm bench serve``'s ``random``
dataset makes them (``vllm/benchmarks/datasets``: ``RandomDataset`` and
``gen_prompt_decode_to_target_len``): random token ids drawn from the tokenizer's non-special
vocabulary (less the ids that decode to a broken UTF-8 piece), decoded to text, re-encoded and truncated or topped up with more random ids until
the text encodes to the target length (at most 10 rounds; the residual mismatch is reported).
Every call gets its own ids from a generator seeded by ``(seed, *key)``, so two prompts share a
prefix only by chance (probability ~ 1/vocabulary per token) and a server's prefix cache, if
any, finds nothing to reuse.

Without a local tokenizer (a user's endpoint), :class:`CorpusPrompts` draws random words from a
shipped text (``configs/docs_corpus/ostvik_guide.yaml``) and sizes them with the tokens per
word the server reports for two probes (``usage.prompt_tokens``), GuideLLM's approach for
synthetic text data (words sampled from a source text, lengths measured by the tokenizer).

Neither reaches the network: tokenizers load from local files (``HF_HUB_OFFLINE=1``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from profiler.catalog import configs_dir

CORPUS = configs_dir() / "docs_corpus" / "ostvik_guide.yaml"
MAX_RETRY = 10


class PromptSource(Protocol):
    def text(self, n_tokens: int, key: Sequence[int]) -> str: ...


class TokenPrompts:
    """Prompts of exactly ``n`` tokens of ``tokenizer`` (a ``transformers`` tokenizer) from
    random token ids (module docstring). ``mismatches`` counts prompts left off by a token."""

    def __init__(self, tokenizer: Any, *, seed: int = 0) -> None:
        self.tok, self.seed = tokenizer, int(seed)
        special = set(tokenizer.all_special_ids)
        # a token that decodes to an incomplete UTF-8 sequence (byte-level BPE) turns into U+FFFD,
        # which re-encodes as several tokens: such ids never converge, so they are not drawn
        self.allowed = np.array([i for i in range(len(tokenizer)) if i not in special
                                 and "\ufffd" not in (t := tokenizer.decode([i])) and t], dtype=np.int64)
        self.mismatches = 0

    def ids(self, n_tokens: int, key: Sequence[int]) -> tuple[str, list[int]]:
        """The prompt text and its token ids (``len == n_tokens`` unless a mismatch remained)."""
        rng = np.random.default_rng([self.seed, *(int(k) & 0xFFFFFFFF for k in key)])
        n = max(1, int(n_tokens))
        ids = rng.choice(self.allowed, n).tolist()
        for _ in range(MAX_RETRY + 1):
            text = self.tok.decode(ids)
            ids = self.tok.encode(text, add_special_tokens=False)
            if len(ids) == n:
                return text, ids
            ids = ids[:n] if len(ids) > n else ids + rng.choice(self.allowed, n - len(ids)).tolist()
        self.mismatches += 1
        return self.tok.decode(ids), ids

    def text(self, n_tokens: int, key: Sequence[int]) -> str:
        return self.ids(n_tokens, key)[0]


def corpus_words(path: Path = CORPUS) -> list[str]:
    """The distinct words of the shipped corpus (lower case, letters only)."""
    import yaml
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    words = re.findall(r"[a-z]+", " ".join(doc["paragraphs"]).lower())
    return sorted(set(words))


class CorpusPrompts:
    """Random words of the shipped corpus; ``tokens = a * words + b`` fitted on two probes of a
    server (``probe(words) -> prompt_tokens or None``; None: one token per word)."""

    PROBE_WORDS = (16, 64)

    def __init__(self, probe: Any = None, *, seed: int = 0) -> None:
        self.words = np.array(corpus_words())
        self.seed = int(seed)
        self.a, self.b = 1.0, 0.0
        if probe is not None:
            got = [probe(self.sample(k, (-1, k))) for k in self.PROBE_WORDS]
            if None not in got and got[1] > got[0]:
                self.a = (got[1] - got[0]) / (self.PROBE_WORDS[1] - self.PROBE_WORDS[0])
                self.b = got[0] - self.a * self.PROBE_WORDS[0]

    def sample(self, k: int, key: Sequence[int]) -> str:
        rng = np.random.default_rng([self.seed, *(int(x) & 0xFFFFFFFF for x in key)])
        return " ".join(rng.choice(self.words, max(1, k)))

    def text(self, n_tokens: int, key: Sequence[int]) -> str:
        return self.sample(max(1, round((n_tokens - self.b) / self.a)), key)


def load_tokenizer(path: str | Path | None) -> Any | None:
    """A local tokenizer for ``path`` (a checkpoint directory, a hub id already in the local
    cache, or ``char``: the torch server's one token per character); None when there is none (no network is tried: ``HF_HUB_OFFLINE``)."""
    if not path:
        return None
    if str(path) == "char":            # harness/servers/torchserve.py: one token per character
        from harness.servers.torchserve import CharTokenizer
        return CharTokenizer()
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(path))
    except Exception:  # noqa: BLE001 - no local tokenizer: the caller falls back to the corpus
        return None
