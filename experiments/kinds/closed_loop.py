"""The closed loop (``harness.closedloop``): a two-stage plan on real servers, the profiler's torch
backend, calibration, the simulator and a live replay of the same requests, side by side at
each load (and repeat). Outputs: ``closed_loop.json`` (everything, probes and per-block machine load
included), ``results.parquet`` (one row per repeat x load x source: simulated, measured, profiler
only), ``calls.parquet`` (every call, simulated and measured: TTFT, TPOT, queue, E2E; also as
``calls.jsonl``), ``summary.md``, server logs in ``servers/``. ``seed`` seeds the model weights, arrivals, sizes and prompts."""
from __future__ import annotations

import pandas as pd

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from harness.closedloop import METRICS, run_loop, summary_md
from harness.closedloop_model import LoopConfig


class Params(LoopConfig):
    """``harness.closedloop_model.LoopConfig`` (its seed comes from the experiment's ``seed``)."""


def run(params: Params, ctx: RunContext) -> None:
    cfg = LoopConfig(**{**params.model_dump(), "seed": ctx.seed})
    res = run_loop(cfg, ctx.run_dir)      # stage lines through logging (standard error)
    rows = [{"repeat": ld["repeat"], "load": ld["load"], "rate_rps": ld["rate_rps"], "source": src,
             **{m: ld[src][m] for m in (*METRICS, "e2e_p50_s", "e2e_p99_s", "completed")},
             "loadavg_start": ld["machine_loadavg_1m"][0], "loadavg_end": ld["machine_loadavg_1m"][1]}
            for ld in res["loads"] for src in ("simulated", "measured", "profiler_only")]
    atomic_write_parquet(ctx.run_dir / "results.parquet", pd.DataFrame(rows))
    atomic_write_parquet(ctx.run_dir / "calls.parquet", pd.read_json(ctx.run_dir / "calls.jsonl", lines=True))
    text = (f"# Closed loop: simulator vs {cfg.server} serve on {cfg.device}\n\n" + summary_md(res))
    atomic_write_text(ctx.run_dir / "summary.md", text)
    print(text)
