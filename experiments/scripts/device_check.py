"""GPU check: measure two real architectures on this machine's GPU and compare with the
analytic model (see device_check.sh). Needs only PyTorch and the standard library.

Mode gpu (default): llama-3.2-1b and qwen2.5-7b shapes, bf16, random weights, TP1, the grid
of device_check_plan.json, full depth plus the 1- and 2-layer fingerprint copies. Mode
--tiny: two tiny shapes in fp32 (tests run it on the CPU: `--device cpu --tiny`).

Then (unless --no-ops) per-operator timings of Llama-2-7B/70B layers at TP 1-8 for 1-4,096
tokens in vidur's mlp.csv format (profiler/torch_ops.py), fitted afterwards with
`python -m profiler calibrate-vidur --ops h200=OUT/ops_mlp.csv`.

With --loop (after the other stages, its --loop-budget-s kept for it) or --loop-only (alone,
as a second call so the profile keeps its whole budget) the closed loop of harness/closedloop.py
on this device: two servers of a llama-3.2-1b-shaped random decoder (bf16), by default the
project's PyTorch-only server (harness/servers/torchserve.py; --loop-server transformers where
transformers is installed), the profiler's torch backend, calibration (or the measured table
itself without pandas/scipy), the simulator and a live replay at two loads, simulated vs
measured TTFT/TPOT/E2E/goodput in summary.md and OUT/loop/closed_loop.json. Its client side
needs numpy, pydantic, pyyaml and httpx: a site-packages folder at results/device/site (made by
experiments/scripts/device_carry.sh, carried to the machine) is put on sys.path when present; if
they are still missing the stage is skipped and says why.

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

# a stand-alone script (PyTorch and the standard library only): the repository is not importable
# until its root is on the path, so the root cannot come from profiler.catalog.repo_root
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
    p.add_argument("--no-fingerprint", action="store_true",
                   help="skip the 1- and 2-layer fingerprint copies (full depth only)")
    p.add_argument("--no-ops", action="store_true", help="skip the per-operator stage")
    p.add_argument("--ops-budget-s", type=float, default=60.0,
                   help="seconds of --budget-s kept for the per-operator stage")
    p.add_argument("--loop", action="store_true", help="also run the closed-loop stage (last)")
    p.add_argument("--loop-only", action="store_true", help="run only the closed-loop stage")
    p.add_argument("--loop-budget-s", type=float, default=150.0,
                   help="seconds of --budget-s kept for the closed-loop stage (run last)")
    p.add_argument("--loop-server", choices=("torch", "transformers"), default="torch",
                   help="server the closed-loop stage launches (default: torch)")
    a = p.parse_args(argv)
    a.out = a.out or os.environ.get("OUT")
    if not a.out:
        p.error("no output folder: pass OUT or set $OUT")
    if a.loop_only:
        a.loop = True
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
    if s.get("loop") and not s["loop"].get("skipped"):
        lp = s["loop"]
        lines += ["", f"Closed loop ({lp['server']} server, {lp['elapsed_s']:.0f} s; OUT/loop/closed_loop.json): "
                  "simulated vs measured", "", lp["table"].rstrip("\n")]
    lines += ["", *s["notes"]]
    return "\n".join(lines) + "\n"


def run(a: argparse.Namespace) -> int:
    t0 = time.monotonic()
    mode = "tiny" if a.tiny else "gpu"
    if a.loop_only:
        return _loop_only(a, mode)
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
    e2e_budget_s = a.budget_s - (0.0 if a.no_ops else a.ops_budget_s) - (a.loop_budget_s if a.loop else 0.0)
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
    ops = _ops_stage(a, mode, dev, out, deadline=t0 + a.budget_s - (a.loop_budget_s if a.loop else 0.0))
    if ops and not ops["complete"]:
        complete = False
        notes.append(f"per-operator stage stopped at the {a.budget_s:.0f} s budget ({ops['rows']} rows)")
    loop = _loop_stage(a, mode, out) if a.loop else None
    if loop and loop.get("skipped"):
        notes.append(f"closed loop skipped: {loop['skipped']}")
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
               "complete": complete, "models": models, "ops": ops, "loop": loop, "notes": notes,
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


#: the loop's model on a GPU: llama-3.2-1b's shape (configs/models.yaml), random bf16 weights
LOOP_SHAPE_GPU = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256)
LOOP_SHAPE_TINY = dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=512)
CARRIED_SITE = ROOT / "results" / "device" / "site"


def _loop_stage(a: argparse.Namespace, mode: str, out: Path) -> dict:
    """The closed loop (module docstring); {'skipped': why} when its libraries are missing."""
    if CARRIED_SITE.is_dir() and str(CARRIED_SITE) not in sys.path:
        sys.path.insert(1, str(CARRIED_SITE))
    t = time.monotonic()
    try:
        from harness.closedloop import run_loop, summary_md  # noqa: PLC0415
        from harness.closedloop_model import LoopConfig, Shape, StageSize  # noqa: PLC0415
        import httpx  # noqa: F401,PLC0415
    except ImportError as exc:
        return {"skipped": f"{exc.name or exc} not importable (carry results/device/site: "
                           f"experiments/scripts/device_carry.sh)"}
    gpu = mode == "gpu"
    cfg = LoopConfig(
        shape=Shape(**(LOOP_SHAPE_GPU if gpu else LOOP_SHAPE_TINY)), server=a.loop_server, device=a.device,
        gpu="h200" if gpu else "cpu", dtype="bfloat16" if gpu else "float32",
        stages=(StageSize(prompt_tokens=512, output_tokens=64), StageSize(prompt_tokens=256, output_tokens=32))
        if gpu else (StageSize(prompt_tokens=64, output_tokens=8), StageSize(prompt_tokens=32, output_tokens=6)),
        requests=100 if gpu else 6, loads=(0.3, 0.7) if gpu else (0.3,),
        profile_prompts=(16, 64, 128, 256, 512, 768, 1024) if gpu else (16, 64, 128),
        profile_repeats=5 if gpu else 2, probes=((96, 48), (320, 48), (640, 24), (200, 80)) if gpu
        else ((40, 8), (100, 8)), base_port=18900, startup_timeout_s=120.0, timeout_s=60.0)
    try:
        res = run_loop(cfg, out / "loop", log=lambda m: print(f"loop: {m}", flush=True))
    except Exception as exc:  # noqa: BLE001 - the other stages' results must still be written
        return {"skipped": f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return {"server": cfg.server, "elapsed_s": time.monotonic() - t, "table": summary_md(res),
            "error_pct": [ld["error_pct"] for ld in res["loads"]]}


def _loop_only(a: argparse.Namespace, mode: str) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    loop = _loop_stage(a, mode, out)
    (out / "loop_summary.json").write_text(json.dumps(loop, indent=1) + "\n", encoding="utf-8")
    text = (f"# Closed loop skipped: {loop['skipped']}\n" if loop.get("skipped") else
            f"# Closed loop on {a.device} ({loop['server']} server, {loop['elapsed_s']:.0f} s)\n\n{loop['table']}")
    (out / "loop_summary.md").write_text(text, encoding="utf-8")
    print(text)
    return 1 if loop.get("skipped") else 0


def main(argv: list[str] | None = None) -> int:
    return run(_args(argv))


if __name__ == "__main__":
    sys.exit(main())
