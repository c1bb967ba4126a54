"""``python -m selector.tokens [--check]``: recompute the Azure-trace token statistics behind
``configs/task_tokens.yaml`` from the raw traces (``../shared/data`` or ``--data``)."""
from __future__ import annotations

import sys
from pathlib import Path

from selector.taskspec import load_trace_stats

FILES = {"code": "AzureLLMInferenceTrace_code.csv", "conv": "AzureLLMInferenceTrace_conv.csv"}


def default_data_dir() -> Path:
    """The Azure traces' folder under the shared data (``profiler.catalog.shared_data_path``)."""
    from profiler.catalog import shared_data_path
    return shared_data_path() / "azure-public-dataset" / "data"


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
            "output_tokens_p50": float(df.GeneratedTokens.median())}


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
            if abs(ref - v) > 1e-3 * max(1.0, abs(v)):
                print(f"  mismatch {name}.{k}: configs has {ref}, trace gives {v}")
                bad += 1
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    from flowmaker.entry import run
    run(main)
