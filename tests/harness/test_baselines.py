"""The baselines' documented rules (docs/baselines.md), on the real seven tasks."""
from __future__ import annotations

import functools

import pytest

from selector.deploy import deploy_task, with_cluster
from solvers.registry import get_solver

TASKS = ["code-completion", "chat", "rag-qa", "code-review", "summarization", "math-reasoning", "text-to-sql"]


@functools.lru_cache(maxsize=1)
def _problems():
    from selector.clusterfile import load_cluster_file
    from selector.resolve import load_catalog, resolve_task
    from selector.taskspec import CONFIGS
    cluster, gpu = load_cluster_file(CONFIGS / "clusters" / "a6000x8.yaml")
    cat = load_catalog()
    return [resolve_task(t, catalog=cat, cluster=cluster, gpu=gpu) for t in TASKS]


def _deploy(solver, scale: float = 1.0):
    """Deploy the seven tasks in sequence on 8x A6000, at ``scale`` x their arrival rates."""
    from selector.problem import parse_problem
    problems = _problems()
    if scale != 1.0:
        problems = [parse_problem({**p.to_dict(), "task": {**p.task.model_dump(), "arrival_rate_rps":
                                                           p.task.arrival_rate_rps * scale}}) for p in problems]
    cluster, out = problems[0].cluster, []
    for p in problems:
        p = with_cluster(p, cluster)
        plan, cluster = deploy_task(p, solver, time_limit_s=30)
        out.append((p, plan, plan.deployment))
    return out, cluster


def test_langchain_fixed_workflow_model_config_no_reuse_packed():
    seq, cluster = _deploy(get_solver("langchain"))
    # at the tight SLOs of the code tasks llama-3.1-8b needs many replicas (docs/resolve.md,
    # capacity), so the 8 A6000 fill before the last tasks: those are left unplaced, by placement
    assert all(dep is not None for _, _, dep in seq[:2])
    for p, plan, dep in seq:
        if dep is None:         # unplaced; the reason may name latency first (its choice misses the SLO tail)
            assert not plan.solved and "placement" in plan.extra["unplaced_reason"]
            continue
        assert dep.rule == "langchain"
        assert dep.workflow == next(w.name for w in p.workflows if len(w.stages) > 1)
        assert {i.model for i in dep.instances} == {"llama-3.1-8b"}   # most accurate <= 8.5B
        assert all((i.tp, i.pp) == (1, 1) for i in dep.instances)
        new_ids = {i.id for i in dep.instances}
        assert all(set(r.instance_ids) <= new_ids for r in dep.stages)       # never reuses
    # packing: GPUs fill in id order, two 19.8 GB instances per 48 GB GPU
    gpus = [i.gpus[0] for _, _, d in seq if d is not None for i in d.instances]
    assert gpus == sorted(gpus) and max(gpus.count(g) for g in set(gpus)) == 2
    assert len(cluster.instances) == len(gpus) == 16


def test_langchain_registry_face_is_spec_valid_or_flagged():
    from selector.verify import verify_plan
    for p, plan, _ in _deploy(get_solver("langchain"))[0]:
        if plan.solved:            # its own choice, valid under the spec
            assert not verify_plan(p, plan)
            assert plan.workflow == plan.deployment.workflow
        else:                      # its own choice breaks the spec: said, never replaced
            assert plan.extra["spec_violation"] and plan.extra["spec_violation"] in plan.reason


@pytest.mark.parametrize("setting, share", [("max-quality", 1.0), ("balanced", 0.65), ("min-cost", 0.35)])
def test_routellm_deploys_strong_and_weak_and_shares_them(setting, share):
    # at half the rates more tasks fit the 8 A6000, so the weak pool has tasks to be shared by
    seq, _ = _deploy(get_solver("routellm", setting=setting), scale=0.5)
    assert sum(d is not None for _, _, d in seq) >= 3
    weak_ids = set()
    for p, plan, dep in seq:
        if dep is None:
            continue
        assert dep.workflow == p.workflows[0].name and dep.rule == f"routellm/{setting}"
        for r in dep.stages:
            if share == 1.0:              # max-quality: no weak route, no weak instance
                (strong,) = r.routes
                assert strong.share == pytest.approx(1.0)
                continue
            weak, strong = r.routes       # the easiest requests take the weak route first
            assert weak.share == pytest.approx(1 - share) and strong.share == pytest.approx(share)
            assert weak.instances, "every stage has a weak route"
            weak_ids.update(weak.instances)
    if share < 1.0:
        assert len(weak_ids) < sum(d is not None for _, _, d in seq)   # the weak pool is shared across tasks
    models = {i.model for _, _, d in seq if d is not None for i in d.instances}
    assert models <= {"qwen2.5-14b", "qwen2.5-7b"} and (share < 1.0 or models == {"qwen2.5-14b"})


@pytest.mark.parametrize("setting", ["max-quality", "balanced", "min-cost"])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_routellm_sized_to_the_load_it_routes(setting, scale):
    """Issue 17 item 4: replicas per model from its routed share, none above capacity, none idle."""
    import math

    from selector.deploy import with_cluster as on
    from selector.problem import parse_problem
    problems = []
    for p in _problems():
        d = p.to_dict()
        d["task"]["arrival_rate_rps"] *= scale
        problems.append(parse_problem(d))
    cluster, solver = problems[0].cluster, get_solver("routellm", setting=setting)
    for p in problems:
        p = on(p, cluster)
        plan, cluster = deploy_task(p, solver, time_limit_s=30)
        dep = plan.deployment
        if dep is None:
            continue
        cap = {(r.stage, r.model): r.capacity_rps for r in p.perf if r.workflow == dep.workflow and (r.tp, r.pp) == (1, 1)}
        model = {i.id: i.model for i in dep.instances}
        for st in dep.stages:
            for route in st.routes:
                assert route.share > 0 and route.instances          # every route gets traffic
                new = [i for i in route.instances if i in model]
                if new:                                              # replicas = ceil(share * load / capacity)
                    load = route.share * p.task.arrival_rate_rps * st.calls
                    assert len(new) == max(1, math.ceil(load / cap[(st.stage, model[new[0]])] - 1e-9))
        assert all(i.utilization <= 1 + 1e-9 for i in dep.instances)
    assert all(i.utilization <= 1 + 1e-9 for i in cluster.instances)


def test_murakkab_fixed_workflow_and_offline_reuse():
    peak, _ = _deploy(get_solver("murakkab"))
    avg, _ = _deploy(get_solver("murakkab", reuse_load="average"))
    for p, plan, dep in peak:
        assert dep.workflow == next(w.name for w in p.workflows if len(w.stages) > 1)
    reused = lambda seq: sum(1 for _, plan, _ in seq for s in plan.stages if s.reuse)  # noqa: E731
    assert reused(avg) >= reused(peak)


def test_flowmaker_noreuse_never_reuses():
    seq, _ = _deploy(get_solver("flowmaker-noreuse"))
    assert all(s.reuse is None for _, plan, _ in seq for s in plan.stages)
    fm, _ = _deploy(get_solver("flowmaker"))
    assert any(s.reuse for _, plan, _ in fm for s in plan.stages)


def test_langchain_paper_setting_one_replica_per_stage():
    """Issue 17 item 7: LangChain as the paper deployed it, one replica per stage."""
    seq, _ = _deploy(get_solver("langchain", setting="paper"))
    default, _ = _deploy(get_solver("langchain"))
    for (p, plan, dep), (_, _, dflt) in zip(seq, default):
        if dep is None or dflt is None:          # left unplaced on the full cluster (see above)
            continue
        assert dep.rule == "langchain/paper" and dep.workflow == dflt.workflow
        assert len(dep.instances) == len(dep.stages)                       # one replica per stage
        assert {i.model for i in dep.instances} == {i.model for i in dflt.instances}
        if len(dflt.instances) > len(dflt.stages):                         # the spec would size more
            assert not plan.solved and plan.extra["spec_violation"].startswith("capacity")
    with pytest.raises(KeyError, match="known: default, paper"):
        get_solver("langchain", setting="nope")
