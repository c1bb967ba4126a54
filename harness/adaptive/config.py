"""The re-selection controller's inputs: its parameters (:class:`ControllerConfig`), one task
(:class:`TaskModel`) and what it needs from where instances run (:class:`Backend`: the cluster
simulator, ``harness.adaptive.sim``, or real servers, ``harness.adaptive.live``). The rules that use
them are in ``harness.adaptive.controller``; docs/reselection.md has the parameters' defaults."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harness.cluster import SimTask
from selector.deployment import InstanceSpec
from selector.problem import Problem


class ControllerConfig(BaseModel):
    """The control loop's parameters (module docstring; defaults in docs/reselection.md). Times are
    the backend's seconds (simulated, or wall seconds on servers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    adaptive: bool = Field(True, description="False: deploy once and never re-select (static policies)")
    interval_s: float = Field(30.0, gt=0, description="control period")
    window_s: float = Field(120.0, gt=0, description="short window: rate rises and SLO misses")
    window_long_s: float = Field(600.0, gt=0, description="long window: a fall must hold this long")
    headroom: float = Field(1.1, ge=1, description="plan for the estimated rate times this")
    drift_up: float = Field(0.0, ge=0, description="up when r_s * headroom > capacity * (1 + drift_up)")
    drift_up_rising: float | None = Field(None, ge=0, description="drift_up while the load rises (the short "
                                          "window's rate above the rest of the long window's by up_z Poisson "
                                          "standard deviations; None: drift_up throughout)")
    up_z: float = Field(1.0, ge=0, description="up only when r_s exceeds the capacity by this many Poisson "
                                                "standard deviations of the window's count")
    drift_down: float = Field(0.30, ge=0, lt=1, description="down when max(r_s, r_l) * headroom < the load the plan "
                                                            "is meant for * (1 - this)")
    slo_miss_share: float = Field(0.05, ge=0, le=1, description="share of late or failed requests that triggers")
    slo_min_judged: int = Field(20, ge=1, description="requests judged in the window before the SLO rule applies")
    slo_bump: float = Field(1.5, ge=1, description="an SLO-triggered plan is for max(r_s * headroom, planned) x this")
    up_gap_s: float = Field(120.0, ge=0, description="least time after a migration before moving up again")
    cooldown_s: float = Field(900.0, ge=0, description="least time after a migration before moving down")
    down_margin: float = Field(0.1, ge=0, description="a move down plans for its estimate x headroom x (1 + this)")
    min_saving: float = Field(0.15, ge=0, le=1, description="a move down must save this share of the task's own "
                                                                  "GB x cooldown_s, its start-up overlap paid")
    min_rate_rps: float = Field(0.01, gt=0, description="floor of a planned rate (no arrivals yet)")
    time_limit_s: float = Field(5.0, gt=0, description="the selector's time limit per re-selection")
    startup_fixed_s: float = Field(20.0, ge=0, description="start-up of an instance besides loading its weights")
    load_gb_per_s: float = Field(2.0, gt=0, description="weight-loading bandwidth from disk (GB/s)")
    keep_matching: bool = Field(True, description="keep an old instance of the same model and config")
    rescale: bool = Field(True, description="also re-select within the serving variant and take the plan "
                                            "whose memory over cooldown_s, start-up included, is least")
    shrink_tp: tuple[int, ...] = Field((), description="moves down (and an adaptive first deployment) also "
                                                       "re-select with at most this many GPUs per replica")
    drain_poll_s: float = Field(1.0, gt=0, description="how often draining instances are checked")
    pack_busy: float | None = Field(None, gt=0, le=1, description="re-place the instances a migration starts "
                                    "best-fit on GPUs already held, up to this compute busy (None: the "
                                    "selector's placement)")
    slo_hold_s: float = Field(0.0, ge=0, description="after an SLO move, moves down plan for at least its target "
                              "for this long (0: off)")
    score: Literal["gb", "gpu"] = Field("gb", description="unit of a migration's score and of min_saving: GB "
                                         "held, or whole GPUs held on the cluster (ties: GB)")
    shrink_moves: Literal["down", "all"] = Field("down", description="shrink_tp on moves down and adaptive first "
                                                 "deployments, or on every selection (static plans included)")
    forecast_s: float = Field(0.0, ge=0, description="with a forecast: moves up plan for the largest forecast "
                              "rate of the next forecast_s, moves down for that of the next cooldown_s (0: off)")


@dataclass(frozen=True)
class TaskModel:
    """One task: its resolved ``problem`` (cluster and rate are replaced at each selection) and
    ``tokens[workflow]`` = (prompt, output) per stage."""

    problem: Problem
    tokens: dict[str, list[tuple[int, int]]]

    @property
    def name(self) -> str:
        return self.problem.task.name


class Backend(Protocol):
    """What the controller needs from where instances run (simulator or servers)."""

    def start(self, specs: Sequence[InstanceSpec], ready_at: Sequence[float]) -> None:
        """Begin starting ``specs`` (they hold memory from now; modelled ready times given)."""

    def ready(self, iid: str, now: float) -> bool:
        """Whether instance ``iid`` can serve."""

    def failed(self, iid: str) -> bool:
        """Whether instance ``iid`` failed to start (a server that exited)."""

    def switch(self, k: int, task: SimTask) -> None:
        """New requests of task ``k`` follow ``task``'s routes from now on."""

    def idle(self, iid: str) -> bool:
        """Whether instance ``iid`` has no call queued or running."""

    def stop(self, iid: str) -> None:
        """Release instance ``iid`` (drained)."""

    def arrivals(self, k: int, t0: float, t1: float) -> int:
        """Requests of task ``k`` that arrived in ``[t0, t1)``."""

    def outcomes(self, k: int, t0: float, t1: float, now: float, slo_s: float) -> tuple[int, int]:
        """Of task ``k``'s requests arrived in ``[t0, t1)``: (judged, missed) at ``now``; judged =
        finished, failed or older than ``slo_s``; missed = failed or later than ``slo_s``."""

    def in_flight(self, k: int, t0: float, t1: float) -> int:
        """Requests of task ``k`` arrived in ``[t0, t1)`` and neither finished nor failed."""
