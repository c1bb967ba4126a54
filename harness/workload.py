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
from profiler.catalog import configs_dir, shared_data_hint
from selector.problem import TOL

STATS_PATH = configs_dir() / "traces" / "azure2023.yaml"
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


def peak_to_mean(arrival_s: np.ndarray, window_s: float, *, bin_s: float = 10.0) -> float:
    """Burstiness of arrivals over ``[0, window_s)``: the most requests in one ``bin_s`` bin over
    the mean per bin (1.0 = perfectly even; the Azure code trace's first 212 requests: 11.9).
    Arrivals outside the window are ignored; 0.0 for no arrivals."""
    a = np.asarray(arrival_s, dtype=float)
    a = a[(a >= 0) & (a < window_s)]
    if not len(a):
        return 0.0
    bins = max(1, int(np.ceil(window_s / bin_s - TOL)))
    counts = np.bincount(np.minimum((a // bin_s).astype(int), bins - 1), minlength=bins)
    return float(counts.max() / (len(a) * bin_s / window_s))


def _difficulty(prompt_tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Prompt-length percentile rank in the cell, ``(rank + 0.5) / n``, ties by a seeded draw."""
    n = len(prompt_tokens)
    order = np.lexsort((rng.uniform(size=n), prompt_tokens))
    out = np.empty(n)
    out[order] = (np.arange(n) + 0.5) / max(n, 1)
    return out


def _workload(trace: Trace, arrival_s, prompt, output, rates: np.ndarray, rng) -> Workload:
    n = len(arrival_s)
    task = rng.choice(len(rates), size=n, p=rates / rates.sum())
    return Workload(arrival_s=np.asarray(arrival_s, dtype=float), task=task.astype(np.int64),
                    prompt_scale=prompt / trace.prompt_tokens.mean(), output_scale=output / trace.output_tokens.mean(),
                    difficulty=_difficulty(prompt, rng))


def poisson_workload(trace: Trace, rates_rps: list[float], *, load: float, window_s: float,
                     seed: int = 0, sizes: str = "resample") -> Workload:
    """A Poisson process of rate ``load * sum(rates_rps)`` over ``[0, window_s)``, each request
    given to task k with probability ``rate_k / sum(rates)`` (so each task's arrivals are Poisson
    at ``load * rate_k``) and the token sizes of trace requests (the trace's size distribution,
    without its arrival bursts): ``sizes="resample"`` draws them uniformly with replacement,
    ``"shuffle"`` takes the trace's requests in a seeded random order without replacement, again
    past its length, so every whole pass holds the trace's sizes exactly (a share of long
    requests that does not vary with the seed). Seeded; docs/harness.md."""
    if not 0 < load or not 0 < window_s:
        raise ValueError("load and window_s must be > 0")
    if sizes not in ("resample", "shuffle"):
        raise ValueError(f"sizes: 'resample' or 'shuffle', not {sizes!r}")
    rng = np.random.default_rng(seed)
    rates = np.asarray(rates_rps, dtype=float)
    n = int(rng.poisson(load * rates.sum() * window_s))
    arrivals = np.sort(rng.uniform(0.0, window_s, n))
    if sizes == "resample":
        pick = rng.integers(0, len(trace), n)
    else:
        passes = -(-n // len(trace)) if n else 0
        pick = np.concatenate([rng.permutation(len(trace)) for _ in range(passes)])[:n].astype(np.int64)
    return _workload(trace, arrivals, trace.prompt_tokens[pick], trace.output_tokens[pick], rates, rng)


def window_workload(trace: Trace, rates_rps: list[float], *, load: float, window_s: float, seed: int = 0,
                    max_peak_to_mean: float = 3.0, bin_s: float = 10.0, tries: int = 200) -> tuple[Workload, float]:
    """``n = round(load * sum(rates) * window_s)`` consecutive trace requests from a seeded random
    start, their arrivals stretched onto ``[0, window_s)`` (span plus one mean gap = the window);
    starts are drawn until the window's :func:`peak_to_mean` is at most ``max_peak_to_mean``
    (after ``tries`` draws: the least bursty one seen). Returns the workload and its peak-to-mean."""
    if not 0 < load or not 0 < window_s:
        raise ValueError("load and window_s must be > 0")
    rng = np.random.default_rng(seed)
    rates = np.asarray(rates_rps, dtype=float)
    n = max(1, int(round(load * rates.sum() * window_s)))
    if n > len(trace):
        raise ValueError(f"a window of {n} requests is longer than trace {trace.name} ({len(trace)} requests)")
    best = None
    for start in rng.integers(0, len(trace) - n + 1, size=tries):
        t = trace.arrived_at_s[start:start + n] - trace.arrived_at_s[start]
        span = float(t[-1]) * n / max(n - 1, 1)
        t = t * (window_s / span) if span > 0 else np.linspace(0.0, window_s, n, endpoint=False)
        ptm = peak_to_mean(t, window_s, bin_s=bin_s)
        if best is None or ptm < best[1]:
            best = (int(start), ptm, t)
        if ptm <= max_peak_to_mean:
            break
    start, ptm, t = best
    sl = slice(start, start + n)
    return _workload(trace, t, trace.prompt_tokens[sl], trace.output_tokens[sl], rates, rng), ptm


def main() -> int:
    """Derive configs/traces/azure2023.yaml from the Azure CSVs (needs them present)."""
    out = {}
    for kind in ("code", "conv"):
        path = azure_trace_path(kind)
        if not path.exists():
            print(f"error: {path} not found ({shared_data_hint()})", file=sys.stderr)
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
