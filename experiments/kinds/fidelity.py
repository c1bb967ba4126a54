"""Fidelity report (issue 23 item 5): the simulator against public real serving measurements, per
source, model, GPU, engine and load, simulated vs measured TTFT, TPOT and E2E (mean, and p90 where
the source has per-request data), with MAPE, before and after the serving calibration.

``before`` is the step model on vidur's operator fits alone (``load_default_calibration(
serving=False)``, the model before issue 23); ``after`` is the default model (vidur.yaml +
configs/calibration/serving.yaml, fitted by ``python -m profiler calibrate-serving``). Sources
(configs/calibration/public_serving.yaml, and the llm-d / Splitwise data of
``$FLOWMAKER_SHARED_DATA/real-serving``; row builders and methods: ``_fidelity_sources``):
llm-d (vLLM ~0.8.5 V1, per-request logs, replayed), LLM-Inference-Bench (TensorRT-LLM and vLLM
0.4/0.5 offline batches, step model), InferenceBench / Musgrave / ai-factory pages (vLLM 0.21-0.23,
closed-loop re-runs), Splitwise (2023 engine, reference). A source whose data is absent is one
``source missing`` line in the summary, not an error.

Outputs in the run folder (and, with ``publish``, results/fidelity/): ``fidelity.parquet`` (one
row per source x load x metric x statistic x calibration) and ``summary.md``.

``python -m experiments.kinds.fidelity --write`` re-records configs/calibration/real_serving.yaml,
the llm-d errors of the ``before`` model (the state the fit started from).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from experiments.kinds._fidelity_sources import (LLMD, OUT_OF_STEP, closed_loop_rows, llmd_files, llmd_point,
                                                 llmd_rows, real_serving_dir, splitwise_rows, step_rows, steps_for)

OUT = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "real_serving.yaml"
CALIBRATIONS = ("before", "after")
__all__ = ["LLMD", "Params", "llmd_files", "real_serving_dir", "run"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    llmd_loads: int | None = Field(default=None, ge=1, description="first N load points per llm-d "
                                   "deployment (None: all)")
    argonne: bool = Field(default=True, description="LLM-Inference-Bench offline batches (step model)")
    splitwise: bool = True
    closed_loop_requests: int = Field(default=64, ge=4, le=10_000, description="requests per closed-loop re-run")
    publish: bool = Field(default=False, description="copy fidelity.parquet and summary.md to results/<experiment>/")


def calibration(which: str) -> Any:
    from profiler.calibration import Calibration, load_default_calibration
    return load_default_calibration(serving=which == "after") or Calibration()


def rows(params: Params) -> tuple[pd.DataFrame, list[str]]:
    """Every source's rows under both calibrations, and the missing-source lines."""
    from profiler.calibration_serving import load_points, sources_path
    from profiler.catalog import read_yaml_file
    sources = read_yaml_file(sources_path())["sources"]
    points, missing = load_points()
    table = [p for p in points if p.metric in ("batch_latency", "ttft") and p.source.startswith("argonne")]
    out: list[dict[str, Any]] = []
    for which in CALIBRATIONS:
        if which == "after":  # the prompt lengths a page does not state, tried (kept out of the MAPE)
            out += [{**r, "calibration": which} for r in closed_loop_rows(
                sources, steps_for(calibration(which)), params.closed_loop_requests, sensitivity=True)]
        steps = steps_for(calibration(which))
        got, miss = llmd_rows(steps, params.llmd_loads)
        got += closed_loop_rows(sources, steps, params.closed_loop_requests)
        if params.argonne:
            got += step_rows(table, sources, steps)
        if params.splitwise:
            more, m2 = splitwise_rows(steps)
            got, miss = got + more, miss + m2
        out += [{**r, "calibration": which} for r in got]
        missing = list(dict.fromkeys(missing + miss))
    return pd.DataFrame(out), missing


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """MAPE (%) per source, engine, GPU, metric and statistic, before and after side by side
    (llm-d points the simulator calls overloaded are left out: their queues grow without bound)."""
    if df.empty:
        return pd.DataFrame()
    calm = df[~df.sim_overloaded & _not_sensitivity(df)]
    keys = ["source", "engine", "model", "gpu", "tp", "method", "metric", "stat"]
    m = calm.assign(ape=calm.error.abs() * 100).pivot_table(index=keys, columns="calibration", values="ape",
                                                             aggfunc="mean")
    n = calm[calm.calibration == "after"].groupby(keys).size().rename("points")
    return m.join(n).reset_index().reindex(columns=[*keys, "points", *CALIBRATIONS])


def _not_sensitivity(df: pd.DataFrame) -> pd.Series:
    return df["prompt_tokens"].isna() if "prompt_tokens" in df else pd.Series(True, index=df.index)


def sensitivity_lines(df: pd.DataFrame) -> list[str]:
    """The sources' points at the prompt lengths they do not state and out of step (rows with
    ``prompt_tokens``)."""
    if "prompt_tokens" not in df or df["prompt_tokens"].isna().all():
        return []
    sens = df[df["prompt_tokens"].notna() & (df.calibration == "after")]
    lines = ["## Sensitivity (after; not in the MAPE)", "",
             "Points re-run at other prompt lengths than the recorded one (configs/calibration/"
             "public_serving.yaml `prompt_sensitivity`): how much of a miss a wrong length could explain; "
             f"and points of several clients re-run out of step (each answer 0-{OUT_OF_STEP} tokens short of "
             "the recorded output, seeded), as real clients are: equal requests end together and find the "
             "engine idle, which hides async scheduling's admission lag (docs/profiler.md).", "",
             "| source | load | prompt tokens | metric | measured | simulated | error % |", "|---|---|---|---|---|---|---|"]
    for r in sens.itertuples(index=False):
        lines.append(f"| {r.source} | {r.load} | {int(r.prompt_tokens)} | {r.metric} | {r.measured:.4g} | "
                     f"{r.simulated:.4g} | {100 * r.error:+.1f} |")
    return lines + [""]


def markdown(df: pd.DataFrame, missing: list[str]) -> str:
    lines = ["# Fidelity: simulator vs public real serving measurements", "",
             "MAPE (%) of the simulated against the measured figure; `before`: the step model on "
             "vidur's operator fits alone; `after`: the default model with the serving calibration "
             "(configs/calibration/serving.yaml). llm-d points the simulator calls overloaded are "
             "left out of the MAPE (listed in the parquet). `step` rows compare offline batches with "
             "the step model directly (their `error` is the MAPE over the batches of the row); `replay` and `closed-loop` rows run `harness.simulate`, each on its source's engine as it ran "
             "(`(async scheduling)`: vLLM >= 0.14, whose default overlaps the per-step CPU time with the forward, "
             "EngineConfig.async_scheduling; `step` rows likewise). "
             "Sources and their provenance: configs/calibration/public_serving.yaml, docs/profiler.md.", ""]
    s = summary(df)
    if not s.empty:
        cols = list(s.columns)
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in s.itertuples(index=False):
            lines.append("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r) + " |")
        lines.append("")
        per = df[(df.calibration == "after") & ~df.sim_overloaded & (df["stat"] == "mean") & _not_sensitivity(df)]
        lines += ["## Every point (after; mean)", "",
                  "| source | gpu | load | metric | measured | simulated | error % |", "|---|---|---|---|---|---|---|"]
        for r in per.itertuples(index=False):
            lines.append(f"| {r.source} | {r.gpu} | {r.load} | {r.metric} | {r.measured:.4g} | "
                         f"{r.simulated:.4g} | {100 * r.error:+.1f} |")
        lines.append("")
        lines += sensitivity_lines(df)
    lines += [f"- {m}" for m in missing] or ["- every source's data was found"]
    return "\n".join(lines) + "\n"


def run(params: Params, ctx: RunContext) -> None:
    df, missing = rows(params)
    if not df.empty:
        atomic_write_parquet(ctx.run_dir / "fidelity.parquet", df)
    text = markdown(df, missing)
    atomic_write_text(ctx.run_dir / "summary.md", text)
    if params.publish:
        import shutil
        for name in ("fidelity.parquet", "summary.md"):
            if (ctx.run_dir / name).exists():
                shutil.copyfile(ctx.run_dir / name, ctx.run_dir.parent / name)
    print(text)


# -- the record of the pre-fit errors (configs/calibration/real_serving.yaml) ---------------------
def legacy_row(source: str, path: Path) -> dict[str, Any]:
    """One llm-d load point under the `before` model, in real_serving.yaml's flat form."""
    rs = {(r["metric"], r["stat"]): r for r in llmd_point(source, path, steps_for(calibration("before")))}
    first = next(iter(rs.values()))
    row: dict[str, Any] = {"source": source, "load": first["load"], "requests": first["requests"],
                           "sim_overloaded": first["sim_overloaded"]}
    for m in ("ttft", "tpot", "e2e"):
        r = rs[(m, "mean")]
        row[f"{m}_meas"], row[f"{m}_sim"] = round(r["measured"], 4), round(r["simulated"], 4)
        row[f"{m}_err"] = round(r["simulated"] / r["measured"] - 1, 4)
    return row


def mape(rows_: list[dict[str, Any]], metric: str) -> float:
    return round(float(np.mean([abs(r[f"{metric}_err"]) for r in rows_])), 4)


def main(argv: list[str] | None = None) -> int:
    import yaml
    ap = argparse.ArgumentParser(prog="python -m experiments.kinds.fidelity", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help=f"record the before-fit llm-d rows in {OUT.name}")
    args = ap.parse_args(argv)
    llmd = [legacy_row(src, p) for src in LLMD for p in llmd_files(src)]
    for r in llmd:
        print(r)
    summ = {src: {m: mape([r for r in llmd if r["source"] == src and not r["sim_overloaded"]], m)
                  for m in ("ttft", "tpot", "e2e")} for src in LLMD}
    print("MAPE over the points the simulator does not call overloaded:", summ)
    if args.write:
        head = OUT.read_text().split("\nsummary:")[0] if OUT.exists() else ""
        OUT.write_text(head + "\n" + yaml.safe_dump({"summary": summ, "llmd": llmd}, sort_keys=False, width=120))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
