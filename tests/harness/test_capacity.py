"""Issue 23 item 4: the selector's ``capacity_rps`` against one simulated instance.

For each quickstart task, the flowmaker plan on 8x A6000; per stage of it, one instance of the
stage's model and config (the engine core, step model and KV reserve every replay runs) fed the
stage's calls, sized as the cluster replay sizes them (the task trace's request sizes), on
Poisson arrivals (seed 0). The definition (docs/resolve.md): at ``capacity_rps`` the p99 call
latency stays within the call's budget; at 1.2x it does not.

The code-trace tasks miss it: their unloaded p99 is already near the budget (the trace's size
tail), which the rule, pricing the mean-size call, does not see; strict xfail, so a fix shows.
"""
from __future__ import annotations

import pytest

from harness.capacity import call_latency_s, plan_stage_rows
from harness.workload import azure_or_synthetic
from selector.deploy import deploy_task
from selector.resolve import ResolveSettings, resolve_task
from selector.taskspec import load_task, stage_tokens
from solvers.registry import get_solver

MISSED = pytest.mark.xfail(strict=True, reason="code-trace tasks: unloaded p99 near the budget (size tail); "
                                               "the rule over-estimates them (issue 23 item 4, docs/resolve.md)")
TASKS = ["chat", "rag-qa", "summarization", "math-reasoning",
         pytest.param("code-completion", marks=MISSED), pytest.param("code-review", marks=MISSED),
         pytest.param("text-to-sql", marks=MISSED)]


@pytest.mark.parametrize("name", TASKS)
def test_capacity_holds_at_1x_and_breaks_at_1_2x(name: str) -> None:
    s = ResolveSettings()
    task = load_task(name)
    p = resolve_task(task)
    plan, _ = deploy_task(p, get_solver("flowmaker"), time_limit_s=30)
    dep = plan.deployment
    wf = next(w for w in task.workflows if w.name == dep.workflow)
    trace, _ = azure_or_synthetic(task.trace)
    for r in plan_stage_rows(p, dep, stage_tokens(task, wf), latency_slack=s.latency_slack):
        def p99(x: float) -> float:
            return call_latency_s(r.model, "a6000", r.tp, r.pp, r.prompt, r.output, x * r.capacity_rps,
                                  kv_tokens=s.kv_reserve_tokens, mix=trace)
        assert p99(1.0) <= r.budget_s, (r, p99(1.0))
        assert p99(1.2) > r.budget_s, (r, p99(1.2))


def test_simulated_capacity_agrees_with_the_rule() -> None:
    """The simulator's own capacity (bisection on the Poisson rate) of chat's plan stage is
    within 20% of the selector's ``capacity_rps`` (what the 1.0x / 1.2x test brackets)."""
    from harness.capacity import simulated_capacity_rps
    s = ResolveSettings()
    task = load_task("chat")
    p = resolve_task(task)
    plan, _ = deploy_task(p, get_solver("flowmaker"), time_limit_s=30)
    wf = next(w for w in task.workflows if w.name == plan.deployment.workflow)
    trace, _ = azure_or_synthetic(task.trace)
    r = plan_stage_rows(p, plan.deployment, stage_tokens(task, wf), latency_slack=s.latency_slack)[0]
    sim = simulated_capacity_rps(r.model, "a6000", r.tp, r.pp, r.prompt, r.output, r.budget_s,
                                 kv_tokens=s.kv_reserve_tokens, guess_rps=r.capacity_rps, mix=trace)
    assert r.capacity_rps / 1.2 <= sim <= r.capacity_rps * 1.2, (sim, r.capacity_rps)
