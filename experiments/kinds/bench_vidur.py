"""What-if against vidur at moderate load (issue 13 item 4): ``python -m experiments.run bench_vidur``.

The same requests for both simulators: the first 2,000 requests of the Azure 2023 conversation
trace as vidur ships it (``<shared>/vidur/data/processed_traces/splitwise_conv.csv``), each
clipped as vidur's trace replay clips it (the prompt shortened so that prompt + output <= 4,096
tokens, ``TraceReplayRequestGenerator``), inter-arrival times stretched x6 or x7.
Llama-2-70B, A100-80GB, TP2, one replica, vLLM (v0) scheduling. Both simulators time steps on
vidur's operator measurements: ours with the vidur-only calibration
(``load_default_calibration(serving=False)``), not the serving calibration of current engines
that is the default since issue 23 (a simulator-against-simulator check of the scheduling and
memory rules, not of the step times).

Cases (one JSON line each, one row each of ``results.parquet``: TTFT/TPOT/E2E mean, p50, p90 in s, preemptions, KV capacity, and
the ratio ours / vidur of the mean and p90 of each metric against vidur's recorded run):

- ``x6/vidur-kv``: inter-arrival x6 (the issue's load), our simulator set up like vidur's defaults:
  KV 53,248 tokens (vidur's ``MemoryPlanner``), 128 sequences, vidur's padded prefill budget
  (``len x max <= 4096``); against vidur's defaults;
- ``x6/vllm-kv``: x6, our what-if as it runs (vLLM's KV rule, 40,560 tokens; 256 sequences;
  vLLM's unpadded budget); against vidur given the same capacity (``num_blocks 2529``). At this
  capacity x6 is at the edge of memory saturation (25-32 preemptions), where TTFT moves by a
  fifth for a 1.8% change of the decode time (docs/harness.md);
- ``x7/vllm-kv``: x7, our what-if as it runs; against vidur with ``num_blocks 2529``: moderate
  load at vLLM's capacity.

The run folder's ``vidur_requests.csv`` holds the requests in vidur's processed layout (arrivals
unscaled; vidur stretches them with ``--trace_request_generator_config_time_scale_factor``);
``params.vidur_metrics`` (a CSV path) summarises a vidur run's ``request_metrics.csv`` with the
same formulas (docs/metrics.md), as one more row. vidur's figures below and the commands that produced them are in
docs/harness.md ("What-if against vidur").
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from experiments.context import RunContext
from experiments.kinds._bench import Report
from flowmaker.entry import UserError

N_REQUESTS = 2000
MAX_TOKENS = 4096      # vidur's trace_request_generator_config_max_tokens (its default)
VIDUR_KV_TOKENS = 53_248   # vidur's MemoryPlanner for this setup: 13 slots x 4,096 tokens
VIDUR_CONFIG = {"kv_capacity_tokens": VIDUR_KV_TOKENS, "max_num_seqs": 128, "scheduler": "padded"}
#: case -> (inter-arrival stretch, engine settings, vidur's run it is compared with)
CASES = {
    "x6/vidur-kv": (6.0, VIDUR_CONFIG, "x6/default"),
    "x6/vllm-kv": (6.0, {"scheduler": "vllm"}, "x6/num_blocks=2529"),     # vidur's vllm scheduler is v0's
    "x7/vllm-kv": (7.0, {"scheduler": "vllm"}, "x7/num_blocks=2529"),
}
#: vidur @ 7d47513 on the same requests (docs/harness.md has the commands): mean, p90 (s), restarts
VIDUR = {
    "x6/default": {"ttft": (0.7657, 1.5976), "tpot": (0.0993, 0.1298), "e2e": (26.5676, 48.9542), "preemptions": 4},
    "x6/num_blocks=2529": {"ttft": (2.7907, 9.3991), "tpot": (0.0988, 0.1257), "e2e": (28.6208, 52.7652),
                           "preemptions": 32},
    "x7/num_blocks=2529": {"ttft": (0.7676, 1.5537), "tpot": (0.0885, 0.1118), "e2e": (23.8459, 43.469),
                           "preemptions": 7},
}


def requests():
    """The compared requests (a ``harness.trace.Trace``, arrivals unscaled)."""
    from harness.trace import Trace, load_trace
    from profiler.catalog import shared_data_path

    t = load_trace(shared_data_path() / "vidur" / "data" / "processed_traces" / "splitwise_conv.csv").head(N_REQUESTS)
    prompt = t.prompt_tokens - np.clip(t.prompt_tokens + t.output_tokens - MAX_TOKENS, 0, None)
    return Trace("splitwise_conv[:2000] clipped to 4096", t.arrived_at_s, prompt, t.output_tokens)


def write_requests(path: str | Path) -> None:
    """The requests in vidur's processed-trace layout."""
    t = requests()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        for a, p, o in zip(t.arrived_at_s, t.prompt_tokens, t.output_tokens):
            fh.write(f"{float(a)!r},{int(p)},{int(o)}\n")


def _row(case: str, lat: dict, extra: dict) -> dict:
    out = {"case": case}
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        out.update({f"{k[:-2]}_{q}_s": round(lat[k][q], 4) for q in ("mean", "p50", "p90")})
    return {**out, **extra}


def ours() -> list[dict]:
    from harness.simulate import SimulateConfig, simulate
    from profiler.analytic import AnalyticModel
    from profiler.calibration import load_default_calibration
    from profiler.engine import EngineConfig
    from profiler.steps import gpu_spec, model_spec

    step = AnalyticModel(calibration=load_default_calibration(serving=False)).step_model(
        model_spec("llama-2-70b"), gpu_spec("a100-80gb"), 2, 1)
    trace = requests()
    rows = []
    for case, (scale, engine, against) in CASES.items():
        t0 = time.perf_counter()
        s = simulate(trace, SimulateConfig(model="llama-2-70b", gpu="a100-80gb", tp=2, time_scale=scale,
                                           engine=EngineConfig(**engine)), step=step).summary
        ref = VIDUR[against]
        ratio = {f"{k}_{q}_vs_vidur": round(s[f"{k}_s"][q] / ref[k][i], 3)
                 for k in ("ttft", "tpot", "e2e") for i, q in enumerate(("mean", "p90"))}
        rows.append(_row(case, s, {"preemptions": s["preemptions"], "vidur_preemptions": ref["preemptions"],
                                   "kv_capacity_tokens": s["kv_capacity_tokens"], "completed": s["completed"],
                                   "against": f"vidur {against}", **ratio,
                                   "wall_s": round(time.perf_counter() - t0, 3)}))
    return rows


def vidur_summary(csv_path: str | Path) -> dict:
    """TTFT, TPOT, E2E of a vidur run from its ``request_metrics.csv``: TTFT = ``prefill_e2e_time``
    (vidur keeps the first prefill's completion across restarts), E2E = ``request_e2e_time``,
    TPOT = (E2E - TTFT) / (n - 1) with n the request's output tokens (vidur's own normalised
    decode time divides by the tokens left after its last restart); preemptions = restarts."""
    import csv

    from harness.metrics import stats

    with open(csv_path, encoding="utf-8") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: int(r["Request Id"]))
    n_out = requests().output_tokens
    ttft = np.array([float(r["prefill_e2e_time"]) for r in rows])
    e2e = np.array([float(r["request_e2e_time"]) for r in rows])
    n = np.array([n_out[int(r["Request Id"])] for r in rows])
    multi = n > 1
    lat = {"ttft_s": stats(ttft), "e2e_s": stats(e2e), "tpot_s": stats((e2e - ttft)[multi] / (n[multi] - 1))}
    return _row("vidur", lat, {"preemptions": int(sum(int(float(r["request_num_restarts"])) for r in rows)),
                               "completed": len(rows)})


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    vidur_metrics: str | None = None      # a vidur run's request_metrics.csv to summarise beside ours


def run(params: Params, ctx: RunContext) -> None:
    vidur = None
    if params.vidur_metrics:        # read before the ~1 min of our runs
        from flowmaker.inputs import InputError, read_text
        try:
            read_text(params.vidur_metrics)
            vidur = vidur_summary(params.vidur_metrics)
        except InputError as exc:
            raise UserError(f"field 'params.vidur_metrics': {exc}") from None
        except (KeyError, ValueError, IndexError) as exc:
            raise UserError(f"field 'params.vidur_metrics': {params.vidur_metrics}: not a vidur request_metrics.csv "
                            f"({type(exc).__name__}: {exc})") from None
    write_requests(ctx.run_dir / "vidur_requests.csv")
    report = Report(ctx, "What-if against vidur (bench_vidur)")
    rows = ours() + ([vidur] if vidur is not None else [])
    for r in rows:
        report.line(json.dumps(r))
        report.row(r)
    report.write()
