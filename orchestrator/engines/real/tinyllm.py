"""Build a small, randomly initialised Llama checkpoint with a locally trained tokenizer.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on a few built-in sentences (any
text tokenizes, byte fallback), the weights come from ``torch.manual_seed(seed)``. The directory
loads with ``AutoModelForCausalLM.from_pretrained`` and serves with ``transformers serve``.
Used by the tests, the CPU end-to-end run and the prefill-split benchmark.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Retrieval augmented generation answers a question from retrieved documents.",
    "A vector database stores embeddings and finds the nearest neighbours of a query.",
    "Large language models prefill the prompt and then decode one token at a time.",
    "The key value cache keeps attention states so the prefix is not computed again.",
    'JSON lists look like ["first query", "second query", "third query"].',
    "Numbers such as 12, 345 and 6789 appear in reports, tables and questions.",
    "Rivers, mountains, harbours and libraries are described in the city guide.",
]

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


@dataclass(frozen=True)
class TinyLlamaSpec:
    """Shape of the random model. Defaults: ~0.5 M parameters, fast on one CPU core."""
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0


def build_tokenizer(vocab_size: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ``<s>``, ``</s>``, ``<pad>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_llama(path: str | Path, spec: TinyLlamaSpec = TinyLlamaSpec()) -> Path:
    """Write a random Llama checkpoint plus tokenizer to ``path`` (created); return ``path``.
    Idempotent: an existing directory built from the same spec is reused."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    marker = path / "tiny_llama_spec.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(spec):
        return path
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(spec.vocab_size)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=spec.hidden_size,
                      intermediate_size=spec.intermediate_size,
                      num_hidden_layers=spec.num_hidden_layers,
                      num_attention_heads=spec.num_attention_heads,
                      num_key_value_heads=spec.num_key_value_heads,
                      max_position_embeddings=spec.max_position_embeddings,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    marker.write_text(json.dumps(asdict(spec)))
    return path
