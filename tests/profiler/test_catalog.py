"""Catalog files load, agree with the architectures, and bad files fail with one clear line."""

from pathlib import Path

import pytest

from profiler.catalog import (
    CatalogError, load_accuracy, load_cluster, load_deploy_configs, load_gpus, load_models,
    repo_root, shared_data_dir,
)

INSTRUCT = ["llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-3b", "qwen2.5-7b",
            "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "mistral-7b-v0.3", "mixtral-8x7b"]


def test_models_complete_and_consistent():
    models = load_models()
    assert set(INSTRUCT + ["llama-2-7b", "llama-2-13b", "llama-2-70b"]) == set(models)
    for m in models.values():
        # published parameter counts match the architecture (Qwen's qkv biases: < 1%)
        assert m.arch_params() / 1e9 == pytest.approx(m.total_params_b, rel=0.03), m.name
        assert m.heads * m.head_dim >= m.hidden // 2
    mix = models["mixtral-8x7b"]
    assert (mix.experts, mix.experts_per_token, mix.total_params_b, mix.active_params_b) == (8, 2, 46.7, 12.9)
    assert models["llama-2-7b"].kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2
    assert models["llama-3.1-8b"].weight_bytes() == pytest.approx(16.06e9)


def test_accuracy_covers_instruct_models():
    acc = load_accuracy()
    assert set(INSTRUCT) == set(acc)
    assert acc["qwen2.5-72b"] == 38.21 and acc["llama-3.1-70b"] == 42.18
    assert all(0 < v < 100 for v in acc.values())


def test_gpus_and_configs():
    gpus = load_gpus()
    assert set(gpus) == {"a6000", "a40", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s"}
    assert gpus["a6000"].mem_gb == 48 and gpus["h200"].mem_gb == 141
    cfgs = load_deploy_configs()
    assert len(cfgs) == 10 and all(tp * pp <= 8 for tp, pp in cfgs)


def test_cluster():
    c = load_cluster(repo_root() / "configs/clusters/a6000x8.yaml")
    assert [g.id for g in c.gpus] == list(range(8))
    assert {g.gpu for g in c.gpus} == {"a6000"} and c.instances == []
    assert c.node_of(5) == "node0"


@pytest.mark.parametrize("text, needle", [
    ("models: [{name: x}]\n", "field 'hf_id'"),
    ("nothing: 1\n", "missing top-level field 'models'"),
    ("models: [\n", "malformed YAML at line 2, column 1"),
])
def test_bad_model_file(tmp_path: Path, text: str, needle: str):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(CatalogError) as exc:
        load_models(f)
    assert str(f) in str(exc.value) and needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_bad_accuracy_and_configs(tmp_path: Path):
    f = tmp_path / "a.yaml"
    f.write_text("scores: {a: high}\n")
    with pytest.raises(CatalogError, match="scores.a"):
        load_accuracy(f)
    f.write_text("deploy_configs: [{tp: 8, pp: 2}]\n")
    with pytest.raises(CatalogError, match="deploy_configs"):
        load_deploy_configs(f)
    with pytest.raises(CatalogError, match="cannot read"):
        load_gpus(tmp_path / "missing.yaml")


def test_shared_data_dir_env(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("FLOWMAKER_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    monkeypatch.setenv("FLOWMAKER_SHARED_DATA", str(tmp_path / "absent"))
    assert shared_data_dir() is None
