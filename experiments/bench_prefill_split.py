"""``python -m experiments.bench_prefill_split``: Table-3-style cost of splitting one prefill.

For each split ``(partial, full)`` tokens, on the real torch engine (a random Llama built
locally, or ``--model-dir``): the minimum over ``--repeats`` (least disturbed by other load on a shared CPU) of a single prefill of
``partial + full`` tokens, and of a PartialPrefilling of ``partial`` tokens followed by a
FullPrefilling of ``full`` tokens on the same KV cache. Prints and optionally writes
(``--out x.csv``) per split: ``partial_ms``, ``full_ms``, ``split_total_ms``, ``single_ms``,
``overhead_pct = split_total / single - 1`` (extra work from splitting) and
``critical_path_cut_pct = 1 - full / single`` (prefill left after retrieval), plus the
largest |logit difference| between the split and the single prefill (they must agree).
The paper (llama-2-7B, RTX 3090) measured 3.1-12.1 % overhead and 17.1-77.9 % cut.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

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


def _parse_split(s: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in s.split("+"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"split must look like 200+800, not {s!r}") from None
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"both parts of a split must be >= 1 token: {s!r}")
    return a, b


def main(argv: list[str] | None = None) -> int:
    from flowmaker.entry import OneLineParser, add_version
    ap = OneLineParser(prog="python -m experiments.bench_prefill_split", description=__doc__.splitlines()[0])
    add_version(ap)
    ap.add_argument("--model-dir", type=Path, default=None, help="a local HF causal LM (default: random Llama)")
    ap.add_argument("--splits", type=_parse_split, nargs="*", default=list(DEFAULT_SPLITS), help="e.g. 200+800 850+850")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per split; the median counts (default 5)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--dtype", default="float32", help="torch dtype of the model (default float32)")
    ap.add_argument("--out", type=Path, default=None, help="write the table as CSV")
    ap.add_argument("--hidden-size", type=int, default=BENCH_SPEC["hidden_size"],
                    help="random model's hidden size (FFN = 2.69x, heads = hidden/32); larger = compute-bound")
    ap.add_argument("--layers", type=int, default=BENCH_SPEC["num_hidden_layers"], help="decoder layers of the random model")
    args = ap.parse_args(argv)
    import torch

    from orchestrator.engines.real.llm import TorchLLMEngine
    from orchestrator.engines.real.tinyllm import TinyLlamaSpec, build_tiny_llama
    torch.set_num_threads(args.threads)
    h = args.hidden_size
    spec = {**BENCH_SPEC, "hidden_size": h, "intermediate_size": int(round(2.6875 * h)),
            "num_hidden_layers": args.layers, "num_attention_heads": max(1, h // 32),
            "num_key_value_heads": max(1, h // 64)}
    model_dir = args.model_dir or build_tiny_llama(
        Path(tempfile.gettempdir()) / f"flowmaker_bench_llama_h{h}_l{args.layers}", TinyLlamaSpec(**spec))
    eng = TorchLLMEngine(name="bench", model_dir=model_dir, dtype=args.dtype).load()
    n_params = sum(p.numel() for p in eng._model.parameters())
    print(f"model {model_dir} ({n_params / 1e6:.1f} M params, {args.dtype}), torch threads {args.threads}, "
          f"min of {args.repeats}")
    df = measure(eng, args.splits, repeats=args.repeats)
    with pd.option_context("display.width", 200, "display.float_format", "{:.2f}".format):
        print(df.to_string(index=False))
    print(f"overhead {df.overhead_pct.min():.1f}..{df.overhead_pct.max():.1f} %, critical-path prefill cut "
          f"{df.critical_path_cut_pct.min():.1f}..{df.critical_path_cut_pct.max():.1f} % "
          f"(paper, llama-2-7B on RTX 3090: 3.1..12.1 % and 17.1..77.9 %)")
    if args.out:
        df.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    from flowmaker.entry import run
    run(main)
