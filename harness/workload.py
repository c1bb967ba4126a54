"""Traces for the cluster experiments: the Azure 2023 traces or their synthetic stand-in, and
the requests of one experiment cell (trace, load level).

Synthetic stand-in (used only when the Azure CSVs are absent): arrivals are a Poisson
process whose rate is piecewise constant per minute, following the real trace's requests per
minute; prompt and output tokens are drawn independently from the real trace's percentiles
(1% steps, 0.1% above the 99th; linear in between). Statistics: configs/traces/azure2023.yaml, derived from the
CSVs by ``python -m harness.workload`` (source named in the file).

A cell (docs/harness.md, "Load levels"): the trace's first ``n_requests`` requests (the
experiment uses 212 code and 484 conversation requests, the paper's range per run).
Each is given to a task at random with probability proportional to the task's
``arrival_rate_rps`` (seeded); inter-arrival times are stretched so that the mean total
rate is ``load * sum of the tasks' arrival_rate_rps``: at 100% every task receives, on
average, the rate its plan was sized for, with the trace's burstiness; at 25% a quarter.
Each request scales every stage's prompt and output sizes by its own prompt and output
tokens over the trace's means. Its difficulty (RouteLLM) is its prompt length's percentile
rank within the cell, ties broken by a seeded uniform draw.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

from harness.cluster import Workload
from harness.trace import Trace, azure_trace_path, load_trace

STATS_PATH = Path(__file__).resolve().parent.parent / "configs" / "traces" / "azure2023.yaml"
PERCENTILES = np.round(np.concatenate([np.arange(0, 99), np.arange(99, 100.05, 0.1)]), 1)  # fine tail


def derive_stats(trace: Trace) -> dict:
    """Per-minute request counts and token percentiles (``PERCENTILES``) of ``trace``."""
    minutes = np.bincount((trace.arrived_at_s // 60).astype(int))
    return {"requests": len(trace), "duration_s": round(trace.duration_s, 3),
            "requests_per_minute": [int(c) for c in minutes],
            "prompt_tokens_mean": round(float(trace.prompt_tokens.mean()), 2),
            "percentiles": [float(q) for q in PERCENTILES],
            "output_tokens_mean": round(float(trace.output_tokens.mean()), 2),
            "prompt_tokens_percentiles": [round(float(x), 1) for x in np.percentile(trace.prompt_tokens, PERCENTILES)],
            "output_tokens_percentiles": [round(float(x), 1) for x in np.percentile(trace.output_tokens, PERCENTILES)]}


def load_stats(path: Path = STATS_PATH) -> dict:
    return yaml.safe_load(path.read_text())["traces"]


def synthetic_trace(kind: str, *, seed: int = 0, stats: dict | None = None) -> Trace:
    """A trace with the arrival and token statistics of Azure trace ``kind`` (code | conv)."""
    st = (stats or load_stats())[kind]
    rng = np.random.default_rng(seed)
    times = []
    for minute, count in enumerate(st["requests_per_minute"]):
        n = rng.poisson(count)
        times.append(np.sort(rng.uniform(60.0 * minute, 60.0 * (minute + 1), n)))
    t = np.concatenate(times)
    q = rng.uniform(0, 100, (2, len(t)))
    pct = st["percentiles"]
    prompt = np.maximum(1, np.rint(np.interp(q[0], pct, st["prompt_tokens_percentiles"])))
    output = np.maximum(1, np.rint(np.interp(q[1], pct, st["output_tokens_percentiles"])))
    return Trace(f"synthetic-{kind}", t - t[0], prompt.astype(np.int64), output.astype(np.int64))


def azure_or_synthetic(kind: str, *, data_dir: str | Path | None = None, seed: int = 0) -> tuple[Trace, str]:
    """The Azure 2023 trace ``kind`` when its CSV is present, else the synthetic stand-in;
    returns the trace and its source (a path, or ``synthetic``)."""
    path = azure_trace_path(kind, data_dir)
    if path.exists():
        return load_trace(path, name=kind), str(path)
    return synthetic_trace(kind, seed=seed), "synthetic"


def cell_workload(trace: Trace, rates_rps: list[float], *, load: float, n_requests: int,
                  seed: int = 0) -> Workload:
    """The requests of one cell (see the module docstring); ``load`` > 0 (1.0 = 100%)."""
    if not 0 < load:
        raise ValueError("load must be > 0")
    rng = np.random.default_rng(seed)
    win = trace.head(n_requests)
    n = len(win)
    rates = np.asarray(rates_rps, dtype=float)
    task = rng.choice(len(rates), size=n, p=rates / rates.sum())
    # raw rate over the window = n / (its span + one mean gap); stretched to load * sum(rates)
    span = win.duration_s * n / max(n - 1, 1)
    stretch = (n / span) / (load * rates.sum()) if span > 0 else 1.0
    jitter = rng.uniform(size=n)
    order = np.lexsort((jitter, win.prompt_tokens))
    difficulty = np.empty(n)
    difficulty[order] = (np.arange(n) + 0.5) / max(n, 1)
    return Workload(arrival_s=win.arrived_at_s * stretch, task=task.astype(np.int64),
                    prompt_scale=win.prompt_tokens / trace.prompt_tokens.mean(),
                    output_scale=win.output_tokens / trace.output_tokens.mean(), difficulty=difficulty)


def main() -> int:
    """Derive configs/traces/azure2023.yaml from the Azure CSVs (needs them present)."""
    out = {}
    for kind in ("code", "conv"):
        path = azure_trace_path(kind)
        if not path.exists():
            print(f"error: {path} not found (set FLOWMAKER_SHARED_DATA)", file=sys.stderr)
            return 2
        out[kind] = derive_stats(load_trace(path))
    header = ("# Derived statistics of the Azure LLM inference traces 2023, used only to synthesise a\n"
              "# stand-in trace when the CSVs are absent (harness/workload.py).\n"
              "# Source: github.com/Azure/AzurePublicDataset @ b469a113cedca53ddc3bdea71a143dc4b7d8700c,\n"
              "#   data/AzureLLMInferenceTrace_{code,conv}.csv (CC-BY-4.0), read from ../shared/data.\n"
              "# Regenerate: python -m harness.workload\n")
    STATS_PATH.parent.mkdir(parents=True, exist_ok=True)
    STATS_PATH.write_text(header + yaml.safe_dump({"traces": out}, default_flow_style=None, width=100,
                                                  sort_keys=False))
    print(f"wrote {STATS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
