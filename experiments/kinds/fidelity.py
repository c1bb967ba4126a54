"""The simulator against real serving measurements (issue 23 item 2's sources; item 5's report
builds on these rows). Not yet an experiment kind of ``experiments.run`` (no ``Params``): run
``python -m experiments.kinds.fidelity [--write]``, which prints the comparison and, with
``--write``, records it in ``configs/calibration/real_serving.yaml``.

Sources (third-party data under ``$FLOWMAKER_SHARED_DATA/real-serving``, described in its
README; nothing is copied, only the figures derived here):

- ``llmd-h100``, ``llmd-a100``: llm-d-benchmark per-request logs (commit 5fbe3ac), vLLM
  ``vllm/vllm-openai:latest`` of 2025-05 (about 0.8.5, V1 engine, defaults: chunked prefill with
  the V1 budget, prefix caching on), Llama-3.1-70B-Instruct TP2, ``--gpu-memory-utilization
  0.95``; 2 replicas on H100-80GB-HBM3 behind a plain Service (QPS 4-40), 1 replica on
  A100-SXM4-80GB (QPS 0.5-1.34); LMBench multi-round ShareGPT chat. Each log is replayed with its
  own launch times and token counts through ``harness.simulate`` (``vllm-v1``, round-robin for
  the Service).
- ``splitwise``: Splitwise's profiled prefill and decode-iteration times (``perf_model.csv``,
  commit 8f99e7d), Llama-2-70B on DGX-A100/H100 at TP 2/4/8, an unnamed 2023 engine; compared
  with the step model directly (batch 64 rows dropped as the README advises).
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "real_serving.yaml"
LLMD = {"llmd-h100": ("llm-d-benchmark/data/openshift/exp-3/H100/vllm-standalone-llama-3-70b-2replicas-H100",
                      "h100-sxm", 2),
        "llmd-a100": ("llm-d-benchmark/data/openshift/exp-0/vllm-70b", "a100-80gb", 1)}
SPLITWISE = "splitwise-sim/data/perf_model.csv"


def real_serving_dir() -> Path:
    from profiler.catalog import shared_data_path
    return shared_data_path() / "real-serving"


def _err(sim: float, meas: float) -> float:
    return round(sim / meas - 1, 4)


def llmd_point(source: str, path: Path) -> dict[str, Any]:
    """One llm-d log (one load point) measured against its replay in the simulator."""
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
    s = simulate(trace, cfg).summary
    multi = d.generation_tokens > 1
    meas = {"ttft_s": float(d.ttft.mean()),
            "tpot_s": float((d.generation_time[multi] / (d.generation_tokens[multi] - 1)).mean()),
            "e2e_s": float((d.ttft + d.generation_time).mean())}
    row: dict[str, Any] = {"source": source, "load": "qps " + re.findall(r"_([\d.]+)$", path.stem)[0],
                           "requests": len(d), "sim_overloaded": bool(s["overloaded"])}
    for k, v in meas.items():
        row[f"{k[:-2]}_meas"], row[f"{k[:-2]}_sim"] = round(v, 4), round(s[k]["mean"], 4)
        row[f"{k[:-2]}_err"] = _err(s[k]["mean"], v)
    return row


def llmd_rows() -> list[dict[str, Any]]:
    rows = []
    for source, (sub, _, _) in LLMD.items():
        files = sorted((real_serving_dir() / sub).glob("LMBench_sharegpt_output_*.csv"),
                       key=lambda p: float(re.findall(r"_([\d.]+)$", p.stem)[0]))
        rows += [llmd_point(source, p) for p in files]
    return rows


def splitwise_rows() -> list[dict[str, Any]]:
    """Per (GPU, TP): the step model's prefill and decode-iteration error against Splitwise."""
    import pandas as pd

    from profiler.steps import step_model
    df = pd.read_csv(real_serving_dir() / SPLITWISE)
    df = df[(df.model == "llama2-70b") & df.hardware.isin(["a100-80gb", "h100-80gb"]) & (df.batch_size < 64)]
    keys = ["hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    g = df.groupby(keys, as_index=False)[["prompt_time", "token_time"]].median()
    rows = []
    for (hw, tp), part in g.groupby(["hardware", "tensor_parallel"]):
        sm = step_model("llama-2-70b", {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}[hw], int(tp), 1)
        pe, de = [], []
        for r in part.itertuples():
            p, b, t = int(r.prompt_size), int(r.batch_size), int(r.token_size)
            pe.append(sm.step_s(b * p, float(b) * p * p, 0, 0.0, prefill_seqs=b) * 1e3 / r.prompt_time - 1)
            de.append(sm.step_s(0, 0.0, b, float(b) * (p + t / 2)) * 1e3 / r.token_time - 1)
        b1 = part[part.batch_size == 1]
        rows.append({"source": "splitwise", "gpu": hw, "tp": int(tp), "configs": len(part),
                     "prefill_mape": round(float(np.mean(np.abs(pe))), 4), "prefill_bias": round(float(np.mean(pe)), 4),
                     "decode_mape": round(float(np.mean(np.abs(de))), 4), "decode_bias": round(float(np.mean(de)), 4),
                     "decode_ms_batch1_meas": round(float(b1.token_time.median()), 2)})
    return rows


def mape(rows: list[dict[str, Any]], metric: str) -> float:
    return round(float(np.mean([abs(r[f"{metric}_err"]) for r in rows])), 4)


def main(argv: list[str] | None = None) -> int:
    import yaml
    ap = argparse.ArgumentParser(prog="python -m experiments.kinds.fidelity", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help=f"record the rows in {OUT.name}")
    args = ap.parse_args(argv)
    llmd, split = llmd_rows(), splitwise_rows()
    for r in llmd + split:
        print(r)
    summary = {src: {m: mape([r for r in llmd if r["source"] == src and not r["sim_overloaded"]], m)
                     for m in ("ttft", "tpot", "e2e")} for src in LLMD}
    print("MAPE over the points the simulator does not call overloaded:", summary)
    if args.write:
        head = OUT.read_text().split("\nsummary:")[0] if OUT.exists() else ""
        body = yaml.safe_dump({"summary": summary, "llmd": llmd, "splitwise": split}, sort_keys=False, width=120)
        OUT.write_text(head + "\n" + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
