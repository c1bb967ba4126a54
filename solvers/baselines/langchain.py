"""``langchain``: every decision fixed, as a LangChain app deployed with defaults.

Rules (docs/baselines.md): the developer's workflow (first multi-stage candidate); for every
stage the most accurate model of the default size class (``active_params_b <=
max_params_b``, default 8.5: an 8B-class model) that has a perf row on the default config
(the first listed config with ``tp=1, pp=1``, else the first listed config; on a typed cluster,
spec section 10, that config's GPU type: ``common.default_config``); replicas as the spec sizes them; never
reuses; instances packed first-fit onto GPUs of the config's type in id order (colocating when they fit);
``placement="spec"`` places them as FlowMaker does instead (``common.spec_place``: LeastLoaded,
compute-aware under ``sharing: compute``), the fair-placement row of the paper experiment.
No SLO is checked: it deploys its choice anyway. Setting ``paper`` (``langchain:paper`` in an
experiment): one replica per stage whatever the load, as the paper's LangChain deployment (15
instances for six tasks); its spec face is then infeasible (capacity) where the spec would size
more. Under ``sharing: compute`` the rules are the same (packing knows no compute); the spec face
is infeasible when its variant cannot be placed by compute-aware LeastLoaded or its packing
leaves a GPU busier than 1 (``common.spec_face``).
"""
from __future__ import annotations

import time
from dataclasses import replace

from selector.evaluate import evaluate
from selector.index import NEW, compile_problem
from selector.placement import free_memory, gpu_types
from selector.plan import Plan
from selector.problem import TOL, Problem
from solvers.base import Selector
from solvers.baselines.common import (check_placement, default_config, deployment, developer_workflow,
                                      new_demands, option_index, pack_first_fit, spec_face, spec_place)


SETTINGS = ("default", "paper")


class LangChainSelector(Selector):
    name = "langchain"

    def __init__(self, *, max_params_b: float = 8.5, setting: str = "default", placement: str = "own") -> None:
        if setting not in SETTINGS:
            raise KeyError(f"unknown LangChain setting '{setting}'; known: {', '.join(SETTINGS)}")
        self.max_params_b, self.setting, self.placement = max_params_b, setting, check_placement(placement)
        self.rule = "langchain" if setting == "default" else f"langchain/{setting}"
        self.rule += "" if placement == "own" else f"+{placement}"

    def select(self, problem: Problem, *, time_limit_s: float = 60.0) -> Plan:
        t0 = time.perf_counter()
        cp = compile_problem(problem)
        wi = developer_workflow(problem)
        default = default_config(problem)
        choice = []
        for si, st in enumerate(cp.workflows[wi].stages):
            cands = [o for o in st.options if o.kind == NEW and (o.tp, o.pp, o.gpu_type) == default
                     and o.active_params_b <= self.max_params_b + TOL]
            if not cands:
                cands = [o for o in st.options if o.kind == NEW and (o.tp, o.pp, o.gpu_type) == default]
            if not cands:
                return spec_face(cp, None, solver=self.name, t0=t0, rule=self.rule, deploy=None,
                                 unplaced_reason=f"stage {st.name}: no model on the default config")
            best = max(cands, key=lambda o: (o.accuracy, -o.model))
            choice.append(option_index(cp, wi, si, lambda o, b=best: o is b))
        ev = evaluate(cp, wi, choice)
        options, why = ev.options, None
        if self.setting == "paper":
            short = [o for o in options if o.kind == NEW and o.replicas > 1]
            options = [replace(o, replicas=1) if o.kind == NEW else o for o in options]
            if short:
                ev, why = None, f"capacity: one replica per stage where the load needs {short[0].replicas}"
        if self.placement == "spec":
            placed = spec_place(problem, new_demands(options, util=True))
        else:
            placed = pack_first_fit(free_memory(problem.cluster), new_demands(options), gpu_types(problem.cluster))
        deploy = None if placed is None else deployment(cp, wi, options, placed, rule=self.rule)
        return spec_face(cp, ev, solver=self.name, t0=t0, rule=self.rule, deploy=deploy, why=why,
                         unplaced_reason=f"placement ({self.placement}): an instance does not fit any GPU")
