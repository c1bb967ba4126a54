"""Day-long workloads: a rate curve over the hours of a day, compressed in time, with request sizes
drawn from a trace (the Azure 2023 traces by default).

The profile (:class:`DiurnalProfile`) gives one multiplier per hour of the day (24 values) or of
the week (168 values, Monday 00:00 first: :func:`load_week`, the Azure 2024 traces' week), in
``(0, 1]`` with the busiest hour at 1 (:data:`DEFAULT_HOURLY`, documented in docs/reselection.md),
linear between hour midpoints and wrapping from the last hour to the first. At profile hour ``h`` task ``k`` receives

    rate_k(h) = peak_x * arrival_rate_rps_k * hourly(h)

requests per second, so at the busiest hour every task gets ``peak_x`` times the rate its problem
names. A day of 86,400 s is simulated in ``86,400 / compression`` seconds: simulated time ``t``
is profile hour ``start_hour + t * compression / 3600``. Rates are not compressed (a request is
a request; its service time is real), only the curve's pace: a profile hour lasts ``3600 /
compression`` simulated seconds.

Arrivals (:func:`diurnal_workload`) are an inhomogeneous Poisson process per task (time
rescaling: ``N ~ Poisson(Lambda(T))`` uniform points on ``[0, Lambda(T)]`` mapped through the
inverse of the cumulative rate ``Lambda``, tabulated every ``grid_s``); every request takes the
prompt and output tokens of a trace request drawn uniformly with replacement, scaled by the trace's
means as ``harness.workload.cell_workload`` scales them; its difficulty (RouteLLM) is its prompt
length's percentile rank in the day, ties broken by a seeded draw. Everything is seeded from one
``seed``: the same arguments give the same workload.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.cluster import Workload
from harness.trace import Trace

#: the default day: multipliers of the peak rate per hour 0..23 (a business-day curve: a night
#: trough at 20% of the peak around 03:00-05:00, a morning ramp, a plateau 10:00-16:00 with a
#: lunch dip, an evening decline); mean 0.58, peak / trough 5 (docs/reselection.md)
DEFAULT_HOURLY: tuple[float, ...] = (
    0.30, 0.25, 0.22, 0.20, 0.20, 0.24, 0.32, 0.45, 0.62, 0.80, 0.93, 1.00,
    0.92, 0.95, 1.00, 0.96, 0.88, 0.75, 0.62, 0.55, 0.50, 0.45, 0.40, 0.34)

DAY_S = 86_400.0
WEEK_H = 168


def load_week(curve: str, path: str | None = None) -> tuple[float, ...]:
    """The 168 hourly multipliers of ``curve`` in a week file (default
    ``configs/profiles/azure2024_week.yaml``: ``code`` and ``conv``, the Azure 2024 traces'
    week, Monday 00:00 UTC first; how they were derived is in the file's header)."""
    import yaml
    from pathlib import Path
    from selector.taskspec import CONFIGS
    f = Path(path) if path else CONFIGS / "profiles" / "azure2024_week.yaml"
    data = yaml.safe_load(f.read_text())
    if curve not in data:
        raise KeyError(f"unknown week curve {curve!r} in {f.name} (known: {', '.join(sorted(data))})")
    values = tuple(float(x) for day in data[curve] for x in day)
    if len(values) != WEEK_H:
        raise ValueError(f"week curve {curve!r} in {f.name} has {len(values)} hours, not {WEEK_H}")
    return values


class DiurnalProfile(BaseModel):
    """A day's arrival-rate curve (module docstring). ``hourly``: 24 multipliers, rescaled so the
    largest is 1; ``peak_x``: the busiest hour's rate over each task's ``arrival_rate_rps``;
    ``compression``: profile seconds per simulated second; ``start_hour`` / ``hours``: the part of
    the day simulated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hourly: tuple[float, ...] = Field(default=DEFAULT_HOURLY, min_length=24, max_length=WEEK_H)
    peak_x: float = Field(default=4.0, gt=0)
    compression: float = Field(default=8.0, gt=0)
    start_hour: float = Field(default=0.0, ge=0, lt=WEEK_H)
    hours: float = Field(default=24.0, gt=0, le=WEEK_H)

    @field_validator("hourly")
    @classmethod
    def _positive(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if len(v) not in (24, WEEK_H):
            raise ValueError(f"hourly needs 24 (a day) or {WEEK_H} (a week) multipliers, got {len(v)}")
        if any(not np.isfinite(x) or x <= 0 for x in v):
            raise ValueError("every hourly multiplier must be a finite number > 0")
        top = max(v)
        return tuple(float(x) / top for x in v)

    @property
    def period_h(self) -> int:
        """Hours after which the curve repeats (24 or 168)."""
        return len(self.hourly)

    @property
    def duration_s(self) -> float:
        """Simulated seconds of the run: ``hours * 3600 / compression``."""
        return self.hours * 3600.0 / self.compression

    @property
    def hour_s(self) -> float:
        """Simulated seconds of one profile hour."""
        return 3600.0 / self.compression

    def hour_at(self, t_s: np.ndarray | float) -> np.ndarray | float:
        """Profile hour (0 <= h, may pass the period on a run that wraps) at simulated time ``t_s``."""
        return self.start_hour + np.asarray(t_s, dtype=float) * self.compression / 3600.0

    def multiplier(self, t_s: np.ndarray | float) -> np.ndarray:
        """The curve (share of the peak rate) at simulated time ``t_s``."""
        n = self.period_h
        h = np.mod(self.hour_at(t_s), float(n))
        xs = np.arange(-0.5, n + 1.0, 1.0)                      # hour midpoints, wrapped at both ends
        ys = np.array((self.hourly[-1],) + self.hourly + (self.hourly[0],))
        return np.interp(h, xs, ys)

    def mean_multiplier(self, grid_s: float = 1.0) -> float:
        """Time average of :meth:`multiplier` over the run."""
        t = np.arange(0.0, self.duration_s, grid_s) + grid_s / 2
        return float(self.multiplier(t).mean()) if len(t) else float(self.multiplier(0.0))

    def peak_multiplier(self, grid_s: float = 1.0) -> float:
        """Largest :meth:`multiplier` over the run."""
        t = np.arange(0.0, self.duration_s + grid_s, grid_s)
        return float(self.multiplier(t).max())

    def rates_at(self, base_rps: Sequence[float], t_s: float) -> list[float]:
        """Each task's rate (requests/s) at simulated time ``t_s``."""
        m = float(self.multiplier(t_s))
        return [self.peak_x * r * m for r in base_rps]


def _cumulative(profile: DiurnalProfile, grid_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid times and the integral of the multiplier from 0 (trapezoids)."""
    n = max(2, int(np.ceil(profile.duration_s / grid_s)) + 1)
    t = np.linspace(0.0, profile.duration_s, n)
    m = profile.multiplier(t)
    cum = np.concatenate([[0.0], np.cumsum((m[1:] + m[:-1]) / 2 * np.diff(t))])
    return t, cum


def diurnal_arrivals(profile: DiurnalProfile, rate_rps: float, rng: np.random.Generator, *,
                     grid_s: float = 1.0) -> np.ndarray:
    """Sorted arrival times of a Poisson process of rate ``rate_rps * multiplier(t)`` on
    ``[0, duration_s)`` (``rate_rps``: the rate at the peak)."""
    t, cum = _cumulative(profile, grid_s)
    total = rate_rps * cum[-1]
    n = int(rng.poisson(total))
    u = np.sort(rng.uniform(0.0, cum[-1], n))
    out = np.interp(u, cum, t)
    return out[out < profile.duration_s]


def diurnal_workload(trace: Trace, base_rps: Sequence[float], profile: DiurnalProfile | Sequence[DiurnalProfile], *,
                     seed: int = 0, grid_s: float = 1.0) -> Workload:
    """The day's requests for tasks whose problems name ``base_rps`` (module docstring): task
    ``k`` at ``peak_x * base_rps[k] * multiplier(t)`` of ``profile`` (or of ``profile[k]``: one
    curve per task); sizes drawn from ``trace``; seeded."""
    if not len(trace):
        raise ValueError(f"trace {trace.name} has no requests")
    profiles = [profile] * len(base_rps) if isinstance(profile, DiurnalProfile) else list(profile)
    if len(profiles) != len(base_rps):
        raise ValueError(f"{len(profiles)} profiles for {len(base_rps)} tasks")
    rng = np.random.default_rng(seed)
    times, tasks = [], []
    for k, (r, prof) in enumerate(zip(base_rps, profiles)):
        if r < 0:
            raise ValueError(f"task {k}: negative rate {r}")
        a = diurnal_arrivals(prof, prof.peak_x * float(r), rng, grid_s=grid_s)
        times.append(a)
        tasks.append(np.full(len(a), k, dtype=np.int64))
    arrival = np.concatenate(times) if times else np.zeros(0)
    task = np.concatenate(tasks) if tasks else np.zeros(0, dtype=np.int64)
    order = np.lexsort((task, arrival))
    arrival, task = arrival[order], task[order]
    n = len(arrival)
    pick = rng.integers(0, len(trace), n)
    prompt, output = trace.prompt_tokens[pick], trace.output_tokens[pick]
    rank = np.lexsort((rng.uniform(size=n), prompt))
    difficulty = np.empty(n)
    difficulty[rank] = (np.arange(n) + 0.5) / max(n, 1)
    return Workload(arrival_s=arrival, task=task, prompt_scale=prompt / trace.prompt_tokens.mean(),
                    output_scale=output / trace.output_tokens.mean(), difficulty=difficulty)
