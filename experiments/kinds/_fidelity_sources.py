"""Row builders of the fidelity report (``experiments/kinds/fidelity.py``): each source's
measurements against the simulator (or the step model) under one calibration.

One long-format row per (source, model, GPU, engine, load, metric, statistic): ``measured``,
``simulated``, ``error`` (simulated / measured - 1) and ``method``:
- ``replay``: llm-d's per-request logs replayed with their own launch times and token counts
  through ``harness.simulate`` (mean and p90 of TTFT, TPOT, E2E);
- ``closed-loop``: a page's concurrency sweep re-run as ``harness.simulate --concurrency`` with the
  stated (or assumed) prompt and output lengths (mean TTFT, TPOT, E2E);
- ``step``: offline batches (LLM-Inference-Bench, Splitwise) compared with the step model's
  batch latency / TTFT / decode iteration directly (``profiler.calibration_serving.predict``).
Third-party data is read in place under ``$FLOWMAKER_SHARED_DATA``; a source whose data is absent
gives a ``missing`` line instead of rows.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler.analytic import AnalyticModel
from profiler.calibration import Calibration
from profiler.catalog import load_gpus, load_models, shared_data_path

LLMD = {"llmd-h100": ("llm-d-benchmark/data/openshift/exp-3/H100/vllm-standalone-llama-3-70b-2replicas-H100",
                      "h100-sxm", 2),
        "llmd-a100": ("llm-d-benchmark/data/openshift/exp-0/vllm-70b", "a100-80gb", 1)}
SPLITWISE = "splitwise-sim/data/perf_model.csv"
Steps = Callable[[str, str, int], Any]  # (model, gpu, tp) -> StepModel


def real_serving_dir() -> Path:
    return shared_data_path() / "real-serving"


def steps_for(cal: Calibration) -> Steps:
    """(model, gpu, tp) -> the step model under `cal`."""
    am, models, gpus = AnalyticModel(calibration=cal), load_models(), load_gpus()
    return lambda model, gpu, tp: am.step_model(models[model], gpus[gpu], tp, 1)


def _row(base: dict[str, Any], metric: str, stat: str, meas: float, sim: float) -> dict[str, Any]:
    return {**base, "metric": metric, "stat": stat, "measured": float(meas), "simulated": float(sim),
            "error": float(sim / meas - 1)}


def llmd_files(source: str) -> list[Path]:
    return sorted((real_serving_dir() / LLMD[source][0]).glob("LMBench_sharegpt_output_*.csv"),
                  key=lambda p: float(re.findall(r"_([\d.]+)$", p.stem)[0]))


def llmd_point(source: str, path: Path, steps: Steps) -> list[dict[str, Any]]:
    """One llm-d log (one load point) against its replay: mean and p90 of TTFT, TPOT, E2E."""
    import pandas as pd

    from harness.simulate import SimulateConfig, simulate
    from harness.trace import Trace
    from profiler.engine import EngineConfig
    _, gpu, replicas = LLMD[source]
    d = pd.read_csv(path).sort_values("launch_time")
    out = np.maximum(d.generation_tokens.to_numpy(), 1)
    trace = Trace(path.stem, (d.launch_time - d.launch_time.min()).to_numpy(), d.prompt_tokens.to_numpy(), out)
    cfg = SimulateConfig(model="llama-3.1-70b", gpu=gpu, tp=2, replicas=replicas, router="round-robin",
                         engine=EngineConfig(gpu_memory_utilization=0.95))
    s = simulate(trace, cfg, step=steps("llama-3.1-70b", gpu, 2)).summary
    multi = d.generation_tokens > 1
    meas = {"ttft": d.ttft, "tpot": d.generation_time[multi] / (d.generation_tokens[multi] - 1),
            "e2e": d.ttft + d.generation_time}
    base = {"source": source, "engine": "vllm ~0.8.5 (V1)", "model": "llama-3.1-70b", "gpu": gpu, "tp": 2,
            "load": "qps " + re.findall(r"_([\d.]+)$", path.stem)[0], "method": "replay",
            "requests": len(d), "sim_overloaded": bool(s["overloaded"])}
    return [_row(base, m, stat, float(np.mean(v)) if stat == "mean" else float(np.percentile(v, 90)),
                 s[f"{m}_s"][stat]) for m, v in meas.items() for stat in ("mean", "p90")]


def llmd_rows(steps: Steps, max_loads: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    for source in LLMD:
        files = llmd_files(source)[:max_loads]
        if not files:
            missing.append(f"{source}: source missing ({real_serving_dir() / LLMD[source][0]} not found)")
        for p in files:
            rows += llmd_point(source, p, steps)
    return rows, missing


def closed_loop_rows(sources: dict[str, Any], steps: Steps, requests: int = 64, *,
                     sensitivity: bool = False) -> list[dict[str, Any]]:
    """Each point of the page sources (``kind: points`` in configs/calibration/public_serving.yaml)
    re-run in the closed-loop simulator at its concurrency, on the source's engine as it ran
    (``async_scheduling_default`` of its version). ``sensitivity``: instead, each point again at
    every prompt length of the source's ``prompt_sensitivity`` (where its prompt length is derived
    or assumed), rows with ``prompt_tokens`` set, kept out of the MAPE; and each point of more than
    one client again with the clients out of step (``OUT_OF_STEP``)."""
    from profiler.calibration_serving import engine_of
    from profiler.engine import EngineConfig, async_scheduling_default
    rows = []
    for src, spec in sources.items():
        engine = EngineConfig(async_scheduling=async_scheduling_default(spec["engine"]))
        label = spec["engine"] + f" ({engine_of(spec['engine'])} scheduling)"
        for p in spec.get("points", []) if spec["kind"] == "points" else []:
            prompts = spec.get("prompt_sensitivity", []) if sensitivity else [p["prompt_tokens"]]
            for prompt in prompts:
                rows += _closed_loop_point(src, label, engine, {**p, "prompt_tokens": prompt}, steps, requests,
                                           sensitivity)
            if sensitivity and p["concurrency"] > 1:
                rows += _closed_loop_point(src, label, engine, p, steps, requests, sensitivity, spread=OUT_OF_STEP)
    return rows


#: the out-of-step sensitivity: each answer ends 0 to ``OUT_OF_STEP`` tokens (seeded) short of the
#: recorded output (a cap such as max_tokens), so the clients' requests end in different steps, as
#: real clients' do; equal requests end together and find the engine idle, which hides async
#: scheduling's admission lag (docs/profiler.md). Any spread of a few tokens does: 4, 16 and 32 give
#: inferencebench-h100's four clients 13.3, 13.2 and 13.2 ms mean TTFT (7.3 ms in lockstep)
OUT_OF_STEP = 16


def _closed_loop_point(src: str, label: str, engine: Any, p: dict[str, Any], steps: Steps, requests: int,
                       sensitivity: bool, spread: int = 0) -> list[dict[str, Any]]:
    """One point re-run: ``n`` requests through ``c`` clients; with ``spread``, each request's output
    is 0 to ``spread`` tokens (seeded, uniform) short of the recorded one."""
    from harness.simulate import SimulateConfig, simulate
    from harness.trace import Trace
    c, prompt, output = p["concurrency"], p["prompt_tokens"], p["output_tokens"]
    n = max(requests, 4 * c)
    outputs = np.maximum(output - np.random.default_rng(0).integers(0, spread + 1, n), 1)
    trace = Trace(src, np.zeros(n), np.full(n, prompt), outputs)
    cfg = SimulateConfig(model=p["model"], gpu=p["gpu"], tp=p["tp"], concurrency=c, engine=engine)
    s = simulate(trace, cfg, step=steps(p["model"], p["gpu"], p["tp"])).summary
    load = f"concurrency {c}" + (f", out of step (outputs {output}-{int(outputs.min())})" if spread else "")
    base = {"source": src, "engine": label, "model": p["model"], "gpu": p["gpu"], "tp": p["tp"],
            "load": load, "method": "closed-loop", "requests": n, "sim_overloaded": False,
            "prompt_tokens": prompt if sensitivity else None}
    return [_row(base, m, "mean", p[f"{m}_s"], s[f"{m}_s"]["mean"]) for m in ("ttft", "tpot", "e2e")
            if f"{m}_s" in p]


def step_rows(points: list[Any], sources: dict[str, Any], steps: Steps) -> list[dict[str, Any]]:
    """Offline-batch sources (LLM-Inference-Bench) against the step model, one row per source,
    GPU, model, TP and metric (mean over the source's batches and lengths)."""
    from profiler.calibration_serving import predict
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for p in points:
        key = (p.source, f"{sources[p.source]['engine']} ({p.engine} scheduling)", p.model, p.gpu, p.tp, p.metric)
        sm = steps(p.model, p.gpu, p.tp).with_scheduling(p.async_scheduling)
        groups.setdefault(key, []).append((p.measured_s, predict(sm, p)))
    rows = []
    for (src, eng, model, gpu, tp, metric), vals in groups.items():
        meas, sim = np.array(vals).T
        base = {"source": src, "engine": eng, "model": model, "gpu": gpu, "tp": tp,
                "load": f"{len(vals)} offline batches", "method": "step", "requests": len(vals),
                "sim_overloaded": False}
        row = _row(base, metric, "mean", float(meas.mean()), float(sim.mean()))
        row["error"] = float(np.mean(np.abs(sim / meas - 1)))  # MAPE over the batches, not of the means
        rows.append(row)
    return rows


def splitwise_rows(steps: Steps) -> tuple[list[dict[str, Any]], list[str]]:
    """Splitwise's prefill and decode-iteration times (2023 engine; reference) per GPU and TP."""
    import pandas as pd
    path = real_serving_dir() / SPLITWISE
    if not path.is_file():
        return [], [f"splitwise: source missing ({path} not found)"]
    df = pd.read_csv(path)
    df = df[(df.model == "llama2-70b") & df.hardware.isin(["a100-80gb", "h100-80gb"]) & (df.batch_size < 64)]
    keys = ["hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    g = df.groupby(keys, as_index=False)[["prompt_time", "token_time"]].median()
    rows = []
    for (hw, tp), part in g.groupby(["hardware", "tensor_parallel"]):
        gpu = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}[hw]
        sm = steps("llama-2-70b", gpu, int(tp))
        pre, dec = [], []
        for r in part.itertuples():
            p, b, t = int(r.prompt_size), int(r.batch_size), int(r.token_size)
            pre.append((r.prompt_time / 1e3, sm.step_s(b * p, float(b) * p * p, 0, 0.0, prefill_seqs=b)))
            dec.append((r.token_time / 1e3, sm.step_s(0, 0.0, b, float(b) * (p + t / 2))))
        base = {"source": "splitwise", "engine": "unnamed 2023 engine", "model": "llama-2-70b", "gpu": gpu,
                "tp": int(tp), "load": f"{len(part)} offline batches", "method": "step",
                "requests": len(part), "sim_overloaded": False}
        for metric, vals in (("ttft", pre), ("decode_step", dec)):
            meas, sim = np.array(vals).T
            row = _row(base, metric, "mean", float(meas.mean()), float(sim.mean()))
            row["error"] = float(np.mean(np.abs(sim / meas - 1)))
            rows.append(row)
    return rows, []
