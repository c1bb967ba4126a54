"""``python -m experiments.run bench_prefill_split``: Table-3-style cost of splitting one prefill.

For each split ``(partial, full)`` tokens, on the real torch engine (a random Llama built
locally, or ``params.model_dir``): the minimum over ``params.repeats`` (least disturbed by other load on a shared CPU) of a single prefill of
``partial + full`` tokens, and of a PartialPrefilling of ``partial`` tokens followed by a
FullPrefilling of ``full`` tokens on the same KV cache. Prints and writes (``results.parquet``)
per split: ``partial_ms``, ``full_ms``, ``split_total_ms``, ``single_ms``,
``overhead_pct = split_total / single - 1`` (extra work from splitting) and
``critical_path_cut_pct = 1 - full / single`` (prefill left after retrieval), plus the
largest |logit difference| between the split and the single prefill (they must agree).
The paper's Table 3 (configs/reference/teola.yaml: llama-2-7B, RTX 3090) measured 3.1-12.1 %
overhead and 17.1-77.9 % cut; the summary prints them from there.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from experiments.kinds._reference import reference

DEFAULT_SPLITS = ((200, 800), (500, 500), (850, 850), (1500, 500), (2500, 500))
#: the benchmark's model: ~3.7 M parameters, big enough for prefill to be compute-bound on a CPU core
BENCH_SPEC = dict(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096, seed=0)


def measure(engine, splits, *, repeats: int, seed: int = 0) -> pd.DataFrame:
    """One row per split; times in ms (minimum of ``repeats`` after one warm-up)."""
    rng = np.random.default_rng(seed)
    vocab = engine._model.config.vocab_size
    rows = []
    for a, b in splits:
        ids = [int(i) for i in rng.integers(3, vocab, size=a + b)]   # 0-2: special tokens
        single, part, full, diff = [], [], [], 0.0
        for r in range(repeats + 1):
            t0 = time.perf_counter()
            _, lg_single = engine.forward(ids)
            t1 = time.perf_counter()
            cache, _ = engine.forward(ids[:a])
            t2 = time.perf_counter()
            _, lg_full = engine.forward(ids[a:], cache)
            t3 = time.perf_counter()
            if r == 0:
                diff = float((lg_full - lg_single[a:]).abs().max())
                continue
            single.append(t1 - t0), part.append(t2 - t1), full.append(t3 - t2)
        s, p, f = (1e3 * min(x) for x in (single, part, full))
        rows.append({"partial_tokens": a, "full_tokens": b, "partial_ms": p, "full_ms": f,
                     "split_total_ms": p + f, "single_ms": s, "overhead_pct": 100 * ((p + f) / s - 1),
                     "critical_path_cut_pct": 100 * (1 - f / s), "max_abs_logit_diff": diff})
    return pd.DataFrame(rows)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    model_dir: str | None = None                                     # a local HF causal LM (default: random Llama)
    splits: list[tuple[int, int]] = Field(default=list(DEFAULT_SPLITS), min_length=1)   # (partial, full) tokens
    repeats: int = Field(default=5, ge=1)                            # timed runs per split; the minimum counts
    threads: int = Field(default=1, ge=1)                            # torch intra-op threads
    dtype: str = "float32"                                           # torch dtype of the model
    hidden_size: int = Field(default=BENCH_SPEC["hidden_size"], ge=32)   # FFN = 2.69x, heads = hidden/32
    layers: int = Field(default=BENCH_SPEC["num_hidden_layers"], ge=1)   # decoder layers of the random model

    @field_validator("splits")
    @classmethod
    def _positive(cls, v: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if any(a < 1 or b < 1 for a, b in v):
            raise ValueError("both parts of a split must be >= 1 token")
        return v


def run(params: Params, ctx: RunContext) -> None:
    import torch

    from orchestrator.engines.real.llm import TorchLLMEngine
    from orchestrator.engines.real.tinyllm import TinyLlamaSpec, build_tiny_llama
    torch.set_num_threads(params.threads)
    h = params.hidden_size
    spec = {**BENCH_SPEC, "hidden_size": h, "intermediate_size": int(round(2.6875 * h)),
            "num_hidden_layers": params.layers, "num_attention_heads": max(1, h // 32),
            "num_key_value_heads": max(1, h // 64)}
    model_dir = params.model_dir or build_tiny_llama(
        Path(tempfile.gettempdir()) / f"flowmaker_bench_llama_h{h}_l{params.layers}", TinyLlamaSpec(**spec))
    eng = TorchLLMEngine(name="bench", model_dir=model_dir, dtype=params.dtype).load()
    n_params = sum(p.numel() for p in eng._model.parameters())
    ref = reference("teola")["prefill_split"]
    over, cut = ref["overhead_pct"], ref["critical_path_cut_pct"]
    lines = [f"model {model_dir} ({n_params / 1e6:.1f} M params, {params.dtype}), torch threads {params.threads}, "
             f"min of {params.repeats}"]
    print(lines[0], flush=True)
    df = measure(eng, params.splits, repeats=params.repeats)
    with pd.option_context("display.width", 200, "display.float_format", "{:.2f}".format):
        lines.append(df.to_string(index=False))
    lines.append(f"overhead {df.overhead_pct.min():.1f}..{df.overhead_pct.max():.1f} %, critical-path prefill cut "
                 f"{df.critical_path_cut_pct.min():.1f}..{df.critical_path_cut_pct.max():.1f} % "
                 f"(paper, {ref['setup']}: {over[0]}..{over[1]} % and {cut[0]}..{cut[1]} %)")
    print("\n".join(lines[1:]))
    atomic_write_parquet(ctx.run_dir / "results.parquet", df)
    atomic_write_text(ctx.run_dir / "summary.md", "# Cost of splitting one prefill (bench_prefill_split)\n\n```\n"
                      + "\n".join(lines) + "\n```\n")

