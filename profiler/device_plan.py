"""The GPU check's plan: architectures, grids and analytic predictions, precomputed as JSON.

The check (experiments/scripts/device_check.py) runs where only PyTorch is installed, so it
cannot load the YAML catalog or the pydantic analytic model. `python -m profiler
device-plan` writes everything it needs to experiments/scripts/device_check_plan.json, and
tests/profiler fail when the stored plan differs from a fresh one (regenerate after changing
the catalog or the calibration). Mode "gpu": two real architectures in bf16 on an H200;
mode "tiny": two tiny ones in fp32 on the CPU (the check's own test).
"""

from __future__ import annotations

import json
from pathlib import Path

from profiler.analytic import AnalyticModel
from profiler.catalog import repo_root

PLAN_PATH = repo_root() / "experiments" / "scripts" / "device_check_plan.json"
MODES = {
    "gpu": {"gpu": "h200", "dtype": "bf16", "device": "cuda",
            "models": ["llama-3.2-1b", "qwen2.5-7b"],
            "batches": [1, 8, 32], "prompt_tokens": [128, 512, 2048], "output_tokens": [128],
            "warmup": 2, "repeats": 5, "decode_steps": 16, "min_time_s": 0.0},
    "tiny": {"gpu": "cpu", "dtype": "fp32", "device": "cpu",
             "models": ["tiny-llama", "tiny-mixtral"],
             "batches": [1, 4], "prompt_tokens": [32, 128], "output_tokens": [16],
             "warmup": 1, "repeats": 3, "decode_steps": 4, "min_time_s": 0.0},
}
ARCH_FIELDS = ("name", "family", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab",
               "experts", "experts_per_token", "tie_embeddings")
PREDICTED = ("ttft_s", "tpot_s", "mem_gb")


def build_plan(am: AnalyticModel | None = None) -> dict:
    """The plan as a JSON-ready dict (predictions rounded to 9 significant digits)."""
    from profiler.measured import all_gpus, all_models  # noqa: PLC0415
    models, gpus = all_models(), all_gpus()
    out: dict = {"generated_by": "python -m profiler device-plan", "modes": {}}
    for mode, m in MODES.items():
        db = 4 if m["dtype"] == "fp32" else 2
        model = am or AnalyticModel(dtype_bytes=db)
        if model.dtype_bytes != db:
            model = AnalyticModel(calibration=model.calibration, dtype_bytes=db)
        gpu = gpus[m["gpu"]]
        preds = []
        for name in m["models"]:
            for b in m["batches"]:
                for p in m["prompt_tokens"]:
                    for o in m["output_tokens"]:
                        pr = model.predict(models[name], gpu, tp=1, pp=1, batch=b, prompt_tokens=p,
                                           output_tokens=o)
                        preds.append({"model": name, "batch": b, "prompt_tokens": p, "output_tokens": o,
                                      **{k: float(f"{getattr(pr, k):.9g}") for k in PREDICTED}})
        out["modes"][mode] = {**m, "calibration": model.calibration.for_gpu(gpu.name).source,
                              "archs": {n: {k: getattr(models[n], k) for k in ARCH_FIELDS}
                                        for n in m["models"]},
                              "predictions": preds}
    return out


def write_plan(path: Path = PLAN_PATH) -> dict:
    plan = build_plan()
    Path(path).write_text(json.dumps(plan, indent=1) + "\n", encoding="utf-8")
    return plan
