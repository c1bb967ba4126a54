"""The selector's answer (spec section 6): an immutable :class:`Plan` and its JSON form."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from selector.deployment import Deployment
from selector.problem import DEFAULT_GPU_TYPE, objective_value

Status = Literal["optimal", "feasible", "infeasible", "unknown"]


@dataclass(frozen=True)
class StagePlan:
    stage: str
    model: str
    tp: int
    pp: int
    reuse: str | None          # instance id, or None for a new deployment
    replicas: int              # new replicas (0 when reusing)
    gpus: tuple[tuple[int, ...], ...] = ()   # per replica, ascending GPU ids
    gpu_type: str = DEFAULT_GPU_TYPE         # section 10: its config's type or the reused instance's

    def to_dict(self) -> dict:
        return {"stage": self.stage, "model": self.model, "tp": self.tp, "pp": self.pp, "gpu_type": self.gpu_type,
                "reuse": self.reuse, "replicas": self.replicas, "gpus": [list(g) for g in self.gpus]}


@dataclass(frozen=True)
class Plan:
    """A selected workflow variant, or the reason there is none.

    Units: ``cost_gb_s`` GB*s, ``latency_s`` s, ``new_mem_gb`` GB, ``elapsed_s`` wall seconds,
    ``usd_per_hour`` US dollars per hour (section 10's ``U``; None without ``cluster.prices``).
    """

    status: Status
    solver: str
    task: str
    variant_space: int
    elapsed_s: float
    variants_evaluated: int = 0
    workflow: str | None = None
    stages: tuple[StagePlan, ...] = ()
    cost_gb_s: float | None = None
    latency_s: float | None = None
    new_mem_gb: float | None = None
    new_gpus: int | None = None
    accuracy: float | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict, compare=False)
    #: what the plan deploys (selector/deployment.py); None when nothing is deployed
    deployment: Deployment | None = field(default=None, compare=False)
    usd_per_hour: float | None = None

    @property
    def solved(self) -> bool:
        return self.status in ("optimal", "feasible")

    def value(self, objective: str) -> float:
        """A solved plan's objective value (:func:`selector.problem.objective_value`)."""
        if self.cost_gb_s is None:
            raise ValueError(f"plan of {self.task} is {self.status}: it has no objective value")
        return objective_value(objective, self.cost_gb_s, self.usd_per_hour)

    def to_dict(self) -> dict:
        """Spec section 6's JSON, plus ``deployment`` when the plan deploys something."""
        dep = {} if self.deployment is None else {"deployment": self.deployment.to_dict()}
        if not self.solved:
            return {"status": self.status, "solver": self.solver, "task": self.task, "reason": self.reason,
                    "variant_space": self.variant_space, "variants_evaluated": self.variants_evaluated,
                    "elapsed_s": self.elapsed_s, **self.extra, **dep}
        return {"status": self.status, "solver": self.solver, "task": self.task, "workflow": self.workflow,
                "stages": [s.to_dict() for s in self.stages], "cost_gb_s": self.cost_gb_s,
                "usd_per_hour": self.usd_per_hour, "latency_s": self.latency_s, "new_mem_gb": self.new_mem_gb, "new_gpus": self.new_gpus,
                "accuracy": self.accuracy, "elapsed_s": self.elapsed_s, "variant_space": self.variant_space,
                "variants_evaluated": self.variants_evaluated, **self.extra, **dep}

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_dict(d: dict) -> Plan:
        stages = tuple(StagePlan(s["stage"], s["model"], s["tp"], s["pp"], s["reuse"], s["replicas"],
                                 tuple(tuple(g) for g in s["gpus"]), s.get("gpu_type", DEFAULT_GPU_TYPE))
                       for s in d.get("stages", []))
        known = {"status", "solver", "task", "variant_space", "elapsed_s", "variants_evaluated", "workflow",
                 "stages", "cost_gb_s", "latency_s", "new_mem_gb", "new_gpus", "accuracy", "reason", "deployment",
                 "usd_per_hour"}
        dep = d.get("deployment")
        return Plan(status=d["status"], solver=d["solver"], task=d["task"], variant_space=d["variant_space"],
                    elapsed_s=d["elapsed_s"], variants_evaluated=d.get("variants_evaluated", 0),
                    workflow=d.get("workflow"), stages=stages, cost_gb_s=d.get("cost_gb_s"),
                    latency_s=d.get("latency_s"), new_mem_gb=d.get("new_mem_gb"), new_gpus=d.get("new_gpus"),
                    accuracy=d.get("accuracy"), reason=d.get("reason"),
                    extra={k: v for k, v in d.items() if k not in known},
                    deployment=None if dep is None else Deployment.from_dict(dep),
                    usd_per_hour=d.get("usd_per_hour"))
