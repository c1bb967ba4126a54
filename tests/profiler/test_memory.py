"""Memory as the engines reserve it: the step model's memory terms and the vLLM / TensorRT-LLM
KV-cache rules of profiler/memory.py, checked against public vLLM memory logs."""

import json

import pytest

from profiler.analytic import AnalyticModel
from profiler.catalog import ModelSpec, load_gpus, load_models
from profiler.cli import main
from profiler.memory import plan_memory

MODELS, GPUS = load_models(), load_gpus()
AM = AnalyticModel()
GIB = 2**30 / 1e9

# vLLM V1 startup logs on one H100 (79.18 GiB), gpu_memory_utilization 0.9, max_model_len 16000:
# llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (weights, peak
# activation, KV cache, GiB). Assumed V1 serve defaults for >= 70 GiB GPUs: max_num_seqs 1024,
# max_num_batched_tokens 8192. Qwen3-0.6B set VLLM_SAMPLER_BYTES_PER_LOGIT; the others check it.
QWEN3 = dict(family="qwen3", heads=64, kv_heads=8, head_dim=128, vocab=151936, max_context=40960)
PUBLIC = [
    (ModelSpec(name="qwen3-0.6b", hf_id="Qwen/Qwen3-0.6B", layers=28, hidden=1024, ffn=3072,
               total_params_b=0.596, active_params_b=0.596, tie_embeddings=True,
               **{**QWEN3, "heads": 16}), 1.12, 5.56, 64.45),
    (MODELS["llama-3.1-8b"], 14.99, 4.76, 51.38),
    (ModelSpec(name="qwen3-32b", hf_id="Qwen/Qwen3-32B", layers=64, hidden=5120, ffn=25600,
               total_params_b=32.76, active_params_b=32.76, **QWEN3), 61.03, 5.64, 4.45),
]


def _sm(model="llama-2-70b", gpu="a6000", tp=4, pp=1):
    return AM.step_model(MODELS[model] if isinstance(model, str) else model, GPUS[gpu], tp, pp)


def test_memory_terms_add_up():
    sm = _sm(tp=2, pp=2)
    assert sm.gpus == 4 and sm.runtime_overhead_gb_per_gpu * 4 == pytest.approx(sm.runtime_overhead_gb)
    assert sm.activation_peak_gb(4096, 64) == pytest.approx(sm.workspace_gb(4096) + sm.logits_gb(64))
    assert sm.activation_gb(4096, 64) == pytest.approx(sm.activation_peak_gb(4096, 64) + sm.runtime_overhead_gb)
    assert sm.embedding_gb == pytest.approx(32000 * 8192 * 2 / 1e9)
    assert sm.logits_gb(10, 8.0) == pytest.approx(2 * sm.logits_gb(10))


@pytest.mark.parametrize("model, weights_gib, act_gib, kv_gib", PUBLIC, ids=[p[0].name for p in PUBLIC])
def test_vllm_rule_matches_public_logs(model, weights_gib, act_gib, kv_gib):
    plan = plan_memory(_sm(model, "h100-sxm", 1), "vllm", gpu_capacity_gb=79.18 * GIB,
                       max_num_batched_tokens=8192, max_num_seqs=1024)
    assert plan.weights_gb / GIB == pytest.approx(weights_gib, rel=0.01)
    assert plan.activation_gb / GIB == pytest.approx(act_gib, rel=0.05)
    # our runtime overhead (1 GB/GPU) also charges the CUDA context vLLM leaves outside: <= 0.9 GiB
    assert 0 <= kv_gib - plan.kv_gb / GIB <= 0.9
    assert plan.used_gb + plan.unused_gb == pytest.approx(plan.capacity_gb)


def test_trtllm_rule_fraction_of_free_and_replicated_embedding():
    sm = _sm(tp=4)
    kw = dict(gpu_capacity_gb=GPUS["a6000"].capacity_gb, max_num_batched_tokens=8192, max_num_seqs=256)
    rep = plan_memory(sm, "trtllm", **kw)
    par = plan_memory(sm, "trtllm", parallel_embedding=True, **kw)
    assert rep.weights_gb - par.weights_gb == pytest.approx(3 * sm.embedding_gb)
    free = rep.capacity_gb - rep.weights_gb - rep.activation_gb - rep.runtime_gb
    assert rep.kv_gb == pytest.approx(0.9 * free) and rep.unused_gb == pytest.approx(0.1 * free)
    half = plan_memory(sm, "trtllm", free_gpu_memory_fraction=0.5, **kw)
    assert half.kv_tokens < rep.kv_tokens < par.kv_tokens
    assert plan_memory(_sm(tp=1), "trtllm", **kw).kv_gb == 0.0  # 138 GB of weights on one GPU


def test_engines_differ_as_documented():
    sm = _sm("llama-3.1-8b", tp=1)
    kw = dict(gpu_capacity_gb=GPUS["a6000"].capacity_gb, max_num_batched_tokens=4096, max_num_seqs=256)
    vllm, trt = plan_memory(sm, "vllm", **kw), plan_memory(sm, "trtllm", **kw)
    # vLLM: sampler warm-up over 256 rows of a 128k vocabulary dominates the 4096-token forward
    assert vllm.activation_gb == pytest.approx(sm.logits_gb(256, 38.0))
    assert trt.activation_gb == pytest.approx(sm.workspace_gb(4096) + sm.logits_gb(256))
    assert vllm.kv_tokens == int(vllm.kv_gb / sm.kv_gb_per_token)
    with pytest.raises(ValueError, match="known: vllm, trtllm"):
        plan_memory(sm, "sglang", **kw)


def test_memory_command(capsys):
    argv = ["memory", "--model", "llama-2-13b", "--gpu", "a6000", "--tp", "2", "--engine", "trtllm"]
    assert main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "trtllm" and out["kv_tokens"] > 0
    assert main(argv + ["--fraction", "1.5"]) == 2
    assert "--fraction" in capsys.readouterr().err


def test_predict_takes_the_engines_weight_layout():
    """`predict(..., engine="trtllm")` (what `profiler validate --engine trtllm` scores against a
    TensorRT-LLM table) holds tp - 1 extra embedding copies, as plan_memory's TensorRT-LLM rule does;
    nothing else moves, and vLLM's default is unchanged."""
    kw = dict(batch=8, prompt_tokens=512, output_tokens=128)
    for model, tp, pp in (("llama-2-7b", 8, 1), ("llama-2-13b", 2, 2), ("llama-2-70b", 4, 2), ("llama-2-7b", 1, 4)):
        v = AM.predict(MODELS[model], GPUS["a6000"], tp=tp, pp=pp, **kw)
        t = AM.predict(MODELS[model], GPUS["a6000"], tp=tp, pp=pp, engine="trtllm", **kw)
        extra = (tp - 1) * _sm(model, tp=tp, pp=pp).embedding_gb
        assert t.mem_gb - v.mem_gb == pytest.approx(extra) and t.weights_gb - v.weights_gb == pytest.approx(extra)
        assert (t.tpot_s, t.ttft_s, t.kv_gb, t.activation_gb) == (v.tpot_s, v.ttft_s, v.kv_gb, v.activation_gb)
        plan = plan_memory(_sm(model, tp=tp, pp=pp), "trtllm", gpu_capacity_gb=48.0,
                           max_num_batched_tokens=4096, max_num_seqs=8)
        assert plan.weights_gb == pytest.approx(t.weights_gb)
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        AM.predict(MODELS["llama-2-7b"], GPUS["a6000"], tp=1, pp=1, engine="sglang", **kw)


def test_validate_scores_memory_with_the_measured_engine():
    import pandas as pd
    from profiler.validate import errors, predict_like
    from profiler.table import KEY
    row = dict(model="llama-2-7b", gpu="a6000", tp=8, pp=1, batch=1, prompt_tokens=512, output_tokens=64,
               dtype="bf16")
    p = AM.predict(MODELS["llama-2-7b"], GPUS["a6000"], tp=8, pp=1, batch=1, prompt_tokens=512,
                   output_tokens=64, engine="trtllm")
    measured = pd.DataFrame([{**row, "ttft_s": p.ttft_s, "tpot_s": p.tpot_s, "mem_gb": p.mem_gb}])
    assert errors(measured, predict_like(measured, MODELS, GPUS, engine="trtllm"))["mem_gb"].iloc[0] == pytest.approx(0)
    # scored with vLLM's layout the same table is off by the 7 missing embedding copies
    err = errors(measured, predict_like(measured, MODELS, GPUS))["mem_gb"].iloc[0]
    assert err == pytest.approx(100 * 7 * _sm("llama-2-7b", tp=8).embedding_gb / p.mem_gb)
    assert set(KEY) <= set(measured.columns)
