"""Measured collective-communication curves: time as a piecewise-linear function of message size.

An alpha-beta model (`latency + bytes / bandwidth`) fits NVLink NCCL timings well (vidur's
A100/H100 DGX data, docs/profiler.md) but not a PCIe box: on 8x RTX A6000 (MaverIQ's
measurements) an all-reduce costs a ~60 us floor up to 0.1-2 MB whatever the GPU count, then
grows at a bus bandwidth that differs per GPU count (2 and 4 GPUs ~40 GB/s, 8 GPUs ~15 GB/s,
the ring crossing the CPU sockets). A `CollectiveCurve` keeps that shape: knots
(bytes, microseconds), linear interpolation between them, flat below the first knot and the
last segment's slope beyond the last. Knot times are fitted (`fit_curve`), not copied from the
measurements, and are non-decreasing, so a bigger message never costs less.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

US = 1e-6
#: knot sizes (bytes): factor-2 steps where the A6000 curves bend, factor-4 below. The first is
#: 8 KiB (one bf16 token of a 4096-wide model): below it the MaverIQ curves hold one noisy row
#: per GPU count (2 KiB: 62, 9, 23 us for 2, 4, 8 GPUs), so smaller messages take the 8 KiB time.
DEFAULT_KNOTS = (8192, 32768, 131072, 262144, 524288, 1 << 20, 1 << 21, 1 << 22, 1 << 23,
                 1 << 24, 1 << 25, 1 << 26)


class CollectiveCurve(BaseModel):
    """Time of one collective vs message size: knots `bytes` (strictly increasing) -> `us`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bytes: list[float] = Field(min_length=2, description="knot message sizes (bytes per GPU buffer)")
    us: list[float] = Field(min_length=2, description="time at each knot, microseconds")

    @model_validator(mode="after")
    def _check(self) -> "CollectiveCurve":
        if len(self.bytes) != len(self.us):
            raise ValueError("bytes and us must have the same length")
        if any(b1 <= b0 for b0, b1 in zip(self.bytes, self.bytes[1:])):
            raise ValueError("bytes must be strictly increasing")
        if self.us[0] < 0 or any(u1 < u0 for u0, u1 in zip(self.us, self.us[1:])):
            raise ValueError("us must be non-negative and non-decreasing")
        return self

    @property
    def tail_s_per_byte(self) -> float:
        """Slope of the last segment (s/byte): the large-message inverse bandwidth."""
        return (self.us[-1] - self.us[-2]) * US / (self.bytes[-1] - self.bytes[-2])

    def seconds(self, nbytes):
        """Time (s) for `nbytes` (float or numpy array)."""
        x = np.asarray(nbytes, dtype=float)
        t = np.interp(x, self.bytes, self.us) * US
        t = t + np.maximum(x - self.bytes[-1], 0.0) * self.tail_s_per_byte
        return float(t) if t.ndim == 0 else t

    def in_tokens(self, bytes_per_token: float) -> "TokenCurve":
        """The same curve with sizes in tokens of `bytes_per_token` (for the step model)."""
        return TokenCurve(tuple(b / bytes_per_token for b in self.bytes), tuple(u * US for u in self.us),
                          self.tail_s_per_byte * bytes_per_token)


@dataclass(frozen=True)
class TokenCurve:
    """A `CollectiveCurve` with sizes in tokens, evaluated with plain floats inside the step
    model (no numpy, ~0.3 us per call): knot `tokens`, knot `seconds`, tail s/token."""

    tokens: tuple[float, ...]
    seconds: tuple[float, ...]
    tail_s_per_token: float

    def __call__(self, tokens: float) -> float:
        xs, ys = self.tokens, self.seconds
        if tokens <= xs[0]:
            return ys[0]
        if tokens >= xs[-1]:
            return ys[-1] + (tokens - xs[-1]) * self.tail_s_per_token
        i = bisect.bisect_right(xs, tokens)
        x0, y0 = xs[i - 1], ys[i - 1]
        return y0 + (tokens - x0) * (ys[i] - y0) / (xs[i] - x0)


def fit_curve(nbytes: np.ndarray, time_s: np.ndarray,
              knots: Sequence[float] = DEFAULT_KNOTS) -> CollectiveCurve:
    """Fit knot times to measured (bytes, seconds) by robust least squares on the relative
    error log(pred / measured) (soft-L1, f_scale 0.2, as the operator fits), with the knot
    times constrained non-decreasing. Knots outside the measured sizes are dropped; rows below
    the first knot are left out of the fit (such messages take the first knot's time)."""
    from scipy.optimize import least_squares
    nbytes, time_s = np.asarray(nbytes, float), np.asarray(time_s, float)
    ks = [k for k in knots if nbytes.min() <= k <= nbytes.max()]
    if ks[-1] < nbytes.max():
        ks.append(float(nbytes.max()))
    ks = [float(k) for k in ks]
    keep = nbytes >= ks[0]  # smaller messages take the first knot's time; they do not pull on it
    nbytes, time_s = nbytes[keep], time_s[keep]
    start = np.interp(ks, np.sort(nbytes), time_s[np.argsort(nbytes)]) / US
    start = np.maximum.accumulate(np.maximum(start, 0.1))
    x0 = np.concatenate([[start[0]], np.diff(start)])  # first knot, then non-negative steps

    def curve(x: np.ndarray) -> CollectiveCurve:
        return CollectiveCurve.model_construct(bytes=ks, us=list(np.cumsum(x)))

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(curve(x).seconds(nbytes) / time_s)

    lo = np.r_[0.01, np.zeros(len(ks) - 1)]
    res = least_squares(resid, np.maximum(x0, lo + 1e-9), bounds=(lo, np.inf), loss="soft_l1",
                        f_scale=0.2)
    us = np.round(np.cumsum(res.x), 3)
    return CollectiveCurve(bytes=ks, us=[float(u) for u in np.maximum.accumulate(us)])
