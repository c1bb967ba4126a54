"""`trtllm` backend: TensorRT-LLM's LLM API at a given tensor/pipeline parallel size.

For users with multi-GPU machines and the checkpoints: it loads `ModelSpec.hf_id` (a local
Hugging Face checkpoint or a cached id), so unlike the torch backend it needs real weights.
TensorRT-LLM has no wheel for the development machines, so it is imported on first use and
a missing install is one line (`BackendUnavailable`, exit 2 from the CLI). Not exercised in
CI: nothing here is simulated, every number comes from the engine.

Per point: TTFT = wall time of `generate` with max_tokens=1; TPOT = (wall time with
max_tokens=output - TTFT) / (output - 1); both medians of `repeats`; memory = NVML device
memory in use on the tp*pp GPUs (weights, KV pool and runtime together; the engine's KV pool
is sized by its own `free_gpu_memory_fraction`, so kv_gb is the request's share only).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from typing import Iterable, Iterator

from profiler.catalog import ModelSpec

GB = 1e9


class BackendUnavailable(RuntimeError):
    """The backend's library is not installed here."""


def require() -> None:
    """Raise BackendUnavailable (one line) when TensorRT-LLM cannot be imported."""
    _import()


def _import():
    try:
        import tensorrt_llm  # noqa: PLC0415
        from tensorrt_llm import LLM, SamplingParams  # noqa: PLC0415
    except ImportError as exc:
        raise BackendUnavailable(
            f"backend trtllm needs TensorRT-LLM (pip install tensorrt_llm on a CUDA Linux machine): "
            f"{exc}") from None
    return tensorrt_llm, LLM, SamplingParams


def _nvml_used_gb(count: int) -> float:
    import pynvml  # noqa: PLC0415 - nvidia-ml-py
    pynvml.nvmlInit()
    return sum(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used
               for i in range(count)) / GB


def measure_grid(model: ModelSpec, *, gpu_name: str, tp: int, pp: int,
                 points: Iterable[tuple[int, int, int]], dtype: str = "bf16",
                 repeats: int = 3) -> Iterator[dict]:
    """Rows (profiler.table columns plus `layers`) for (batch, prompt, output) points."""
    points = list(points)
    if not points:
        return
    trt, LLM, SamplingParams = _import()
    import torch  # noqa: PLC0415 - TensorRT-LLM depends on it
    llm = LLM(model=model.hf_id, tensor_parallel_size=tp, pipeline_parallel_size=pp,
              dtype={"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype])
    device_name = torch.cuda.get_device_name(0)
    versions = f"tensorrt_llm {trt.__version__}; torch {torch.__version__}; cuda {torch.version.cuda}"
    try:
        import pynvml  # noqa: PLC0415
        pynvml.nvmlInit()
        driver = str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - provenance only
        driver = ""
    kv_per_token = model.kv_bytes_per_token(2 if dtype != "fp32" else 4) / GB
    for batch, prompt, output in points:
        prompts = [[(17 * i + j) % model.vocab for j in range(prompt)] for i in range(batch)]

        def wall(max_tokens: int) -> float:
            sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            t = time.perf_counter()
            llm.generate(prompts, sp, use_tqdm=False)
            return time.perf_counter() - t

        wall(2)  # warm-up
        ttft = statistics.median(wall(1) for _ in range(repeats))
        full = statistics.median(wall(output) for _ in range(repeats)) if output > 1 else ttft
        tpot = max(0.0, full - ttft) / max(1, output - 1)
        mem = _nvml_used_gb(tp * pp)
        weights = model.weight_bytes(2 if dtype != "fp32" else 4) / GB
        kv = batch * (prompt + output) * kv_per_token
        yield {"model": model.name, "gpu": gpu_name, "tp": tp, "pp": pp, "batch": batch,
               "prompt_tokens": prompt, "output_tokens": output, "ttft_s": ttft, "tpot_s": tpot,
               "latency_s": ttft + (output - 1) * tpot, "mem_gb": mem, "weights_gb": weights,
               "kv_gb": kv, "activation_gb": max(0.0, mem - weights - kv), "backend": "trtllm",
               "device_name": device_name, "driver": driver, "library_versions": versions,
               "dtype": dtype, "layers": model.layers,
               "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
