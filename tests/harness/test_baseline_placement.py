"""Issue 25 item 3: the baselines' fair placement (``placement="spec"``: FlowMaker's compute-aware
LeastLoaded) and RouteLLM sized as the paper's deployment, on the seven tasks at 8x A6000."""
from __future__ import annotations

import functools

import pytest

from selector.placement import gpu_busy

TASKS = ["code-completion", "chat", "rag-qa", "code-review", "summarization", "math-reasoning", "text-to-sql"]


@functools.lru_cache(maxsize=1)
def _problems():
    from experiments.kinds import paper_goodput_cost as pg
    return pg.resolve_all(pg.Params(tasks=TASKS, selectors=["flowmaker"]))[0]


def _sequence(selector: str, load: float, placement: str = "own"):
    from experiments.kinds._paper_plan import PlanKey, deploy_sequence
    seq, rows = deploy_sequence(_problems(), PlanKey("compute", "current", selector, load, (), placement),
                                time_limit_s=30)
    return seq, rows


def _final_busy(seq) -> dict[int, float]:
    """Summed planned utilisation per GPU of the cluster the sequence leaves (section 9's busy_g)."""
    last_p, last_plan = seq[-1]
    busy = gpu_busy(last_p.cluster)
    if last_plan is not None and last_plan.deployment is not None:
        for iid, add in last_plan.deployment.reuse:
            for g in next(i.gpus for i in last_p.cluster.instances if i.id == iid):
                busy[g] += add
        for inst in last_plan.deployment.instances:
            for g in inst.gpus:
                busy[g] += inst.utilization
    return busy


def test_langchain_spec_placement_keeps_every_gpu_within_its_compute():
    own, _ = _sequence("langchain", 100)
    fair, rows = _sequence("langchain", 100, "spec")
    assert max(_final_busy(own).values()) > 1.0 + 1e-9            # its own packing overloads a GPU
    assert max(_final_busy(fair).values()) <= 1.0 + 1e-9          # FlowMaker's rule never does
    placed = [r for r in rows if r["placed"]]
    assert placed and all(r["placement"] == "spec" for r in rows)
    for _, plan in fair:                                           # same model, config and sizing rule
        if plan is not None and plan.deployment is not None:
            assert {i.model for i in plan.deployment.instances} <= {"llama-3.1-8b"}
            assert plan.deployment.rule == "langchain+spec"


def test_routellm_spec_placement_respects_section_9():
    fair, _ = _sequence("routellm:balanced", 100, "spec")
    assert max(_final_busy(fair).values()) <= 1.0 + 1e-9


@pytest.mark.parametrize("load", [25, 100])
def test_routellm_paper_is_one_pool_of_the_papers_size_whatever_the_load(load):
    seq, rows = _sequence("routellm:paper", load)
    first = seq[0][1].deployment
    assert {i.model for i in first.instances} == {"qwen2.5-14b"} and len(first.instances) == 6
    gb = sum(r["gb_new"] for r in rows)
    assert 206 <= gb <= 235                                         # the paper's 206-235 GB
    assert all(r["placed"] for r in rows) and sum(r["instances_new"] for r in rows) == 6
    pool = {i.id for i in first.instances}
    for _, plan in seq[1:]:                                         # later tasks spread over the pool
        dep = plan.deployment
        assert not dep.instances and {iid for iid, _ in dep.reuse} == pool
        shares = [r.share for st in dep.stages for r in st.routes]
        assert shares == pytest.approx([1 / 6] * 6 * len(dep.stages))
