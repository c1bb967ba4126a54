"""Run each request of a deployed plan through the orchestrator (``orchestration: chain | teola``).

A task may name, per workflow, the orchestrator application that realises one of its requests
(``configs/tasks/*.yaml``, ``orchestration:``; ``selector.taskspec.OrchestrationSpec``). For a
placed task this module

1. binds the app's LLM components to the plan: component ``c`` mapped to stage ``s`` runs on an
   engine named ``stage:<s>`` whose instances are the plan's instances for ``s`` (its new
   replicas, or the reused instance), each timed by ``profiler.analytic`` for the instance's
   model, TP and PP on the cluster's GPU, on the same engine core and ``EngineConfig`` as the
   cluster simulator (so a plan's instance behaves alike with and without orchestration), with
   the KV capacity the plan's memory allocation leaves: ``harness.cluster.instance_timing``, the
   rule ``build_core`` uses;
2. builds the app's other engines (embedding, vector search, reranking, web search) from its
   ``configs/engines`` bindings;
3. runs the requests' arrivals through ``orchestrator.simulate`` with the scheme that
   ``orchestration`` names: ``chain`` = the module chain (LlamaDist, ``llamadist-to`` unless
   told otherwise), ``teola`` = the e-graph with topology-aware batching.

Only the orchestrated task's requests run on its instances here: a reused instance carries no
traffic of the task that owns it (``BoundApp.reused`` says which stages reuse one).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from harness.cluster import instance_timing
from orchestrator.apps import AppSpec, load_app
from orchestrator.engines.base import Engine
from orchestrator.engines.factory import build_instances, llm_instances, load_engine_spec
from orchestrator.runtime.api import simulate
from orchestrator.runtime.sim import RequestResult
from orchestrator.schemes import get_scheme
from orchestrator.template import Template
from profiler.engine import DEFAULT, EngineConfig
from selector.deployment import Deployment, InstanceSpec
from selector.taskspec import TaskSpec

#: orchestration name -> default scheme (``orchestrator.schemes``)
ORCHESTRATIONS: dict[str, str] = {"chain": "llamadist-to", "teola": "teola"}
#: component ops that call an LLM (they must be bound to a plan stage)
LLM_OPS = frozenset({"llm", "synthesis", "contextualize"})


class OrchestrationError(ValueError):
    """A task, plan or configuration that cannot be orchestrated; the message is one line."""


def scheme_for(orchestration: str, *, chain_scheme: str = "llamadist-to") -> str:
    """The orchestrator scheme of ``orchestration`` (``chain`` -> ``chain_scheme``)."""
    if orchestration not in ORCHESTRATIONS:
        raise OrchestrationError(f"unknown orchestration '{orchestration}'; known: {', '.join(ORCHESTRATIONS)}")
    name = chain_scheme if orchestration == "chain" else ORCHESTRATIONS[orchestration]
    try:
        get_scheme(name)
    except KeyError as exc:
        raise OrchestrationError(str(exc.args[0])) from None
    return name


@dataclass(frozen=True)
class BoundApp:
    """A task's app with its LLM components bound to the plan's stages."""
    task: str
    workflow: str
    app: AppSpec
    template: Template
    stage_instances: Mapping[str, tuple[InstanceSpec, ...]]   # stage -> instances serving it
    reused: tuple[str, ...]                                    # stages served by a reused instance


def bind(spec: TaskSpec, dep: Deployment | None, instances: Mapping[str, InstanceSpec], *,
         reason: str | None = None) -> BoundApp:
    """Bind ``spec``'s app for the workflow ``dep`` (the task's ``plan.deployment``) deploys;
    ``instances`` maps every instance id on the cluster (this task's and those it may reuse) to
    its spec. ``dep = None``: the task was not placed (``reason`` says why)."""
    if dep is None:
        raise OrchestrationError(f"task {spec.name}: not placed ({reason or 'no reason given'})")
    o = spec.orchestration.get(dep.workflow)
    if o is None:
        known = ", ".join(spec.orchestration) or "none"
        raise OrchestrationError(f"task {spec.name}: workflow '{dep.workflow}' has no orchestration app "
                                 f"(configs/tasks/{spec.name}.yaml orchestration:; given for: {known})")
    try:
        app = load_app(o.app)
    except KeyError as exc:
        raise OrchestrationError(f"task {spec.name}: {exc.args[0]}") from None
    if any(len(r.routes) > 1 for r in dep.stages):
        raise OrchestrationError(f"task {spec.name}: routed (strong/weak) deployments cannot be orchestrated")
    t = app.template()
    comps = {c.name: c for c in t.components}
    unknown = sorted(set(o.stages) - set(comps))
    if unknown:
        raise OrchestrationError(f"task {spec.name}: app {o.app} has no component(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(comps)}")
    unbound = sorted(c.name for c in t.components if c.op in LLM_OPS and c.name not in o.stages)
    if unbound:
        raise OrchestrationError(f"task {spec.name}: app {o.app}: LLM component(s) {', '.join(unbound)} "
                                 "are not bound to a stage")
    routes = {r.stage: r for r in dep.stages}
    stage_inst, reused = {}, []
    for stage in sorted(set(o.stages.values())):
        ids = routes[stage].routes[0].instances
        missing = [i for i in ids if i not in instances]
        if missing:
            raise OrchestrationError(f"task {spec.name}: stage {stage}: unknown instance(s) {', '.join(missing)}")
        stage_inst[stage] = tuple(instances[i] for i in ids)
        if not any(i.id in {x.id for x in dep.instances} for i in stage_inst[stage]):
            reused.append(stage)
    bound = tuple(replace(c, engine=f"stage:{o.stages[c.name]}") if c.name in o.stages else c
                  for c in t.components)
    return BoundApp(spec.name, dep.workflow, app, Template(bound, t.name, t.outputs), stage_inst,
                    tuple(reused))


def build_engines(b: BoundApp, *, gpu: str, prefix_caching: bool = False,
                  engine: EngineConfig = DEFAULT) -> dict[str, list[Engine]]:
    """Fresh engine instances for one run: plan instances for the ``stage:*`` engines (profiler
    step times, KV capacity from the allocated memory), the app's own bindings for the rest."""
    used = {c.engine for c in b.template.components if c.engine is not None}
    used |= {c.params["db_engine"] for c in b.template.components if "db_engine" in c.params}
    out: dict[str, list[Engine]] = {}
    for name in sorted(used):
        if name.startswith("stage:"):
            out[name] = []
            cfg = engine.model_copy(update={"prefix_caching": prefix_caching})
            for inst in b.stage_instances[name.removeprefix("stage:")]:
                step, kv = instance_timing(inst, gpu=gpu, engine=cfg)
                if kv < cfg.block_size:
                    raise OrchestrationError(f"task {b.task}: instance {inst.id} has no KV-cache memory left")
                out[name] += llm_instances(name=f"{inst.model}@{inst.gpu_name(gpu)}x{inst.tp * inst.pp}", step=step,
                                           kv_capacity_tokens=kv, config=cfg)
        elif name in b.app.engines:
            bind_ = b.app.engines[name]
            out[name] = build_instances(load_engine_spec(bind_.spec), n_instances=bind_.instances,
                                        prefix_caching=prefix_caching)
        else:
            raise OrchestrationError(f"task {b.task}: app {b.app.name} uses engine '{name}' it does not bind")
    return out


def run_requests(b: BoundApp, arrivals_s: Sequence[float], *, gpu: str, orchestration: str,
                 chain_scheme: str = "llamadist-to", seed: int = 0, dispatch_overhead_s: float = 0.002,
                 engine: EngineConfig = DEFAULT) -> list[RequestResult]:
    """Simulate one request of ``b``'s app per arrival (seconds) under ``orchestration``.

    Query configurations follow the app (``AppSpec.query_configs``, seeded); content is
    generated from ``seed``, so ``chain`` and ``teola`` see the same requests and, engines being
    deterministic, return the same outputs. Results are ordered as ``arrivals_s``."""
    import numpy as np
    scheme = get_scheme(scheme_for(orchestration, chain_scheme=chain_scheme))
    rng = np.random.default_rng([seed, len(arrivals_s)])
    cfgs = b.app.query_configs(len(arrivals_s), rng)
    engines = build_engines(b, gpu=gpu, prefix_caching=scheme.prefix_caching, engine=engine)
    return simulate(b.template, cfgs, list(arrivals_s), engines, scheme=scheme, seed=seed,
                    dispatch_overhead_s=dispatch_overhead_s)
