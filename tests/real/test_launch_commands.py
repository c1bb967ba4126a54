"""The server launchers' command lines (vLLM, TensorRT-LLM, transformers) as text: the one engine
configuration, per-instance memory shares from a plan, per-instance extra arguments. Neither vLLM
nor TensorRT-LLM is installed here; nothing is started."""
from __future__ import annotations

import pytest

from harness.servers.launcher import Fleet, ServerSpec, build_command, config_files
from harness.servers.deploy import memory_share, specs_for_instances
from harness.servers.launcher import server_env
from profiler.engine import EngineConfig
from profiler.steps import gpu_spec, step_model
from selector.deployment import InstanceSpec

ENGINE = EngineConfig(max_num_seqs=128, max_num_batched_tokens=2048, block_size=32)


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_vllm_renders_the_engine_configuration():
    v = ServerSpec(name="a", backend="vllm", model="/m", port=9000, tp=2, pp=2, gpus=(4, 5, 6, 7), engine=ENGINE)
    cmd = build_command(v)
    assert cmd[1:3] == ["serve", "/m"] and server_env(v)["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert (flag(cmd, "--tensor-parallel-size"), flag(cmd, "--pipeline-parallel-size")) == ("2", "2")
    assert (flag(cmd, "--max-num-seqs"), flag(cmd, "--max-num-batched-tokens"), flag(cmd, "--block-size")) == \
        ("128", "2048", "32")
    assert flag(cmd, "--gpu-memory-utilization") == "0.9"          # EngineConfig's default
    assert "--no-enable-prefix-caching" in cmd and "--enable-prefix-caching" not in cmd   # off for load runs
    assert "--enable-chunked-prefill" in cmd          # vllm-v1, the default, always chunks (issue 23)
    v0 = build_command(v.model_copy(update={"engine": ENGINE.model_copy(update={"scheduler": "vllm"})}))
    assert "--no-enable-chunked-prefill" in v0 and "--long-prefill-token-threshold" not in v0
    cap = build_command(v.model_copy(update={"engine": ENGINE.model_copy(update={"long_prefill_token_threshold": 256})}))
    assert flag(cap, "--long-prefill-token-threshold") == "256"
    on = build_command(v.model_copy(update={"engine": ENGINE.model_copy(update={"prefix_caching": True,
                                                                                  "kv_capacity_tokens": 1000})}))
    assert "--enable-prefix-caching" in on and flag(on, "--num-gpu-blocks-override") == "32"
    sar = build_command(v.model_copy(update={"engine": EngineConfig(scheduler="sarathi", chunk_size=512)}))
    assert "--enable-chunked-prefill" in sar and flag(sar, "--max-num-batched-tokens") == "512"
    with pytest.raises(ValueError, match="padded"):
        build_command(v.model_copy(update={"engine": EngineConfig(scheduler="padded")}))


def test_trtllm_renders_flags_and_its_kv_cache_config(tmp_path):
    t = ServerSpec(name="b", backend="trtllm", model="/m", port=9001, tp=2, gpus=(0, 1), engine=ENGINE,
                   kv_free_fraction=0.42, kv_max_tokens=50000)
    cmd = build_command(t, config_dir=tmp_path)
    assert cmd[1] == "/m" and flag(cmd, "--backend") == "pytorch"
    assert (flag(cmd, "--tp_size"), flag(cmd, "--pp_size")) == ("2", "1")
    assert (flag(cmd, "--max_batch_size"), flag(cmd, "--max_num_tokens")) == ("128", "2048")
    assert flag(cmd, "--kv_cache_free_gpu_memory_fraction") == "0.42"
    assert flag(cmd, "--config") == str(tmp_path / "b.trtllm.yaml")
    import yaml
    kv = yaml.safe_load(config_files(t)["b.trtllm.yaml"])["kv_cache_config"]
    assert kv == {"enable_block_reuse": False, "tokens_per_block": 32, "free_gpu_memory_fraction": 0.42,
                  "max_tokens": 50000}


def test_transformers_serve_batches_one_request_at_a_time_unless_asked():
    one = build_command(ServerSpec(name="c", model="/m", port=9002))          # its default: max_num_seqs 1
    assert one[1:3] == ["serve", "/m"] and flag(one, "--device") == "cpu" and "--continuous-batching" not in one
    assert ServerSpec(name="c", model="/m", port=9002).engine_config.max_num_seqs == 1
    assert ServerSpec(name="c", backend="vllm", model="/m", port=9002).engine_config == EngineConfig()
    cb = build_command(ServerSpec(name="c", model="/m", port=9002, gpus=(0,),
                                  engine=ENGINE.model_copy(update={"kv_capacity_tokens": 640})))
    assert "--continuous-batching" in cb and flag(cb, "--device") == "cuda"
    assert (flag(cb, "--cb-block-size"), flag(cb, "--cb-max-batch-tokens"), flag(cb, "--cb-num-blocks")) == \
        ("32", "2048", "20")
    with pytest.raises(ValueError, match="tensor/pipeline"):
        build_command(ServerSpec(name="d", model="/m", port=9003, tp=2))
    with pytest.raises(ValueError, match="prefix"):
        build_command(ServerSpec(name="d", model="/m", port=9003, engine=EngineConfig(prefix_caching=True)))
    with pytest.raises(ValueError, match="GPUs given"):
        build_command(ServerSpec(name="e", backend="vllm", model="/m", port=9004, tp=2, gpus=(0,)))
    with pytest.raises(ValueError, match="duplicate"):
        Fleet([ServerSpec(name="x", model="/m", port=9005), ServerSpec(name="x", model="/m", port=9006)])


def _colocated():
    """Two llama-3.1-8b instances on A6000 0 (22 + 24 GB of its 48), one TP2 on 1-2."""
    return [InstanceSpec("t/a/0", "llama-3.1-8b", 1, 1, (0,), 22.0), InstanceSpec("t/b/0", "llama-3.1-8b", 1, 1, (0,), 24.0),
            InstanceSpec("t/c/0", "llama-3.1-8b", 2, 1, (1, 2), 40.0)]


def test_colocated_vllm_instances_get_their_planned_share_of_each_gpu():
    specs = specs_for_instances(_colocated(), backend="vllm", gpu="a6000", engine=ENGINE,
                                instance_args={"*": ["--seed", "0"], "t/b/0": ["--max-model-len", "4096"]})
    cap = gpu_spec("a6000").capacity_gb                       # 48 GiB = 51.5 GB
    util = {k: float(flag(build_command(s), "--gpu-memory-utilization")) for k, s in specs.items()}
    assert util == {"t/a/0": pytest.approx(22 / cap, abs=1e-3), "t/b/0": pytest.approx(24 / cap, abs=1e-3),
                    "t/c/0": pytest.approx(20 / cap, abs=1e-3)}          # 40 GB over 2 GPUs
    assert util["t/a/0"] + util["t/b/0"] < 0.9                # both fit where one default (0.9) would not
    assert all(util[k] <= s / cap for k, s in (("t/a/0", 22), ("t/b/0", 24)))   # rounded down
    assert specs["t/a/0"].model == "meta-llama/Llama-3.1-8B-Instruct"             # catalog hf_id by default
    assert specs["t/a/0"].extra_args == ("--seed", "0")
    assert specs["t/b/0"].extra_args == ("--seed", "0", "--max-model-len", "4096")
    with pytest.raises(KeyError, match="unknown instance"):
        specs_for_instances(_colocated(), instance_args={"nope": ["x"]})
    with pytest.raises(KeyError, match="no local checkpoint"):
        specs_for_instances(_colocated(), model_paths={"qwen2.5-3b": "/q"}, require_local=True)


def test_trtllm_fraction_is_of_the_memory_free_after_weights_and_earlier_instances():
    insts = _colocated()
    specs = specs_for_instances(insts, backend="trtllm", gpu="a6000", engine=ENGINE)
    a, b = specs["t/a/0"], specs["t/b/0"]
    step = step_model("llama-3.1-8b", "a6000", 1, 1)
    from profiler.engine import kv_capacity_tokens
    assert a.kv_max_tokens == kv_capacity_tokens(step, ENGINE, mem_gb=22.0)
    # the fraction of what is free gives the planned KV: f * free = kv (to the 0.001 it is rounded up)
    from profiler.memory import plan_memory
    free = plan_memory(step, "trtllm", gpu_capacity_gb=gpu_spec("a6000").capacity_gb, max_num_batched_tokens=2048,
                       max_num_seqs=128, free_gpu_memory_fraction=1.0).kv_gb
    assert a.kv_free_fraction * free == pytest.approx(a.kv_max_tokens * step.kv_gb_per_token, rel=0.01)
    # b starts after a on GPU 0: what is free is less by a's 22 GB, so b's fraction is larger
    kv_b = b.kv_max_tokens * step.kv_gb_per_token
    assert b.kv_free_fraction * (free - 22.0) == pytest.approx(kv_b, rel=0.01) and b.kv_free_fraction > kv_b / free
    with pytest.raises(ValueError, match="exceeds"):
        memory_share(InstanceSpec("x", "llama-3.1-8b", 1, 1, (0,), 60.0), backend="vllm", gpu=gpu_spec("a6000"))


def test_fleet_starts_servers_sharing_a_gpu_one_after_another(monkeypatch, tmp_path):
    from harness.servers import launcher
    events: list[tuple[str, str]] = []
    monkeypatch.setattr(launcher.ServerProcess, "start", lambda self: events.append(("start", self.spec.name)) or self)
    monkeypatch.setattr(launcher.ServerProcess, "wait_healthy",
                        lambda self, deadline: events.append(("healthy", self.spec.name)))
    monkeypatch.setattr(launcher.ServerProcess, "stop", lambda self, timeout_s=10.0: None)
    specs = specs_for_instances(_colocated(), backend="vllm", gpu="a6000", base_port=9100)
    Fleet(list(specs.values()), log_dir=tmp_path).start()
    a, b, c = (s.name for s in specs.values())
    assert events.index(("healthy", a)) < events.index(("start", b))      # b shares GPU 0 with a
    assert events.index(("start", c)) < events.index(("healthy", b))      # c shares nothing: not held back


def test_torch_server_runs_the_profilers_decoder_one_sequence_at_a_time():
    t = ServerSpec(name="t", backend="torch", model="/arch.json", port=9010, gpus=(0,), dtype="bfloat16")
    cmd = build_command(t)
    assert cmd[1].endswith("harness/servers/torchserve.py") and flag(cmd, "--arch") == "/arch.json"
    assert (flag(cmd, "--device"), flag(cmd, "--dtype")) == ("cuda", "bf16") and t.engine_config.max_num_seqs == 1
    with pytest.raises(ValueError, match="one sequence"):
        build_command(t.model_copy(update={"engine": EngineConfig(max_num_seqs=4)}))
