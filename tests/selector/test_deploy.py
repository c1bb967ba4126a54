"""Sequential deployment (spec section 8)."""
from __future__ import annotations

import pytest

from selector.deploy import deploy_sequence, deploy_task
from selector.errors import ProblemError
from selector.problem import Cluster
from solvers.registry import get_solver
from tests.randprob import random_problem


def test_deploy_task_adds_instances_memory_and_load() -> None:
    solver = get_solver("exhaustive")
    for seed in range(40):
        p = random_problem(seed)
        plan, cluster = deploy_task(p, solver)
        if not plan.solved:
            assert cluster == p.cluster
            continue
        before = {g.id: g.used_gb for g in p.cluster.gpus}
        after = {g.id: g.used_gb for g in cluster.gpus}
        assert sum(after.values()) - sum(before.values()) == pytest.approx(plan.new_mem_gb, rel=1e-9, abs=1e-9)
        new = cluster.instances[len(p.cluster.instances):]
        assert [i.id for i in new] == [f"{p.task.name}/{s.stage}/{r}" for s in plan.stages if s.reuse is None
                                       for r in range(s.replicas)]
        for s in plan.stages:
            if s.reuse:
                old = next(i for i in p.cluster.instances if i.id == s.reuse)
                now = next(i for i in cluster.instances if i.id == s.reuse)
                assert now.utilization > old.utilization


def test_sequence_sees_previous_tasks() -> None:
    p = random_problem(5)
    empty = Cluster(gpus=p.cluster.gpus, instances=())
    empty = Cluster(gpus=tuple(g.model_copy(update={"used_gb": 0.0}) for g in p.cluster.gpus), instances=())
    tasks = [p.model_copy(update={"task": p.task.model_copy(update={"name": f"t{i}"})}) for i in range(3)]
    plans, cluster = deploy_sequence(tasks, empty, get_solver("exhaustive"))
    placed = [pl for pl in plans if pl.solved]
    assert len(cluster.instances) == sum(s.replicas for pl in placed for s in pl.stages)
    if len(placed) >= 2 and placed[0].new_mem_gb:
        assert plans[1].to_dict() != plans[0].to_dict()


def test_apply_infeasible_plan_is_identity() -> None:
    p = random_problem(3)
    data = p.to_dict()
    data["task"]["accuracy_slo"] = 99.0
    from selector.problem import parse_problem
    q = parse_problem(data)
    plan, cluster = deploy_task(q, get_solver("exhaustive"))
    assert plan.status == "infeasible" and plan.deployment is None
    assert cluster == q.cluster


def test_sequence_rejects_duplicate_task_names() -> None:
    p = random_problem(5)
    with pytest.raises(ProblemError, match=r"tasks\[1\]\.task\.name: duplicate task name"):
        deploy_sequence([p, p], p.cluster, get_solver("flowmaker"))


def test_apply_refuses_an_existing_instance_id() -> None:
    for seed in range(40):
        p = random_problem(seed)
        plan, cluster = deploy_task(p, get_solver("exhaustive"))
        if plan.deployment is not None and plan.deployment.instances:
            with pytest.raises(ProblemError, match="already exists"):
                plan.deployment.apply(cluster)
            return
    pytest.fail("no random problem deployed a new instance")


def test_later_tasks_are_not_checked_against_earlier_tasks_instances() -> None:
    """Section 8 as section 11 states it: every task is checked against the input cluster; the
    second task does not list the first one's model, yet it is deployed (it cannot reuse that
    instance), as the joint ``sequential`` greedy deploys it."""
    from selector.joint import make_task_set
    from solvers.joint_registry import get_joint_solver
    from tests.solvers.test_joint import one_stage
    cluster = Cluster.model_validate({"gpus": [{"id": i, "mem_gb": 48.0, "used_gb": 0.0} for i in range(2)]})
    tasks = [one_stage("a", 1, 20.0), one_stage("b", 1, 20.0)]
    plans, final = deploy_sequence(tasks, cluster, get_solver("exhaustive"))
    assert [p.status for p in plans] == ["optimal", "optimal"]
    assert [i.model for i in final.instances] == ["a-m", "b-m"]
    joint = get_joint_solver("sequential").select(make_task_set(cluster, tasks))
    assert joint.cluster == final


def test_sequence_checks_every_task_before_solving_any() -> None:
    from tests.solvers.test_joint import one_stage
    cluster = Cluster.model_validate({"gpus": [{"id": 0, "mem_gb": 48.0, "used_gb": 0.0}]})
    bad = one_stage("b", 1, 20.0)
    bad["perf"][0]["model"] = "nope"
    with pytest.raises(ProblemError, match="perf"):
        deploy_sequence([one_stage("a", 1, 20.0), bad], cluster, get_solver("exhaustive"))
