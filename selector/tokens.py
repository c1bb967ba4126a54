"""``python -m selector.tokens [--check]``: recompute the Azure-trace token statistics behind
``configs/task_tokens.yaml`` from the raw traces (``../shared/data`` or ``--data``)."""
from __future__ import annotations

import sys
from pathlib import Path

from selector.taskspec import load_trace_stats

FILES = {"code": "AzureLLMInferenceTrace_code.csv", "conv": "AzureLLMInferenceTrace_conv.csv"}
#: quantile edges of the size cells: prompt bins, then output bins within each prompt bin (finer
#: in the output tail, where the latency tail of a call lives; docs/resolve.md, "capacity")
PROMPT_EDGES = (0, .25, .5, .75, .9, .97, 1)
OUTPUT_EDGES = (0, .2, .4, .6, .8, .9, .95, .98, .99, .995, .999, 1)


def default_data_dir() -> Path:
    """The Azure traces' folder under the shared data (``profiler.catalog.shared_data_path``)."""
    from profiler.catalog import shared_data_path
    return shared_data_path() / "azure-public-dataset" / "data"


def size_cells(prompt, output) -> list[tuple[float, float, float]]:
    """The joint size distribution of requests (token arrays) as cells ``(weight, prompt / mean,
    output / mean)``: prompt-quantile bins (:data:`PROMPT_EDGES`), each split by the quantiles of
    its own outputs (:data:`OUTPUT_EDGES`); a cell holds its prompt bin's mean prompt scale (one
    prefill size per bin) and its requests' mean output scale, so the cells keep both means and
    the joint tail."""
    import numpy as np
    ps, os_ = np.asarray(prompt, float), np.asarray(output, float)
    ps, os_, n = ps / ps.mean(), os_ / os_.mean(), len(ps)
    order, out = np.argsort(ps, kind="stable"), []
    for a, b in zip(PROMPT_EDGES, PROMPT_EDGES[1:]):
        idx = order[round(a * n):round(b * n)]
        idx = idx[np.argsort(os_[idx], kind="stable")]
        m, p_bin = len(idx), round(float(ps[idx].mean()), 4)
        for c, d in zip(OUTPUT_EDGES, OUTPUT_EDGES[1:]):
            j = idx[round(c * m):round(d * m)]
            if len(j):
                out.append((round(len(j) / n, 6), p_bin, round(float(os_[j].mean()), 4)))
    return out


def trace_stats(csv: Path) -> dict[str, float]:
    import pandas as pd

    from flowmaker.inputs import open_input
    with open_input(csv) as fh:          # a FIFO or device is refused, never read (issue 28 item 2)
        df = pd.read_csv(fh)
    t = pd.to_datetime(df["TIMESTAMP"])
    dur = (t.max() - t.min()).total_seconds()
    return {"requests": len(df), "duration_s": round(dur, 2), "rate_rps": round(len(df) / dur, 4),
            "prompt_tokens_mean": round(float(df.ContextTokens.mean()), 1),
            "prompt_tokens_p50": float(df.ContextTokens.median()),
            "output_tokens_mean": round(float(df.GeneratedTokens.mean()), 1),
            "output_tokens_p50": float(df.GeneratedTokens.median()),
            "size_cells": size_cells(df.ContextTokens.to_numpy(), df.GeneratedTokens.to_numpy())}


def _close(ref, v) -> bool:
    """Numbers within 1e-3 relative; sequences element by element, of the same length."""
    if isinstance(v, (list, tuple)):
        return len(ref) == len(v) and all(_close(a, b) for a, b in zip(ref, v))
    return abs(ref - v) <= 1e-3 * max(1.0, abs(v))


def main(argv: list[str] | None = None) -> int:
    from flowmaker.entry import OneLineParser, add_version
    ap = OneLineParser(prog="python -m selector.tokens", description=__doc__)
    add_version(ap)
    ap.add_argument("--data", type=Path, default=default_data_dir(),
                    help="folder of the Azure trace CSVs (default: %(default)s, under $FLOWMAKER_SHARED_DATA or ../shared/data)")
    ap.add_argument("--check", action="store_true", help="exit 1 if configs/task_tokens.yaml disagrees")
    args = ap.parse_args(argv)
    if not args.data.exists():
        print(f"error: --data: {args.data} not found (set FLOWMAKER_SHARED_DATA or pass --data)", file=sys.stderr)
        return 2
    stored = load_trace_stats()
    bad = 0
    from flowmaker.inputs import InputError
    for name, fname in FILES.items():
        try:
            got = trace_stats(args.data / fname)
        except InputError as exc:
            print(f"error: --data: {exc}", file=sys.stderr)
            return 2
        print(f"{name}: {got}")
        for k, v in got.items():
            ref = getattr(stored[name], k)
            if not _close(ref, v):
                print(f"  mismatch {name}.{k}: configs has {ref}, trace gives {v}")
                bad += 1
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    from flowmaker.entry import run
    run(main)
