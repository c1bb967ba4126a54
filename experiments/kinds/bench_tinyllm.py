"""Measure the real CPU run's LLM (issue 26): the random tiny Llama of ``teola_real_cpu``
(``orchestrator.engines.real.tinyllm.TinyLlamaSpec`` defaults) on the real torch engine, through its own
``Engine.submit`` (``BatchResult.duration_s``), torch threads ``params.threads``:

* a Prefilling of ``t`` prompt tokens, for each ``t`` in ``params.prefill_tokens`` (a text of repeated
  guide words; ``t`` counted with the engine's own tokenizer, ``<s>`` included);
* a decode step of a batch of ``b`` sequences holding ``c`` context tokens each: ``(D(17) - D(1)) / 16``
  where ``D(n)`` is a Decoding batch of ``b`` sequences producing ``n`` tokens (the first token comes
  from the prefill's logits, so ``D(1)`` runs no forward pass).

Each point is the median over ``params.sessions`` sessions of the median of ``params.repeats`` runs
after a warm-up (the machine is shared: the load average before and after is printed). A linear step model
(``orchestrator.engines.profiles.LinearLLMProfile``: prefill ``base + per_token * n + attn * n^2 / 2000``,
decode ``base + per_seq * b + per_kctx * b * c / 1000`` ms) is fitted to the points by non-negative
least squares, and printed with the points in the ``configs/engines`` LLM schema (``profile.yaml``);
``configs/engines/tiny-llama_cpu.yaml`` holds one such run, with the machine and its load named.

    python -m experiments.run bench_tinyllm
"""
from __future__ import annotations

import os
import platform
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from orchestrator.engines.base import Invocation
from orchestrator.primitives import Kind

WORDS = ("the harbour library river mountain guide city museum bridge market station tower "
         "garden street square island castle church school park").split()


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill_tokens: list[int] = Field(default=[16, 64, 128, 256, 512, 1024], min_length=2)
    decode_batches: list[int] = Field(default=[1, 2, 4, 8], min_length=2)
    decode_context: list[int] = Field(default=[64, 256, 768], min_length=2)
    repeats: int = Field(default=5, ge=1)
    sessions: int = Field(default=3, ge=1)
    threads: int = Field(default=1, ge=1)


def _prompt(engine, n: int) -> str:
    """A text of guide words whose prompt has ``n`` tokens or just over (the engine's tokenizer)."""
    words: list[str] = []
    while len(engine.prompt_ids((" ".join(words),), first=True)) < n:
        words.append(WORDS[len(words) % len(WORDS)])
    return " ".join(words)


def _prefill(engine, text: str, key: str) -> float:
    inv = Invocation(key, Kind.PREFILLING, {"segments": (text,)}, {}, key)
    return engine.submit([inv]).result().duration_s


def _decode(engine, keys: list[str], n_out: int) -> float:
    invs = [Invocation(f"d{k}", Kind.DECODING, {}, {"output_tokens": n_out, "fmt": "text"}, k) for k in keys]
    return engine.submit(invs).result().duration_s


def measure_prefill(engine, tokens: list[int], repeats: int) -> pd.DataFrame:
    rows = []
    for t in tokens:
        text = _prompt(engine, t)
        n = len(engine.prompt_ids((text,), first=True))
        times = [_prefill(engine, text, f"p{t}/{r}") for r in range(repeats + 1)][1:]
        _decode(engine, [f"p{t}/{r}" for r in range(repeats + 1)], 1)      # frees the caches
        rows.append({"tokens": n, "prefill_ms": 1e3 * statistics.median(times)})
    return pd.DataFrame(rows)


def measure_decode(engine, batches: list[int], contexts: list[int], repeats: int) -> pd.DataFrame:
    rows = []
    for c in contexts:
        text = _prompt(engine, c)
        n = len(engine.prompt_ids((text,), first=True))
        for b in batches:
            steps = []
            for r in range(repeats + 1):
                d = {}
                for n_out in (1, 17):
                    keys = [f"c{c}/{b}/{r}/{n_out}/{i}" for i in range(b)]
                    for k in keys:
                        _prefill(engine, text, k)
                    d[n_out] = _decode(engine, keys, n_out)
                steps.append((d[17] - d[1]) / 16)
            rows.append({"batch": b, "context": n, "step_ms": 1e3 * statistics.median(steps[1:])})
    return pd.DataFrame(rows)


def fit(pre: pd.DataFrame, dec: pd.DataFrame) -> dict[str, float]:
    """Non-negative least squares of the linear step model (module docstring) on the points."""
    from scipy.optimize import nnls
    n = pre.tokens.to_numpy(float)
    (pb, pt, pa), _ = nnls(np.column_stack([np.ones_like(n), n, n * n / 2e3]), pre.prefill_ms.to_numpy(float))
    b, c = dec.batch.to_numpy(float), dec.context.to_numpy(float)
    (db, ds, dk), _ = nnls(np.column_stack([np.ones_like(b), b, b * c / 1e3]), dec.step_ms.to_numpy(float))
    return {"prefill_base_ms": round(float(pb), 4), "prefill_per_token_ms": round(float(pt), 5), "prefill_attn_ms": round(float(pa), 5),
            "decode_base_ms": round(float(db), 4), "decode_per_seq_ms": round(float(ds), 4), "decode_per_kctx_ms": round(float(dk), 5)}


def run(params: Params, ctx: RunContext) -> None:
    import torch

    from orchestrator.engines.real.llm import TorchLLMEngine
    from orchestrator.engines.real.tinyllm import build_tiny_llama
    torch.set_num_threads(params.threads)
    model_dir = build_tiny_llama(Path(tempfile.gettempdir()) / "flowmaker_tiny_llama")
    eng = TorchLLMEngine(name="bench", model_dir=model_dir).load()
    eng.warm()
    load0 = os.getloadavg()
    pres, decs = [], []
    for _ in range(params.sessions):
        pres.append(measure_prefill(eng, params.prefill_tokens, params.repeats))
        decs.append(measure_decode(eng, params.decode_batches, params.decode_context, params.repeats))
    load1 = os.getloadavg()
    pre = pd.concat(pres).groupby("tokens", as_index=False).prefill_ms.median()
    dec = pd.concat(decs).groupby(["batch", "context"], as_index=False).step_ms.median()
    eng.close()
    coef = fit(pre, dec)
    prof = {"profile": {"type": "linear_llm", **coef}}
    head = (f"tiny Llama {model_dir}, torch threads {params.threads}, median over {params.sessions} sessions of "
            f"the median of {params.repeats} after a warm-up; "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average before "
            f"{load0[0]:.2f}, after {load1[0]:.2f}")
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        text = "\n".join([head, pre.to_string(index=False), dec.to_string(index=False), yaml.safe_dump(prof)])
    print(text, flush=True)
    atomic_write_parquet(ctx.run_dir / "prefill.parquet", pre)
    atomic_write_parquet(ctx.run_dir / "decode.parquet", dec)
    atomic_write_text(ctx.run_dir / "profile.yaml", yaml.safe_dump(prof))
    atomic_write_text(ctx.run_dir / "summary.md", f"# Tiny Llama on this CPU (bench_tinyllm)\n\n```\n{text}```\n")
