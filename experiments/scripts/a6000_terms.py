"""Where the a6000 step model's decode time and memory come from, term by term (issue 23, the
A6000 TensorRT-LLM targets; docs/profiler.md "A6000 TensorRT-LLM targets").

Prints, for Llama-2-7B/13B/70B at every TP x PP of configs/deploy_configs.yaml that fits on 48 GB
GPUs: the predicted decode step (ms) at batch 1 and 8 (context 1,024) split into its terms, each
with where its constant comes from (measured on the A6000 by MaverIQ, or transferred); what two
engine-level alternatives with a source would change (TensorRT-LLM's fitted synchronous step
time instead of vidur's 2024 vLLM fork's; a fused attention kernel's fixed cost at the serving
fit's estimate); and the memory of one static batch (8 x 512 + 128 tokens) under vLLM's and
TensorRT-LLM's weight layout, with the share of it that is the runtime overhead (1.0 GB per GPU,
an estimate). A printing script: nothing here is a measurement of an engine.

    PYTHONPATH=. python experiments/scripts/a6000_terms.py [--write DIR]

``--write DIR`` also writes each alternative as a whole calibration file, DIR/<name>.yaml, for
``python -m profiler validate --measured TABLE --engine trtllm --calibration DIR/<name>.yaml``
(scores it beside the default on a measured table, e.g. the held-back A6000 one).
"""
from __future__ import annotations

import sys
from pathlib import Path

from profiler.analytic import AnalyticModel
from profiler.calibration import (load_calibration, load_default_calibration, save_calibration,
                                  serving_calibration_path)
from profiler.catalog import load_deploy_configs, load_gpus, load_models

MODELS = ("llama-2-7b", "llama-2-13b", "llama-2-70b")
CONTEXT = 1024
SOURCES = {
    "gemm": "MaverIQ A6000 GEMMs (mem_eff, compute_eff, overhead, overlap)",
    "elementwise": "MaverIQ A6000 norms/rope/act/add",
    "attention": "vidur A100 attention file, fractions of A6000 peaks (no A6000 attention data)",
    "allreduce": "MaverIQ A6000 NCCL all-reduce curves (isolated, 2/4/8 GPUs)",
    "hops": "MaverIQ A6000 NCCL send/recv curve",
    "head": "LM head GEMM + embedding/final norm (MaverIQ GEMM constants)",
    "step_cpu": "vidur cpu_overheads.csv: 2024 vLLM fork on A100 (not TensorRT-LLM, not A6000)",
}


def alternatives() -> dict[str, AnalyticModel]:
    """The default model and two a6000 variants, each one sourced engine-level change."""
    base = load_default_calibration()
    a6 = base.for_gpu("a6000")
    serving = load_calibration(serving_calibration_path())
    sync_ms = serving.for_gpu("h100-sxm").iteration_overhead_ms  # TensorRT-LLM rows: synchronous step
    graph_attn = serving.for_gpu("h100-sxm").attn_overhead_us  # estimate under CUDA graphs / fused kernel

    def with_(**kw) -> AnalyticModel:
        return AnalyticModel(calibration=base.model_copy(update={"gpus": {**base.gpus, "a6000": a6.model_copy(update=kw)}}))
    return {"default": AnalyticModel(calibration=base),
            f"step {sync_ms:.2f} ms": with_(iteration_overhead_ms=sync_ms),
            f"attn {graph_attn:.0f} us": with_(attn_overhead_us=graph_attn),
            "both": with_(iteration_overhead_ms=sync_ms, attn_overhead_us=graph_attn)}


def write(out: Path, ams: dict[str, AnalyticModel]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, am in ams.items():
        if name != "default":
            path = out / f"a6000-{name.replace(' ', '-')}.yaml"
            save_calibration(am.calibration, path, header=f"candidate a6000 step model ({name}); "
                             "written by experiments/scripts/a6000_terms.py, not a default")
            print(f"wrote {path}")


def main() -> None:
    models, gpu = load_models(), load_gpus()["a6000"]
    ams = alternatives()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write(Path(sys.argv[2]), ams)
    am = ams["default"]
    names = list(ams)
    print("term sources: " + "; ".join(f"{k}: {v}" for k, v in SOURCES.items()))
    print(f"| model | tp | pp | batch | decode ms | {' | '.join(SOURCES)} | "
          + " | ".join(names[1:]) + " | mem vllm GB | mem trtllm GB | runtime share |")
    print("|" + "---|" * (5 + len(SOURCES) + len(names) - 1 + 3))
    for name in MODELS:
        m = models[name]
        for tp, pp in sorted(load_deploy_configs()):
            sm = am.step_model(m, gpu, tp, pp)
            if sm.weights_gb / sm.gpus > gpu.mem_gb:
                continue
            for batch in (1, 8):
                t = sm.decode_terms(batch, CONTEXT)
                alt = [f"{100 * (ams[k].step_model(m, gpu, tp, pp).decode_step_s(batch, CONTEXT) / sum(t.values()) - 1):+.1f}%"
                       for k in names[1:]]
                mem = ""
                if batch == 1:
                    kw = dict(tp=tp, pp=pp, batch=8, prompt_tokens=512, output_tokens=128)
                    v, r = am.predict(m, gpu, **kw), am.predict(m, gpu, engine="trtllm", **kw)
                    mem = (f" {v.mem_gb:.1f} | {r.mem_gb:.1f} ({100 * (r.mem_gb / v.mem_gb - 1):+.1f}%) | "
                           f"{100 * sm.runtime_overhead_gb / v.mem_gb:.0f}% |")
                else:
                    mem = " | | |"
                print(f"| {name} | {tp} | {pp} | {batch} | {1e3 * sum(t.values()):.2f} | "
                      + " | ".join(f"{1e3 * t[k]:.2f}" for k in SOURCES) + " | " + " | ".join(alt) + " |" + mem)


if __name__ == "__main__":
    main()
