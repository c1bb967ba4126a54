"""Ray runtime on a local Ray instance: engine schedulers and engines in actors give the same
outputs as the in-process simulation (experiment cells as Ray tasks: tests/experiments/test_executor.py)."""
from __future__ import annotations

import functools

import numpy as np
import pytest


@pytest.fixture(scope="module")
def ray_local():
    from orchestrator.runtime.ray_runtime import init_ray
    ray = init_ray(num_cpus=2)
    yield ray
    ray.shutdown()


def test_engines_in_actors_match_simulation(ray_local):
    from orchestrator import load_app, simulate
    from orchestrator.engines.factory import build_instances, load_engine_spec
    from orchestrator.runtime.ray_runtime import run_ray
    app = load_app("advanced_rag")
    cfgs = app.query_configs(2, np.random.default_rng(0))
    builders = {n: functools.partial(build_instances, load_engine_spec(b.spec), n_instances=b.instances)
                for n, b in app.engines.items()}
    sim = simulate(app.template(), cfgs, [0.0, 0.05], app.build_engines(), scheme="teola", seed=2)
    rep = run_ray(app.template(), cfgs, [0.0, 0.05], builders=builders, scheme="teola", seed=2,
                  time_scale=0.02, timeout_s=120)
    assert not rep.failed and [r.outputs for r in rep.results] == [r.outputs for r in sim]


@pytest.mark.slow
def test_real_engines_in_actors_same_answers(ray_local, tmp_path):
    from experiments.run import main
    import pandas as pd
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("experiment: r\nkind: teola_real_cpu\nparams:\n  apps: [advanced_rag]\n  n_queries: 2\n"
                   "  answer_tokens: 6\n  repeats: 1\n  rates_rps: {advanced_rag: [20]}\n  schemes: [teola, llamadist-po]\n  runtime: ray\n")
    assert main([str(cfg), "--results", str(tmp_path / "res"), "--no-progress"]) == 0
    (run_dir,) = (tmp_path / "res" / "r").iterdir()
    assert pd.read_parquet(run_dir / "summary.parquet")["same_answers_as_teola"].all()


def _where() -> str:
    import orchestrator
    return orchestrator.__file__


def _broken_builder() -> list:
    raise ValueError("boom from inside the worker")


def test_code_ships_with_the_runtime_env_not_a_pythonpath(ray_local):
    from orchestrator.runtime.ray_runtime import runtime_env
    from profiler.catalog import repo_root
    REPO_ROOT = str(repo_root())
    env = runtime_env()
    assert env["working_dir"] == REPO_ROOT and ".venv" in env["excludes"] and "results" in env["excludes"]
    assert "PYTHONPATH" not in env["env_vars"]
    where = ray_local.get(ray_local.remote(_where).remote())
    assert "working_dir_files" in where and not where.startswith(REPO_ROOT)     # the uploaded copy


def test_an_actor_that_cannot_build_its_engines_says_why(ray_local):
    from orchestrator import load_app
    from orchestrator.runtime.ray_runtime import run_ray
    app = load_app("naive_rag")
    builders = {n: _broken_builder for n in app.engines}
    with pytest.raises(RuntimeError, match="boom from inside the worker"):
        run_ray(app.template(), app.query_configs(1, np.random.default_rng(0)), [0.0], builders=builders,
                scheme="teola", timeout_s=60)


def test_gpu_engines_request_gpus():
    from orchestrator.runtime.ray_runtime import actor_options
    assert actor_options()["num_gpus"] == 0 and actor_options(2)["num_gpus"] == 2
