"""The data of the joint CP-SAT model (``solvers/joint_milp.py``): every task's options on the
input cluster, and the *virtual instances* that earlier tasks' new replicas may become.

A new option ``o`` of task ``j`` at stage ``s`` of workflow ``w`` with ``R`` replicas creates,
when chosen, the instances ``<task j>/<stage>/<r>`` for ``r < R`` (spec section 8); each is a
:class:`Virtual` ``(j, w, s, o, r)``. A later task ``k`` may reuse it at one of its stages when it
has a perf row for the instance's model, config and GPU type (section 10), the model meets its
accuracy SLO, one call fits its latency SLO and its load fits beside the replica's own
utilisation: a :class:`VirtualReuse` option. Base options pass ``selector.restrict.usable_options``
on the input cluster, which stays exact for every later cluster (clusters only fill up)."""
from __future__ import annotations

from dataclasses import dataclass

from selector.index import NEW, Compiled, Option, compile_problem
from selector.joint import TaskSet
from selector.problem import TOL
from selector.restrict import usable_options

Base = tuple[int, int, int, int]                 # (task, workflow, stage, option index)


@dataclass(frozen=True)
class Virtual:
    """Replica ``r`` of task ``task``'s new option ``option`` at ``stage`` of ``workflow``."""

    task: int
    workflow: int
    stage: int
    option: int
    replica: int
    id: str
    model: str
    tp: int
    pp: int
    gpu_type: str
    utilization: float           # its own utilisation once deployed (load / (replicas * capacity))

    @property
    def creator(self) -> Base:
        return (self.task, self.workflow, self.stage, self.option)


@dataclass(frozen=True)
class VirtualReuse:
    """Task ``task`` routes ``stage`` of ``workflow`` to ``virtual``."""

    task: int
    workflow: int
    stage: int
    virtual: Virtual
    latency_s: float             # calls * latency of one call
    util_add: float              # load / capacity
    compute_load: float          # util_add over the instance's GPUs (section 9)


@dataclass(frozen=True)
class JointData:
    ts: TaskSet
    compiled: tuple[Compiled, ...]                            # each task on the input cluster
    options: tuple[tuple[tuple[tuple[int, ...], ...], ...], ...]   # [task][workflow][stage] -> usable option indices
    virtual_reuse: tuple[VirtualReuse, ...]

    def opt(self, k: int, w: int, s: int, o: int) -> Option:
        return self.compiled[k].workflows[w].stages[s].options[o]

    def stages(self, k: int, w: int) -> int:
        return len(self.compiled[k].workflows[w].stages)


def prepare_joint(ts: TaskSet) -> JointData:
    compiled = tuple(compile_problem(p) for p in ts.tasks)
    options = tuple(tuple(tuple(tuple(keep) for keep in usable_options(cp, wf)) for wf in cp.workflows)
                    for cp in compiled)
    virtuals = [v for j, cp in enumerate(compiled) for v in _virtuals(ts, j, cp, options[j])]
    reuse = [r for k in range(1, len(ts.tasks)) for r in _reuses(ts, k, compiled[k], virtuals)]
    return JointData(ts, compiled, options, tuple(reuse))


def _virtuals(ts: TaskSet, j: int, cp: Compiled, options) -> list[Virtual]:
    out = []
    p = ts.tasks[j]
    for w, wf in enumerate(cp.workflows):
        for s, keep in enumerate(options[w]):
            for o in keep:
                op = wf.stages[s].options[o]
                if op.kind != NEW:
                    continue
                for r in range(op.replicas):
                    out.append(Virtual(j, w, s, o, r, f"{p.task.name}/{wf.stages[s].name}/{r}", p.models[op.model].name,
                                       op.tp, op.pp, op.gpu_type, op.replica_util))
    return out


def _reuses(ts: TaskSet, k: int, cp: Compiled, virtuals: list[Virtual]) -> list[VirtualReuse]:
    p = ts.tasks[k]
    perf = {(r.workflow, r.stage, r.model, r.tp, r.pp, r.gpu_type): r for r in p.perf}
    acc = {m.name: m.accuracy for m in p.models}
    out = []
    for w, wf in enumerate(p.workflows):
        for s, st in enumerate(wf.stages):
            load = p.task.arrival_rate_rps * st.calls
            for v in virtuals:
                if v.task >= k:
                    break
                row = perf.get((wf.name, st.name, v.model, v.tp, v.pp, v.gpu_type))
                if row is None or acc[v.model] < p.task.accuracy_slo - TOL:
                    continue
                lat = st.calls * row.latency_s
                util = load / row.capacity_rps
                if lat > p.task.latency_slo_s + TOL or v.utilization + util > 1.0 + TOL:
                    continue
                out.append(VirtualReuse(k, w, s, v, lat, util, util * v.tp * v.pp))
    return out
