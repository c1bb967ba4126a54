"""GPU check: measure two real architectures on this machine's GPU and compare with the
analytic model (see device_check.sh). Needs only PyTorch and the standard library.

Mode gpu (default): llama-3.2-1b and qwen2.5-7b shapes, bf16, random weights, TP1, the grid
of device_check_plan.json, full depth plus the 1- and 2-layer fingerprint copies. Mode
--tiny: two tiny shapes in fp32 (tests run it on the CPU: `--device cpu --tiny`).

Then (unless --no-ops) per-operator timings of Llama-2-7B/70B layers at TP 1-8 for 1-4,096
tokens in vidur's mlp.csv format (profiler/torch_ops.py), fitted afterwards with
`python -m profiler calibrate-vidur --ops h200=OUT/ops_mlp.csv`.

Writes to OUT (argument, else $OUT): rows_torch.jsonl and rows_fingerprint.jsonl (one table
row per line, profiler/table.py columns plus raw extras), rows_fingerprint_raw.jsonl,
ops_mlp.csv, summary.json, summary.md, and the parquet tables when pandas + pyarrow + pydantic happen to
be importable; otherwise convert later: python -m profiler convert OUT/rows_torch.jsonl --out T.
Exit status: 0 all points measured, 1 time budget ran out (partial results written), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from profiler.fingerprint import FINGERPRINT_LAYERS, extrapolate  # noqa: E402
from profiler.torch_bench import BenchSettings, Device, measure_grid  # noqa: E402
from profiler.torch_model import Arch  # noqa: E402
from profiler.torch_ops import measure_ops, write_mlp_csv  # noqa: E402

PLAN = Path(__file__).with_name("device_check_plan.json")
METRICS = ("ttft_s", "tpot_s", "mem_gb")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="device_check", description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", help="output folder (default $OUT)")
    p.add_argument("--device", default="cuda", help="torch device (cuda, cuda:0, cpu)")
    p.add_argument("--tiny", action="store_true", help="tiny fp32 shapes (CPU test of this script)")
    p.add_argument("--budget-s", type=float, default=400.0,
                   help="stop measuring after this many seconds (results so far are written)")
    p.add_argument("--no-fingerprint", action="store_true")
    p.add_argument("--no-ops", action="store_true", help="skip the per-operator stage")
    p.add_argument("--ops-budget-s", type=float, default=60.0,
                   help="seconds of --budget-s kept for the per-operator stage (run last)")
    a = p.parse_args(argv)
    a.out = a.out or os.environ.get("OUT")
    if not a.out:
        p.error("no output folder: pass OUT or set $OUT")
    return a


def _mape(pairs: list[tuple[float, float]]) -> float | None:
    return 100.0 * statistics.fmean(abs(e - t) / t for t, e in pairs) if pairs else None


def _compare(truth: list[dict], est: dict[tuple, dict], model: str) -> dict[str, float | None]:
    """MAPE (%) of `est` relative to `truth` rows of `model`, per metric."""
    out = {}
    for m in METRICS:
        pairs = [(r[m], est[_pt(r)][m]) for r in truth if r["model"] == model and _pt(r) in est]
        out[m] = _mape(pairs)
    return out


def _pt(r: dict) -> tuple:
    return r["model"], r["batch"], r["prompt_tokens"], r["output_tokens"]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _try_parquet(out: Path, name: str, rows: list[dict]) -> str:
    try:
        from profiler.measured import rows_to_table  # noqa: PLC0415 - needs pandas, pydantic
        from profiler.table import write_table  # noqa: PLC0415
    except ImportError as exc:
        return f"{name}.parquet not written ({exc.name} missing): python -m profiler convert"
    write_table(rows_to_table(rows), out / f"{name}.parquet")
    return f"{name}.parquet written"


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _summary_md(s: dict) -> str:
    lines = [f"# GPU check: {s['device_name']} ({s['mode']} mode, {s['dtype']})", "",
             f"{s['library_versions']}; driver {s['driver'] or 'n/a'}; {s['elapsed_s']:.0f} s; "
             f"predictions: analytic model for '{s['gpu']}' ({s['calibration']})", "",
             "| model | points | TTFT MAPE % | TPOT MAPE % | mem MAPE % | fingerprint TTFT / TPOT / mem err % |",
             "|---|---|---|---|---|---|"]
    for name, r in s["models"].items():
        a, f = r["analytic_mape_pct"], r["fingerprint_mape_pct"]
        lines.append(f"| {name} | {r['points']} | {_fmt(a['ttft_s'])} | {_fmt(a['tpot_s'])} | "
                     f"{_fmt(a['mem_gb'])} | {_fmt(f['ttft_s'])} / {_fmt(f['tpot_s'])} / {_fmt(f['mem_gb'])} |")
    lines += ["", "| model | batch | prompt | TTFT ms (pred) | TPOT ms (pred) | mem GB (pred) |",
              "|---|---|---|---|---|---|"]
    for r in s["points"]:
        lines.append(f"| {r['model']} | {r['batch']} | {r['prompt_tokens']} | {1e3 * r['ttft_s']:.2f} "
                     f"({1e3 * r['pred']['ttft_s']:.2f}) | {1e3 * r['tpot_s']:.3f} "
                     f"({1e3 * r['pred']['tpot_s']:.3f}) | {r['mem_gb']:.2f} ({r['pred']['mem_gb']:.2f}) |")
    if s.get("ops"):
        o = s["ops"]
        lines += ["", f"Per-operator stage: {o['rows']} rows in {o['file']} ({o['elapsed_s']:.0f} s"
                  f"{'' if o['complete'] else ', partial'}); fit: python -m profiler calibrate-vidur "
                  f"--ops {s['gpu']}=OUT/{o['file']}"]
    lines += ["", *s["notes"]]
    return "\n".join(lines) + "\n"


def run(a: argparse.Namespace) -> int:
    t0 = time.monotonic()
    mode = "tiny" if a.tiny else "gpu"
    plan = json.loads(PLAN.read_text(encoding="utf-8"))["modes"][mode]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = BenchSettings(warmup=plan["warmup"], repeats=plan["repeats"],
                             decode_steps=plan["decode_steps"], min_time_s=plan["min_time_s"],
                             dtype=plan["dtype"], threads=1 if a.device == "cpu" else None,
                             cpu_timer="thread")
    dev = Device(a.device, settings)
    grid = [(b, p, o) for b in plan["batches"] for p in plan["prompt_tokens"] for o in plan["output_tokens"]]
    full, raw, notes, complete = [], [], [], True
    e2e_budget_s = a.budget_s - (0.0 if a.no_ops else a.ops_budget_s)
    depths = [] if a.no_fingerprint else list(FINGERPRINT_LAYERS)
    for name in plan["models"]:
        arch = Arch.from_mapping(plan["archs"][name])
        for layers in [arch.layers] + [d for d in depths if d != arch.layers]:
            for row in measure_grid(arch.with_layers(layers), model_name=name, gpu_name=plan["gpu"],
                                    device=dev, settings=settings, points=grid):
                if layers == arch.layers:
                    full.append(row)
                if layers in depths:
                    raw.append(row)
                print(f"{name} L{layers} b{row['batch']} p{row['prompt_tokens']}: ttft "
                      f"{1e3 * row['ttft_s']:.2f} ms, tpot {1e3 * row['tpot_s']:.3f} ms, "
                      f"mem {row['mem_gb']:.3f} GB", flush=True)
                if time.monotonic() - t0 > e2e_budget_s:
                    complete = False
                    break
            if not complete:
                break
        if not complete:
            notes.append(f"time budget {e2e_budget_s:.0f} s ran out during {name}; later points skipped")
            break
    ops = _ops_stage(a, mode, dev, out, deadline=t0 + a.budget_s)
    if ops and not ops["complete"]:
        complete = False
        notes.append(f"per-operator stage stopped at the {a.budget_s:.0f} s budget ({ops['rows']} rows)")
    fp = extrapolate(raw, {n: plan["archs"][n]["layers"] for n in plan["models"]})
    preds = {_pt(p): p for p in plan["predictions"]}
    fp_by = {_pt(r): r for r in fp}
    models = {n: {"points": sum(r["model"] == n for r in full),
                  "analytic_mape_pct": _compare(full, preds, n),
                  "fingerprint_mape_pct": _compare(full, fp_by, n)} for n in plan["models"]}
    _write_jsonl(out / "rows_torch.jsonl", full)
    _write_jsonl(out / "rows_fingerprint_raw.jsonl", raw)
    _write_jsonl(out / "rows_fingerprint.jsonl", fp)
    notes += [_try_parquet(out, "torch", full) if full else "no rows measured",
              *([_try_parquet(out, "fingerprint", fp)] if fp else [])]
    if mode == "gpu" and "H200" not in dev.device_name:
        notes.append(f"device is {dev.device_name}, predictions are for {plan['gpu']}")
    summary = {"mode": mode, "gpu": plan["gpu"], "dtype": plan["dtype"], "device_name": dev.device_name,
               "driver": dev.driver, "library_versions": dev.library_versions,
               "calibration": plan["calibration"], "elapsed_s": time.monotonic() - t0,
               "complete": complete, "models": models, "ops": ops, "notes": notes,
               "points": [{**{k: r[k] for k in ("model", "batch", "prompt_tokens", "output_tokens",
                                                *METRICS)}, "pred": preds[_pt(r)]} for r in full]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(_summary_md(summary), encoding="utf-8")
    print(_summary_md(summary))
    return 0 if complete else 1


def _ops_stage(a: argparse.Namespace, mode: str, dev: Device, out: Path, *, deadline: float) -> dict | None:
    if a.no_ops:
        return None
    t = time.monotonic()

    def say(r: dict) -> None:
        print(f"ops {r['model']} tp{r['num_tensor_parallel_workers']} t{r['num_tokens']}: up_proj "
              f"{r['time_stats.mlp_up_proj.median']:.3f} ms", flush=True)

    rows, done = measure_ops(mode, device=dev.torch_device, dtype=dev.dtype, time_s=dev.time_s,
                             deadline=deadline, on_row=say)
    write_mlp_csv(out / "ops_mlp.csv", rows)
    return {"file": "ops_mlp.csv", "rows": len(rows), "complete": done, "elapsed_s": time.monotonic() - t}


def main(argv: list[str] | None = None) -> int:
    return run(_args(argv))


if __name__ == "__main__":
    sys.exit(main())
