"""The simulator checked against real servers end to end, on one machine (CPU or one GPU).

A two-stage plan (every request: a call to stage ``a``'s instance, then one to stage ``b``'s)
is deployed on two real servers of a random-weight Llama built here (nothing downloaded). Then:

1. **profile**: the profiler's ``torch`` backend times the same architecture (prefill and decode
   at batch 1, the servers' batch; wall clock, the servers' clock);
2. **calibrate**: the analytic model's constants for the device are fitted to that table
   (``profiler.validate.fit_gpu``, as ``python -m profiler calibrate`` does);
3. **serving overhead** (``overhead: true``): probe requests of other sizes than the replay's,
   off the clock (after an untimed warm-up round), measure TTFT and TPOT through the HTTP stream
   with each server alone and with both busy at once; their medians minus the calibrated prefill
   and decode times are a per-call and a per-iteration overhead (the server's tokenisation,
   HTTP, ``generate()`` set-up and per-token Python work, which the profiler's bare decoder does
   not have; with both busy, also what the two servers take from each other on a shared
   device). At a load, the simulator adds the mix of the two weighted by the chance that the
   other server is busy (its utilisation under the model) to every iteration;
4. **simulate** the replay's requests with the cluster simulator (``harness.cluster``, one
   ``LLMCore`` per instance) under the server's batching, given as an ``EngineConfig``:
   ``transformers serve`` without continuous batching runs one ``generate()`` at a time, in
   arrival order (``transformers/cli/serving/utils.py`` ``InferenceThread``), i.e.
   ``max_num_seqs = 1``;
5. **replay** the same requests live (``harness.live.replay_tasks``: open loop, streamed calls,
   random-token prompts of the requests' exact lengths);

at each load (the busier stage's utilisation under the calibrated model), and reports
simulated vs measured TTFT and TPOT (per call), E2E (per request) and goodput (share of
requests within ``slo_factor`` x the predicted unloaded E2E), with the profiler-only
prediction (no serving overhead) beside them. The configuration (:class:`LoopConfig`, its
shapes and sizes) and steps 1-3 live in ``harness.closedloop_model``; import them from there.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.closedloop_model import (LoopConfig, Overheads, build_model, busy_share, calibrate, call_service_s,
                                      probe_overheads, profile)
from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from profiler.engine import EngineConfig
from selector.deployment import InstanceSpec, Route

METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "goodput")


# ---- 4-5: requests, simulation, replay ------------------------------------------------------
A, B = "loop/a/0", "loop/b/0"


def loop_tasks(cfg: LoopConfig, spec: Any, gpus: tuple[int, ...] = ()) -> tuple[list[InstanceSpec], list[SimTask]]:
    insts = [InstanceSpec(A, spec.name, 1, 1, gpus, 1.0), InstanceSpec(B, spec.name, 1, 1, gpus, 1.0)]
    stages = tuple(SimStage(name, 1, s.prompt_tokens, s.output_tokens, (Route((iid,)),))
                   for name, iid, s in (("a", A, cfg.stages[0]), ("b", B, cfg.stages[1])))
    return insts, [SimTask("loop", math.inf, stages)]


def workload(cfg: LoopConfig, rate_rps: float, seed: int) -> Workload:
    """Poisson arrivals at ``rate_rps``; token scales ~ U[1-s, 1+s] per request (both stages)."""
    rng = np.random.default_rng(seed)
    n = cfg.requests
    arr = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    arr -= arr[0]
    s = cfg.size_spread
    return Workload(arr, np.zeros(n, dtype=np.int64), rng.uniform(1 - s, 1 + s, n), rng.uniform(1 - s, 1 + s, n),
                    np.full(n, 0.5))


class _Recording(ClusterSim):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.finished: list = []

    def _done(self, call, now):
        self.finished.append(call)
        return super()._done(call, now)


#: transformers serve (and torchserve): one generate() at a time; the KV cache never binds there
ENGINE = EngineConfig(max_num_seqs=1, kv_capacity_tokens=1 << 20)


def simulate(cfg: LoopConfig, step: Any, insts, tasks, wl: Workload, slo_s: float) -> dict:
    sim = _Recording(gpu=cfg.gpu, instances=insts, tasks=tasks, engine=ENGINE, step_override=step)
    res = sim.run(wl)
    calls = [c for c in sim.finished if not c.failed]
    ttft = [c.first_s - c.arrival_s for c in calls]
    tpot = [(c.done_s - c.first_s) / (c.output - 1) for c in calls if c.output > 1]
    e2e = res["done_s"] - wl.arrival_s
    return _summary(ttft, tpot, e2e[~np.isnan(e2e)], len(wl), slo_s)


def _summary(ttft, tpot, e2e, n: int, slo_s: float) -> dict:
    e2e = np.asarray(e2e, dtype=float)
    return {"ttft_mean_s": float(np.mean(ttft)), "tpot_mean_s": float(np.mean(tpot)),
            "e2e_mean_s": float(e2e.mean()) if e2e.size else None,
            "e2e_p50_s": float(np.percentile(e2e, 50)) if e2e.size else None,
            "e2e_p99_s": float(np.percentile(e2e, 99)) if e2e.size else None,
            "goodput": float((e2e <= slo_s).sum() / n), "completed": int(e2e.size)}


def replay(cfg: LoopConfig, endpoints: dict, insts, tasks, wl: Workload, slo_s: float) -> dict:
    from harness.live import LiveSettings, replay_tasks
    res = replay_tasks(tasks, insts, wl, endpoints=endpoints, settings=LiveSettings(seed=cfg.seed, max_concurrency=1024))
    ok = [c for c in res.calls if c["error"] is None]
    e2e = [r["latency_s"] for r in res.requests if not r["failed"]]
    out = _summary([c["ttft_s"] for c in ok if c["ttft_s"] is not None],
                   [c["tpot_s"] for c in ok if c["tpot_s"] is not None], e2e, len(wl), slo_s)
    out.update(failed=res.summary["failed"], call_faults=res.summary["call_faults"],
               dispatch_lag_max_s=res.summary["dispatch_lag_max_s"])
    return out


# ---- the loop ---------------------------------------------------------------------------
def run_loop(cfg: LoopConfig, out: Path, *, log: Callable[[str], None] | None = None) -> dict:
    """The whole loop; writes ``closed_loop.json`` to ``out`` and returns it. ``log`` gets one line
    per stage (default: this module's logger at INFO)."""
    log = log or logging.getLogger(__name__).info
    from harness.servers.launcher import Fleet, ServerSpec
    from harness.servers.deploy import endpoints_from_fleet
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    path, spec = build_model(cfg, out / "model")
    gpus = (0,) if cfg.device.startswith("cuda") else ()
    env = {"OMP_NUM_THREADS": str(cfg.threads), "MKL_NUM_THREADS": str(cfg.threads), "TRANSFORMERS_VERBOSITY": "error"}
    specs = {iid: ServerSpec(name=iid.replace("/", "."), backend=cfg.server, model=str(path), port=cfg.base_port + k,
                             gpus=gpus, dtype=cfg.dtype, engine=ENGINE, env=env, startup_timeout_s=cfg.startup_timeout_s)
             for k, iid in enumerate((A, B))}
    with Fleet(list(specs.values()), log_dir=out / "servers") as fleet:
        eps = endpoints_from_fleet(fleet, specs, timeout_s=cfg.timeout_s, retries=0)
        log(f"servers up ({time.monotonic() - t0:.0f} s); profiling {spec.name} on {cfg.device}")
        rows = profile(cfg, spec)
        step, cal = calibrate(cfg, spec, rows)
        log(f"calibrated: {_cal_text(cal)}")
        none = Overheads(0.0, 0.0, 0.0, 0.0)
        over, probes = probe_overheads(step, eps, cfg) if cfg.overhead else (none, [])
        log(f"serving overhead: alone {1e3 * over.alone_call_s:.1f} ms per call + {1e3 * over.alone_step_s:.2f} ms "
            f"per iteration; all busy {1e3 * over.busy_call_s:.1f} + {1e3 * over.busy_step_s:.2f} ms")
        insts, tasks = loop_tasks(cfg, spec, gpus)
        alone = over.at(step, 0.0)
        service = [call_service_s(alone, s.prompt_tokens, s.output_tokens) for s in cfg.stages]
        slo = cfg.slo_factor * sum(service)          # rates and SLO from the servers alone
        loads = []
        for k, load in enumerate(cfg.loads):
            rate = load / max(service)
            share = busy_share(rate, service)
            served = over.at(step, share)
            wl = workload(cfg, rate, cfg.seed + k)
            sim = simulate(cfg, served, insts, tasks, wl, slo)
            bare = simulate(cfg, step, insts, tasks, wl, slo)
            load0 = os.getloadavg()[0]
            live = replay(cfg, eps, insts, tasks, wl, slo)
            err = {m: (100.0 * (sim[m] - live[m]) / live[m] if live[m] else None) for m in METRICS}
            loads.append({"load": load, "rate_rps": rate, "busy_share": share, "simulated": sim,
                          "profiler_only": bare, "measured": live, "error_pct": err,
                          "overhead_per_call_s": served.per_call_s, "overhead_per_step_s": served.per_step_s,
                          "machine_loadavg_1m": [load0, os.getloadavg()[0]]})
            log(f"load {load:g} ({rate:.3f} req/s, other server busy {share:.2f}): " + ", ".join(
                f"{m} sim {sim[m]:.4g} / live {live[m]:.4g}" for m in METRICS))
        for ep in eps.values():
            ep.client.close()
    result = {"config": cfg.model_dump(mode="json"), "model": spec.model_dump(), "calibration": cal,
              "serving_overhead": {**vars(over), "probes": probes},
              "service_s": service, "latency_slo_s": slo, "loads": loads, "elapsed_s": time.monotonic() - t0}
    (out / "closed_loop.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def summary_md(result: dict) -> str:
    """The side-by-side table of a run."""
    def f(v, scale=1.0, d=3):
        return "-" if v is None else f"{v * scale:.{d}f}"
    lines = ["| load | rate req/s | metric | simulated | measured | error % | profiler only |", "|---|---|---|---|---|---|---|"]
    for ld in result["loads"]:
        for m, name, sc in (("ttft_mean_s", "TTFT mean ms", 1e3), ("tpot_mean_s", "TPOT mean ms", 1e3),
                            ("e2e_mean_s", "E2E mean s", 1.0), ("goodput", "goodput", 1.0)):
            e = ld["error_pct"][m]
            lines.append(f"| {ld['load']:g} | {ld['rate_rps']:.3f} | {name} | {f(ld['simulated'][m], sc)} | "
                         f"{f(ld['measured'][m], sc)} | {'-' if e is None else f'{e:+.1f}'} | "
                         f"{f(ld['profiler_only'][m], sc)} |")
    o = result["serving_overhead"]
    lines += ["", f"Latency SLO {result['latency_slo_s']:.3f} s; serving overhead per call + per iteration: "
              f"{1e3 * o['alone_call_s']:.1f} + {1e3 * o['alone_step_s']:.2f} ms alone, "
              f"{1e3 * o['busy_call_s']:.1f} + {1e3 * o['busy_step_s']:.2f} ms all busy (weighted by the other "
              f"server's utilisation: " + ", ".join(f"{ld['busy_share']:.2f}" for ld in result["loads"]) + "); "
              f"{_cal_text(result['calibration'])}; machine load average "
              + ", ".join(f"{ld['machine_loadavg_1m'][0]:.1f}" for ld in result["loads"]) + " at the loads' start."]
    return "\n".join(lines) + "\n"


def _cal_text(cal: dict) -> str:
    if cal.get("fitted") is None:
        return f"not fitted ({cal.get('note')})"
    return (f"calibration TTFT MAPE {cal['ttft_s_mape_pct_before']:.1f}% -> {cal['ttft_s_mape_pct_after']:.1f}%, "
            f"TPOT {cal['tpot_s_mape_pct_before']:.1f}% -> {cal['tpot_s_mape_pct_after']:.1f}% ({cal['rows']} rows)")
