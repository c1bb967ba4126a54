"""Request traces: three CSV layouts, the public Azure 2023 traces, a synthetic stand-in.

Layouts, recognised by their header line (``#`` lines are comments in every layout):

- native:    ``arrived_at_s,prompt_tokens,output_tokens`` (seconds from any origin)
- azure2023: ``TIMESTAMP,ContextTokens,GeneratedTokens`` (``2023-11-16 18:17:03.9799600``)
- processed: ``arrived_at,num_prefill_tokens,num_decode_tokens`` (vidur's splitwise files)

Arrivals are shifted so the first request arrives at 0 and sorted (stably); token counts
must be whole numbers >= 1. Errors name the file and line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from flowmaker.inputs import InputError, open_input
from profiler.catalog import shared_data_path

LAYOUTS = {
    ("arrived_at_s", "prompt_tokens", "output_tokens"): "native",
    ("timestamp", "contexttokens", "generatedtokens"): "azure2023",
    ("arrived_at", "num_prefill_tokens", "num_decode_tokens"): "processed",
}
AZURE_FILES = {"code": "AzureLLMInferenceTrace_code.csv", "conv": "AzureLLMInferenceTrace_conv.csv"}
_EPOCH = datetime(2000, 1, 1)  # naive: the trace's wall-clock times, no time-zone games


#: bounds on what a trace may hold: a token count (no model's context is near 2^31), the span of
#: arrivals after the shift to 0 (~31.7 years), a line, and the file
MAX_TOKENS = 2**31 - 1
MAX_SPAN_S = 1e9
MAX_LINE_BYTES = 2**20
MAX_TRACE_BYTES = 2**31


class TraceError(ValueError):
    """A malformed trace; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival: ``arrived_at_s`` (s, first = 0), token counts (>= 1)."""

    name: str
    arrived_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrived_at_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrived_at_s[-1]) if len(self) else 0.0

    def head(self, n: int) -> Trace:
        """The first ``n`` requests."""
        return Trace(self.name, self.arrived_at_s[:n], self.prompt_tokens[:n], self.output_tokens[:n])

    def scaled(self, time_scale: float) -> Trace:
        """Inter-arrival times multiplied by ``time_scale`` (> 1 stretches: lighter load)."""
        return Trace(self.name, self.arrived_at_s * time_scale, self.prompt_tokens, self.output_tokens)

    def poisson(self, rate_rps: float, seed: int = 0) -> Trace:
        """The same requests in order at Poisson arrivals of ``rate_rps`` per second (the first at 0)."""
        gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, max(len(self) - 1, 0))
        return Trace(self.name, np.concatenate([[0.0], np.cumsum(gaps)]),
                     self.prompt_tokens, self.output_tokens)

    def window(self, start_s: float, end_s: float) -> Trace:
        """Requests arriving in ``[start_s, end_s)``, shifted to start at 0."""
        a = self.arrived_at_s
        lo, hi = np.searchsorted(a, start_s, "left"), np.searchsorted(a, end_s, "left")
        sub = a[lo:hi]
        return Trace(self.name, sub - (sub[0] if len(sub) else 0.0), self.prompt_tokens[lo:hi],
                     self.output_tokens[lo:hi])


def _int(text: str, path: Path, lineno: int, col: str) -> int:
    try:
        v = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise TraceError(f"{path}: line {lineno}: {col} {text.strip()!r} is not a number") from None
        if not math.isfinite(f) or f != int(f):
            raise TraceError(f"{path}: line {lineno}: {col} {text.strip()!r} is not a whole number") from None
        v = int(f)
    if v < 1:
        raise TraceError(f"{path}: line {lineno}: {col} must be >= 1 (got {v})")
    if v > MAX_TOKENS:
        raise TraceError(f"{path}: line {lineno}: {col} must be at most {MAX_TOKENS} tokens (got {text.strip()[:40]})")
    return v


def _time(text: str, layout: str, path: Path, lineno: int) -> float:
    if layout == "azure2023":
        try:
            when = datetime.fromisoformat(text.strip())
        except ValueError:
            raise TraceError(f"{path}: line {lineno}: TIMESTAMP {text.strip()!r} is not a date-time") from None
        if when.tzinfo is not None:
            raise TraceError(f"{path}: line {lineno}: TIMESTAMP {text.strip()!r} carries a time zone; the Azure "
                             "layout's times are local wall-clock times without one (2023-11-16 18:17:03.97)")
        return (when - _EPOCH).total_seconds()
    try:
        v = float(text)
    except ValueError:
        raise TraceError(f"{path}: line {lineno}: arrival time {text.strip()!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise TraceError(f"{path}: line {lineno}: arrival time must be finite and >= 0 (got {text.strip()})")
    return v


def load_trace(path: str | Path, *, name: str | None = None) -> Trace:
    """Read a trace file in any of the three layouts (see the module docstring)."""
    path = Path(path)
    layout = None
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    for lineno, line in enumerate(_lines(path), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        cells = s.split(",")
        if layout is None:
            layout = LAYOUTS.get(tuple(c.strip().lower() for c in cells))
            if layout is None:
                raise TraceError(f"{path}: line {lineno}: unknown header {s!r}; expected one of: "
                                 + "; ".join(",".join(k) for k in LAYOUTS))
            cols = s.split(",")
            continue
        if len(cells) != 3:
            raise TraceError(f"{path}: line {lineno}: expected 3 comma-separated fields, got {len(cells)}")
        times.append(_time(cells[0], layout, path, lineno))
        prompts.append(_int(cells[1], path, lineno, cols[1].strip()))
        outputs.append(_int(cells[2], path, lineno, cols[2].strip()))
    if layout is None:
        raise TraceError(f"{path}: empty trace (no header line)")
    if not times:
        raise TraceError(f"{path}: no requests after the header")
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order[0]]
    if not np.isfinite(t[-1]) or t[-1] > MAX_SPAN_S:
        raise TraceError(f"{path}: arrivals span {t[-1]:.3g} s, more than {MAX_SPAN_S:g} s (~31 years); "
                         "arrival times are in seconds")
    return Trace(name or path.stem, t, np.asarray(prompts, dtype=np.int64)[order],
                 np.asarray(outputs, dtype=np.int64)[order])


def _lines(path: Path):
    """The file's lines as text, read one at a time with bounds: a line over
    :data:`MAX_LINE_BYTES` (``/dev/zero`` has none) or a file over :data:`MAX_TRACE_BYTES` is a
    TraceError, as are binary and non-UTF-8 bytes."""
    try:
        fh = open_input(path)          # a regular file only: a FIFO or device never blocks
    except InputError as exc:
        raise TraceError(str(exc)) from None
    total = 0
    with fh:
        for lineno in range(1, 2**62):
            try:
                raw = fh.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
            if not raw:
                return
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES:
                raise TraceError(f"{path}: line {lineno} is longer than {MAX_LINE_BYTES // 2**20} MiB")
            if total > MAX_TRACE_BYTES:
                raise TraceError(f"{path}: larger than {MAX_TRACE_BYTES // 2**30} GiB")
            if b"\x00" in raw:
                raise TraceError(f"{path}: line {lineno}: a binary file, not a text trace")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                raise TraceError(f"{path}: line {lineno}: not a UTF-8 text file") from None


def azure_trace_path(kind: str, data_dir: str | Path | None = None) -> Path:
    """Where the Azure 2023 ``code`` or ``conv`` trace is expected (it may be absent)."""
    if kind not in AZURE_FILES:
        raise KeyError(f"unknown Azure trace '{kind}'; known: {', '.join(AZURE_FILES)}")
    root = Path(data_dir) if data_dir is not None else shared_data_path()
    return root / "azure-public-dataset" / "data" / AZURE_FILES[kind]
