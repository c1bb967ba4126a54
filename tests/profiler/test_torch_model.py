"""The plain-torch decoder: KV-cache correctness, shapes, and lazy imports."""

import subprocess
import sys

import pytest
import torch

from profiler.catalog import repo_root
from profiler.fingerprint import extrapolate, extrapolate_row
from profiler.measured import all_models
from profiler.torch_model import Arch, Decoder, KVCache


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen", "tiny-mixtral"])
def test_decode_with_cache_matches_prefill(name):
    arch = Arch.from_mapping(all_models()[name].model_dump())
    torch.manual_seed(0)
    model = Decoder(arch, dtype=torch.float32, max_positions=64).eval()
    tokens = torch.randint(0, arch.vocab, (2, 9))
    with torch.inference_mode():
        whole = model(tokens, 0, KVCache(arch, 2, 16, device="cpu", dtype=torch.float32))
        cache = KVCache(arch, 2, 16, device="cpu", dtype=torch.float32)
        model(tokens[:, :8], 0, cache)
        step = model(tokens[:, 8:], 8, cache)
    assert torch.equal(whole, step)
    params = sum(p.numel() for p in model.parameters())
    assert params == pytest.approx(all_models()[name].total_params_b * 1e9, rel=0.01)


def test_arch_from_catalog():
    a = Arch.from_mapping(all_models()["qwen2.5-7b"].model_dump())
    assert a.qkv_bias and a.layers == 28 and a.with_layers(1).layers == 1
    assert not Arch.from_mapping(all_models()["llama-3.2-1b"].model_dump()).qkv_bias


def test_fingerprint_exact_on_linear_costs():
    base = {"model": "m", "gpu": "g", "tp": 1, "pp": 1, "batch": 1, "prompt_tokens": 8, "output_tokens": 5}

    def row(layers):  # fixed 1.0 + 0.5 per layer, memory 2 GB + 1 GB per layer
        return {**base, "layers": layers, "ttft_s": 1 + 0.5 * layers, "tpot_s": 0.1 + 0.01 * layers,
                "mem_gb": 2.5 + 0.9 * layers, "weights_gb": 1 + 0.8 * layers, "kv_gb": 0.1 * layers,
                "activation_gb": 1.5}
    out = extrapolate([row(1), row(2)], {"m": 10})[0]
    assert out["ttft_s"] == pytest.approx(6.0) and out["tpot_s"] == pytest.approx(0.2)
    assert out["mem_gb"] == pytest.approx(2.5 + 9) and out["activation_gb"] == pytest.approx(1.5)
    assert out["latency_s"] == pytest.approx(6.0 + 4 * 0.2) and out["backend"] == "fingerprint"
    with pytest.raises(ValueError, match="layers"):
        extrapolate_row(row(1), row(3), 10)


def test_import_profiler_is_light():
    code = ("import sys, profiler, profiler.fingerprint\n"
            "bad = [m for m in ('torch', 'pydantic', 'pandas', 'yaml') if m in sys.modules]\n"
            "assert not bad, bad\nfrom profiler import AnalyticModel\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=repo_root(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
