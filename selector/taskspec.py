"""Task descriptions in ``configs/tasks/``: SLOs, arrival rate, the trace a task is bound to,
and its candidate workflows whose stages have *roles*; a role turns the trace's token
statistics into each stage's prompt and output sizes (``configs/tasks/roles.yaml``)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from flowmaker.inputs import error_message, main_error, validate_strict
from flowmaker.names import check_distinct, name_problem

from profiler.catalog import CatalogError, config_path, configs_dir, known_configs
from selector.errors import ProblemError
from selector.yamlio import load_mapping

#: the project's configs (``profiler.catalog.configs_dir``: the shipped package data)
CONFIGS = configs_dir()


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Role(_Frozen):
    prompt_of_request: float = Field(ge=0)
    prompt_of_previous: float = Field(ge=0)
    instruction_tokens: int = Field(ge=0)
    output_of_request: float = Field(ge=0)
    min_output_tokens: int = Field(ge=1)


class TraceStats(_Frozen):
    requests: int = Field(gt=0)
    duration_s: float = Field(gt=0)
    rate_rps: float = Field(gt=0)
    prompt_tokens_mean: float = Field(gt=0)
    prompt_tokens_p50: float = Field(gt=0)
    output_tokens_mean: float = Field(gt=0)
    output_tokens_p50: float = Field(gt=0)
    #: the joint size distribution as cells ``(weight, prompt / mean, output / mean)``
    #: (``selector.tokens.size_cells``; the capacity rule's size mix); one mean-size cell if absent
    size_cells: tuple[tuple[float, float, float], ...] = ((1.0, 1.0, 1.0),)

    @model_validator(mode="after")
    def _cells(self) -> TraceStats:
        if any(min(c) <= 0 for c in self.size_cells) or abs(sum(c[0] for c in self.size_cells) - 1) > 1e-3:
            raise ValueError("size_cells: each (weight, prompt scale, output scale) > 0, weights summing to 1")
        return self


class StageSpec(_Frozen):
    name: str
    role: str
    calls: int = Field(default=1, ge=1)


class WorkflowSpec(_Frozen):
    name: str
    stages: Annotated[tuple[StageSpec, ...], Field(min_length=1)]


class OrchestrationSpec(_Frozen):
    """How the harness runs one request of a workflow through the orchestrator (docs/harness.md,
    "Orchestrated requests"): ``app`` names an application in ``configs/apps``; ``stages`` binds
    each of its LLM components to the workflow stage whose deployed instances serve it."""
    app: str
    stages: dict[str, str] = Field(min_length=1, description="app component -> workflow stage")


def _task_name(v: str) -> str:
    why = name_problem(v)       # it names result files (flowmaker.names)
    if why:
        raise ValueError(why)
    return v


class TaskSpec(_Frozen):
    name: Annotated[str, AfterValidator(_task_name)]
    description: str = ""
    trace: Literal["code", "conv"]
    accuracy_slo: float = Field(ge=0)
    latency_slo_s: float | None = Field(default=None, gt=0)
    latency_slo_factor: float | None = Field(default=None, gt=0)
    arrival_rate_rps: float = Field(gt=0)
    workflows: Annotated[tuple[WorkflowSpec, ...], Field(min_length=1)]
    orchestration: dict[str, OrchestrationSpec] = Field(
        default_factory=dict, description="per workflow name: the orchestrator app that runs one request "
                                          "(optional; used only by harness runs with orchestration chain|teola)")

    @model_validator(mode="after")
    def _one_slo(self) -> TaskSpec:
        if (self.latency_slo_s is None) == (self.latency_slo_factor is None):
            raise ValueError("give exactly one of latency_slo_s and latency_slo_factor")
        return self

    @model_validator(mode="after")
    def _orchestration_names(self) -> TaskSpec:
        stages = {w.name: {s.name for s in w.stages} for w in self.workflows}
        for wf, o in self.orchestration.items():
            if wf not in stages:
                raise ValueError(f"orchestration: unknown workflow '{wf}'; known: {', '.join(stages)}")
            bad = sorted(set(o.stages.values()) - stages[wf])
            if bad:
                raise ValueError(f"orchestration.{wf}: unknown stage(s) {', '.join(bad)}; "
                                 f"known: {', '.join(sorted(stages[wf]))}")
        return self


def _validate(cls, data: dict, where: str):
    try:
        return validate_strict(cls, data)      # `arrival_rate_rps: true` is not 1.0
    except ValidationError as exc:
        err = main_error(exc)
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise ProblemError(f"{where}: {field}", error_message(err, cls)) from None


def task_path(name_or_path: str | Path) -> Path:
    """A task by name (``configs/tasks/<name>.yaml``) or by path; an unknown name lists the known."""
    if str(name_or_path) == "roles":
        raise ProblemError("task", f"'roles' holds the stage roles, not a task; known: {', '.join(task_names())}")
    try:
        return config_path(name_or_path, "tasks", "task")
    except CatalogError:
        raise ProblemError("task", f"unknown task '{name_or_path}'; known: {', '.join(task_names())} "
                                   "(or give a path to a task file)") from None


def cluster_path(name_or_path: str | Path) -> Path:
    """A cluster by name (``configs/clusters/<name>.yaml``) or by path; an unknown name lists the known."""
    try:
        return config_path(name_or_path, "clusters", "cluster")
    except CatalogError as exc:
        raise ProblemError("cluster", str(exc)) from None


def task_names() -> list[str]:
    return [n for n in known_configs("tasks") if n != "roles"]


def load_task(name_or_path: str | Path) -> TaskSpec:
    path = task_path(name_or_path)
    return _validate(TaskSpec, load_mapping(path), str(path))


#: tasks one experiment may deploy (the paper's suite has seven); more is a run of days
MAX_TASKS = 1000


def _distinct_tasks(tasks: list[str]) -> list[str]:
    names = [load_task(t).name for t in tasks]       # an unknown task or bad file fails here, early
    check_distinct(names, "task names")
    return tasks


#: an experiment's ``tasks:``: names or files, at least one, at most :data:`MAX_TASKS`, every task
#: readable and their task names distinct (results are keyed by them)
TaskList = Annotated[list[str], Field(min_length=1, max_length=MAX_TASKS), AfterValidator(_distinct_tasks)]


def load_roles(path: Path | None = None) -> dict[str, Role]:
    path = path or CONFIGS / "tasks" / "roles.yaml"
    raw = load_mapping(path).get("roles", {})
    return {k: _validate(Role, v, f"{path}: roles.{k}") for k, v in raw.items()}


def load_trace_stats(path: Path | None = None) -> dict[str, TraceStats]:
    """The traces' statistics of ``path`` (default configs/task_tokens.yaml), parsed once per file
    version (path, mtime, size): resolve reads them for every stage and row."""
    path = Path(path or CONFIGS / "task_tokens.yaml")
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (str(path), 0, 0)                 # load_mapping names the missing file
    return dict(_trace_stats(*key))


@lru_cache(maxsize=8)
def _trace_stats(path: str, _mtime_ns: int, _size: int) -> dict[str, TraceStats]:
    raw = load_mapping(Path(path)).get("traces", {})
    return {k: _validate(TraceStats, v, f"{path}: traces.{k}") for k, v in raw.items()}


def stage_tokens(task: TaskSpec, wf: WorkflowSpec, *, roles: dict[str, Role] | None = None,
                 stats: dict[str, TraceStats] | None = None) -> list[tuple[int, int]]:
    """(prompt_tokens, output_tokens) of one call of each stage of ``wf``."""
    roles = roles or load_roles()
    st = (stats or load_trace_stats())[task.trace]
    out: list[tuple[int, int]] = []
    prev = 0.0
    for s in wf.stages:
        if s.role not in roles:
            raise ProblemError(f"task {task.name}: workflow {wf.name}: stage {s.name}: role",
                               f"unknown role '{s.role}'; known: {', '.join(roles)}")
        r = roles[s.role]
        prompt = round(r.prompt_of_request * st.prompt_tokens_mean + r.prompt_of_previous * prev
                       + r.instruction_tokens)
        output = max(r.min_output_tokens, round(r.output_of_request * st.output_tokens_mean))
        out.append((max(1, prompt), output))
        prev = output * s.calls
    return out
