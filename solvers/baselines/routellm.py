"""``routellm``: a fixed workflow whose every stage is served by a strong and a weak model; a
router sends each request, per stage, to one of them by a threshold on its difficulty.

Rules (docs/baselines.md): the task's first workflow (RouteLLM routes single prompts; the
first candidate is the direct one); strong ``qwen2.5-14b``, weak ``qwen2.5-7b`` on the
default config (the first listed with tp=1, pp=1, else the first listed; on a typed cluster,
spec section 10, that config's GPU type: ``common.default_config``); when a model is not in the problem,
strong = the most accurate and weak = the smallest model with a perf row on the default
config. Settings set the difficulty threshold below which a request goes to the weak model:
``max-quality`` 0.0 (all strong), ``balanced`` 0.35, ``min-cost`` 0.65 (difficulty is
uniform on [0, 1], so 100%, 65% and 35% of requests reach the strong model). Both models are
shared across tasks like a RouteLLM service: a stage reuses a deployed instance of the model
when its utilisation plus the share of load routed there stays <= 1, else new replicas are
placed LeastLoaded (strong stages first, then weak), sized to the load the router sends that
model: ``max(1, ceil(share * load / capacity))`` (one instance per model, the rule before
issue 17, ran at 1.04-2.22x its capacity). A model that gets no share (the weak one under
``max-quality``) is not deployed. The plan's stages name the strong model; ``plan.deployment``
routes each stage's requests in two routes: the weak instances with share ``threshold`` (the
easiest requests), then the strong ones with ``1 - threshold`` (only the strong route when
``threshold`` is 0). Under ``sharing: compute`` the rules are the same (its
LeastLoaded places by memory, its reuse checks the instance's utilisation only); the spec face
judges the strong variant under that mode and is infeasible when the deployment leaves a GPU
busier than 1 (``common.spec_face``).

``placement="spec"`` (the fair-placement row of the paper experiment) places as FlowMaker does:
a stage reuses an instance only when section 9 also holds on its GPUs, and new replicas go by
``common.spec_place`` (LeastLoaded, compute-aware under ``sharing: compute``). Setting ``paper``
sizes RouteLLM as the paper's deployment (shared/reference/flowmaker.md: max-quality "reserves
206-235 GB"): all requests to the strong model, served by one pool of ``floor(235 GB / instance
GB)`` strong replicas (6 x qwen2.5-14b on an A6000) deployed with the first task whatever the load
and shared by every later task, each stage's requests spread evenly over the pool.
"""
from __future__ import annotations

import time
from dataclasses import replace

from selector.deployment import Deployment, Serving, build_deployment
from selector.evaluate import evaluate
from selector.index import NEW, REUSE, compile_problem, replicas_for
from selector.placement import free_memory, gpu_types, place, reuse_busy
from selector.plan import Plan
from selector.problem import TOL, Problem
from solvers.base import Selector
from solvers.baselines.common import (check_placement, default_config, new_demands, servings, spec_face,
                                      spec_place)

SETTINGS = {"max-quality": 0.0, "balanced": 0.35, "min-cost": 0.65, "paper": 0.0}
#: settings with a fixed pool of strong replicas (GB reserved at most): the paper's max-quality
#: deployment reserved 206-235 GB (shared/reference/flowmaker.md, "vs RouteLLM")
POOL_GB = {"paper": 235.0}


class RouteLLMSelector(Selector):
    name = "routellm"

    def __init__(self, *, setting: str = "balanced", strong: str = "qwen2.5-14b", weak: str = "qwen2.5-7b",
                 placement: str = "own") -> None:
        if setting not in SETTINGS:
            raise KeyError(f"unknown RouteLLM setting '{setting}'; known: {', '.join(SETTINGS)}")
        self.setting, self.strong, self.weak = setting, strong, weak
        self.threshold, self.pool_gb = SETTINGS[setting], POOL_GB.get(setting)
        self.placement = check_placement(placement)
        self.rule = f"routellm/{setting}" + ("" if placement == "own" else f"+{placement}")

    def _models(self, problem: Problem, default) -> tuple[str, str] | None:
        on_default = [m for m in problem.models
                      if any(r.model == m.name and (r.tp, r.pp, r.gpu_type) == default for r in problem.perf)]
        if not on_default:
            return None
        names = {m.name for m in on_default}
        strong = self.strong if self.strong in names else max(on_default, key=lambda m: m.accuracy).name
        weak = self.weak if self.weak in names else min(on_default, key=lambda m: m.active_params_b).name
        return strong, weak

    def _pick(self, cp, wi, model: str, default, share: float, util: dict[int, float]):
        """Per stage: a reusable instance of ``model`` with room for ``share`` of the load, else new
        replicas sized to that share (``max(1, ceil(share * load / capacity))``)."""
        p = cp.problem
        mi = next(i for i, m in enumerate(p.models) if m.name == model)
        out = []
        wf = p.workflows[cp.workflows[wi].index]
        for st, spec in zip(cp.workflows[wi].stages, wf.stages, strict=True):
            opt = None
            for o in st.options:
                if o.model != mi:
                    continue
                if o.kind == REUSE and self._reusable(cp, o, share, util):
                    opt = o
                    util[o.instance] = util.get(o.instance, cp.base_util[o.instance]) + share * o.util_add
                    break
                if o.kind == NEW and (o.tp, o.pp, o.gpu_type) == default and opt is None:
                    opt = o
            if opt is None:
                return None
            if opt.kind == NEW:
                load = share * p.task.arrival_rate_rps * spec.calls
                n = replicas_for(load, opt.capacity_rps)
                if self.pool_gb is not None:
                    n = max(1, int(self.pool_gb / opt.mem_gb + TOL))
                opt = replace(opt, replicas=n, replica_util=load / (n * opt.capacity_rps))
            out.append(opt)
        return out

    def _reusable(self, cp, o, share: float, util: dict[int, float]) -> bool:
        """Its own rule: the instance's utilisation stays <= 1; ``placement="spec"`` also section 9
        on its GPUs (under ``sharing: compute``); the ``paper`` pool takes whatever is routed."""
        if self.pool_gb is not None:
            return True
        after = util.get(o.instance, cp.base_util[o.instance]) + share * o.util_add
        if after > 1 + TOL:
            return False
        if self.placement == "own" or not cp.problem.cluster.compute:
            return True
        routed = {i: u - cp.base_util[i] for i, u in util.items()}
        routed[o.instance] = after - cp.base_util[o.instance]
        busy = reuse_busy(cp.problem.cluster, routed)
        return all(busy[g] <= 1 + TOL for g in cp.problem.cluster.instances[o.instance].gpus)

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        t0 = time.perf_counter()
        cp = compile_problem(problem)
        wi = 0
        default = default_config(problem)
        pair = self._models(problem, default)
        share = 1.0 - self.threshold
        util: dict[int, float] = {}
        strong = weak = None
        if pair:
            strong = self._pick(cp, wi, pair[0], default, share, util)
            # a model the router sends nothing to is not deployed (max-quality: no weak instance)
            weak = self._pick(cp, wi, pair[1], default, 1.0 - share, util) if self.threshold > 0 else []
        if strong is None or weak is None:
            return spec_face(cp, None, solver=self.name, t0=t0, rule=self.rule, deploy=None,
                             why="no strong/weak option on every stage",
                             unplaced_reason="no strong/weak option on every stage")
        choice = [next(k for k, x in enumerate(cp.workflows[wi].stages[s].options) if x.key == o.key)
                  for s, o in enumerate(strong)]
        ev = evaluate(cp, wi, choice)
        if self.placement == "spec":
            routed = {i: u - cp.base_util[i] for i, u in util.items()}
            placed = spec_place(problem, new_demands(strong, util=True) + new_demands(weak, util=True), routed)
        else:
            placed = place(free_memory(problem.cluster), new_demands(strong) + new_demands(weak),
                           types=gpu_types(problem.cluster))
        deploy = None if placed is None else self._deployment(cp, wi, strong, weak, placed)
        return spec_face(cp, ev, solver=self.name, t0=t0, rule=self.rule, deploy=deploy,
                         unplaced_reason="strong and weak replicas cannot be placed")

    def _deployment(self, cp, wi: int, strong, weak, placed) -> Deployment:
        """Per stage two routes: the weak instances take the share ``threshold`` of requests (the
        easiest), the strong ones the rest (only the strong route when ``threshold`` is 0).
        Instances are listed strong first, then weak."""
        n = len(new_demands(strong))
        hard = servings(cp, strong, placed[:n], share=1.0 - self.threshold)
        if self.pool_gb is not None:
            hard = [self._pool(cp, o, h) for o, h in zip(strong, hard)]
        if weak:
            easy = servings(cp, weak, placed[n:], share=self.threshold, tag="weak")
            ways = [[e, h] for e, h in zip(easy, hard)]
        else:
            ways = [h if isinstance(h, list) else [h] for h in hard]
        dep = build_deployment(cp.problem, cp.workflows[wi].name, ways, rule=self.rule)
        strong_ids = {iid for st in dep.stages for iid in st.routes[-1].instances}
        order = sorted(dep.instances, key=lambda i: i.id not in strong_ids)      # stable: stage order kept
        return replace(dep, instances=tuple(order))

    def _pool(self, cp, o, serving: Serving) -> Serving | list[Serving]:
        """The ``paper`` pool: a new stage keeps its replicas; a reusing stage is spread evenly over
        every deployed instance of its model and config (the pool the first task deployed)."""
        if o.kind == NEW:
            return serving
        p = cp.problem
        ref = p.cluster.instances[o.instance]
        pool = [i.id for i in p.cluster.instances if (i.model, i.tp, i.pp) == (ref.model, ref.tp, ref.pp)]
        return [replace(serving, reuse=iid, share=serving.share / len(pool)) for iid in pool]
