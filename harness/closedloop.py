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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.closedloop_meter import RESCALED, CpuMeter, rescaled
from harness.closedloop_report import cal_text, other_rules, spread
from harness.closedloop_model import (LoopConfig, Overheads, ServedStep, build_model, busy_share, calibrate,
                                      call_service_s, probe_overheads, profile, traffic_overheads)
from harness.cluster import ClusterSim, SimStage, SimTask, Workload
from profiler.engine import EngineConfig
from selector.deployment import InstanceSpec, Route

METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "goodput")
RULES = ("probe", "previous", "both")         # LoopConfig.calibrate_from


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
        self.finished.append((call, self.stage_of(call)))     # the stage it served (the request moves on)
        return super()._done(call, now)


#: transformers serve (and torchserve): one generate() at a time; the KV cache never binds there
ENGINE = EngineConfig(max_num_seqs=1, kv_capacity_tokens=1 << 20)


@dataclass
class Samples:
    """Per-call and per-request samples of one source (simulated or measured) over some blocks."""
    calls: list[dict] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    requests: int = 0
    extra: dict = field(default_factory=dict)

    def add(self, other: Samples) -> None:
        self.calls += other.calls
        self.e2e_s += other.e2e_s
        self.requests += other.requests
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v if isinstance(v, int) else v

    def summary(self, slo_s: float) -> dict:
        ttft = [c["ttft_s"] for c in self.calls if c["ttft_s"] is not None]
        tpot = [c["tpot_s"] for c in self.calls if c["tpot_s"] is not None]
        e2e = np.asarray(self.e2e_s, dtype=float)
        return {"ttft_mean_s": float(np.mean(ttft)), "tpot_mean_s": float(np.mean(tpot)),
                "e2e_mean_s": float(e2e.mean()) if e2e.size else None,
                "e2e_p50_s": float(np.percentile(e2e, 50)) if e2e.size else None,
                "e2e_p99_s": float(np.percentile(e2e, 99)) if e2e.size else None,
                "goodput": float((e2e <= slo_s).sum() / self.requests), "completed": int(e2e.size), **self.extra}


def simulate(cfg: LoopConfig, step: Any, insts, tasks, wl: Workload) -> Samples:
    sim = _Recording(gpu=cfg.gpu, instances=insts, tasks=tasks, engine=ENGINE, step_override=step)
    res = sim.run(wl)
    calls = [{"request": sim.request_of(c), "stage_index": stage, "queue_s": c.sched_s - c.arrival_s,
              "ttft_s": c.first_s - c.arrival_s, "tpot_s": (c.done_s - c.first_s) / (c.output - 1) if c.output > 1
              else None, "e2e_s": c.done_s - c.arrival_s} for c, stage in sim.finished if not c.failed]
    e2e = res["done_s"] - wl.arrival_s
    return Samples(calls, [float(x) for x in e2e[~np.isnan(e2e)]], len(wl))


def replay(cfg: LoopConfig, endpoints: dict, insts, tasks, wl: Workload) -> Samples:
    from harness.live import LiveSettings, replay_tasks
    res = replay_tasks(tasks, insts, wl, endpoints=endpoints, settings=LiveSettings(seed=cfg.seed, max_concurrency=1024))
    ok = [c for c in res.calls if c["error"] is None]
    _fifo_queue(ok)
    calls = [{k: c[k] for k in ("request", "stage_index", "instance", "start_s", "end_s", "queue_s", "ttft_s",
                                "tpot_s", "e2e_s", "prompt_tokens", "output_tokens")} for c in ok]
    return Samples(calls, [r["latency_s"] for r in res.requests if not r["failed"]], len(wl),
                   {"failed": res.summary["failed"], "call_faults": res.summary["call_faults"],
                    "dispatch_lag_max_s": res.summary["dispatch_lag_max_s"]})


def _fifo_queue(calls: list[dict]) -> None:
    """Each call's wait in its server's queue (``queue_s``), derived: the servers run one call at a
    time in arrival order, so a call starts when it was sent or when the one before it on the same
    server ended, whichever is later (the client cannot observe it directly)."""
    last: dict[str, float] = {}
    for c in sorted(calls, key=lambda c: c["start_s"]):
        begin = max(c["start_s"], last.get(c["instance"], -math.inf))
        c["queue_s"] = begin - c["start_s"]
        last[c["instance"]] = c["end_s"]


def blocks(wl: Workload, size: int | None) -> list[Workload]:
    """``wl`` cut into consecutive blocks of ``size`` requests, each re-based to start at 0."""
    n = len(wl)
    size = size or n
    out = []
    for lo in range(0, n, size):
        sl = slice(lo, min(lo + size, n))
        arr = wl.arrival_s[sl] - wl.arrival_s[lo]
        out.append(Workload(arr, wl.task[sl], wl.prompt_scale[sl], wl.output_scale[sl], wl.difficulty[sl]))
    return out


def server_cpus(cfg: LoopConfig) -> list[tuple[int, ...]]:
    """The cores each server is pinned to (``cfg.pin_cores``): round-robin over this process's set."""
    if not cfg.pin_cores or not hasattr(os, "sched_getaffinity"):
        return [(), ()]
    mine = sorted(os.sched_getaffinity(0))
    return [(mine[k % len(mine)],) for k in range(2)]


# ---- the loop ---------------------------------------------------------------------------
@dataclass
class _Bench:
    """What the replay blocks share: the loop's configuration, servers, model and step."""
    cfg: LoopConfig
    eps: dict
    step: Any
    insts: list
    tasks: list
    service: list[float]
    slo_s: float
    log: Callable[[str], None]
    records: list[dict] = field(default_factory=list)
    previous: list[dict] = field(default_factory=list)     # the measured calls of the block replayed last
    pids: list[int] = field(default_factory=list)          # the servers' processes (CPU share meter)
    share: dict = field(default_factory=dict)              # their CPU share in the last probe and block

    def probe(self, over0: Overheads) -> Overheads:
        """The probes re-taken now (without blocks: ``over0``, the first ones)."""
        if self.cfg.block_requests is None:
            return over0
        with CpuMeter(self.pids) as meter:
            over = probe_overheads(self.step, self.eps, self.cfg, warm_up=False)[0]
        self.share["probe"] = meter.window.share
        return over

    def steps(self, over: Overheads, share: float) -> dict[str, ServedStep]:
        """The next block's step model under every calibration rule (``RULES``): the probes
        ``over``, the previous block's measured calls (the probes where there is none yet), or the
        mean of the two (without blocks: the probes)."""
        probe = over.at(self.step, share)
        if self.cfg.block_requests is None or not self.previous:
            return dict.fromkeys(RULES, probe)
        call, step = traffic_overheads(self.step, self.previous)
        return {"probe": probe, "previous": ServedStep(self.step, per_step_s=step, per_call_s=call),
                "both": ServedStep(self.step, per_step_s=(step + probe.per_step_s) / 2,
                                   per_call_s=(call + probe.per_call_s) / 2)}

    def block(self, steps: dict[str, ServedStep], wl: Workload, tag: dict) -> tuple[dict[str, Samples], Samples, dict]:
        """Simulate (under every rule) and replay one block; the judged rule's per-call records and
        the measured ones go to ``records``; the measured calls calibrate the next block."""
        rule = self.cfg.calibrate_from
        sims = {r: simulate(self.cfg, st, self.insts, self.tasks, wl) for r, st in steps.items()}
        load0 = os.getloadavg()[0]
        with CpuMeter(self.pids) as meter:
            live = replay(self.cfg, self.eps, self.insts, self.tasks, wl)
        cpu = meter.window
        at = self.share.get("block" if self.previous else "probe")
        sims[RESCALED] = simulate(self.cfg, rescaled(steps["previous"], at, cpu.share), self.insts, self.tasks, wl)
        self.previous, self.share["block"] = live.calls, cpu.share
        served = steps[rule]
        info = {**tag, "requests": len(wl), "machine_loadavg_1m": [load0, os.getloadavg()[0]], **cpu.as_dict(),
                "probe_server_cpu_share": self.share.get("probe"),
                "overhead_per_call_s": served.per_call_s, "overhead_per_step_s": served.per_step_s,
                "overheads_by_rule": {r: [st.per_call_s, st.per_step_s] for r, st in steps.items()}}
        for src, smp in (("simulated", sims[rule]), ("measured", live)):
            self.records += [{**tag, "source": src, **c} for c in smp.calls]
        return sims, live, info

    def load(self, over0: Overheads, load: float, k: int, repeat: int) -> dict:
        cfg = self.cfg
        over, basis = self.probe(over0), self.service
        if cfg.rate_from == "current":      # the servers' speed now, by the judged rule, defines the load
            now = self.steps(over, 0.0)[cfg.calibrate_from]
            basis = [call_service_s(now, s.prompt_tokens, s.output_tokens) for s in cfg.stages]
        rate = load / max(basis)
        share = busy_share(rate, basis)
        wl = workload(cfg, rate, cfg.seed + k + 1000 * repeat)
        sims, live, bare = {r: Samples() for r in (*RULES, RESCALED)}, Samples(), Samples()
        infos = []
        for b, wlb in enumerate(blocks(wl, cfg.block_requests)):
            over = over if b == 0 else self.probe(over0)
            s, m, info = self.block(self.steps(over, share), wlb, {"repeat": repeat, "load": load, "block": b})
            live.add(m), bare.add(simulate(cfg, self.step, self.insts, self.tasks, wlb))
            for r, smp in sims.items():
                smp.add(s[r])
            infos.append(info)
        ls = live.summary(self.slo_s)
        by_rule = {r: smp.summary(self.slo_s) for r, smp in sims.items()}
        ss, err = by_rule[cfg.calibrate_from], _errors(by_rule[cfg.calibrate_from], ls)
        loads = [x for i in infos for x in i["machine_loadavg_1m"]]
        self.log(f"repeat {repeat} load {load:g} ({rate:.3f} req/s, other server busy {share:.2f}, machine load "
                 f"{min(loads):.1f}-{max(loads):.1f}): " + ", ".join(f"{m} sim {ss[m]:.4g} / live {ls[m]:.4g}"
                                                                     for m in METRICS))
        return {"repeat": repeat, "load": load, "rate_rps": rate, "rate_basis_service_s": basis, "busy_share": share,
                "simulated": ss,
                "profiler_only": bare.summary(self.slo_s), "measured": ls, "error_pct": err, "calibrated_from": cfg.calibrate_from,
                "other_rules": {r: {"simulated": v, "error_pct": _errors(v, ls)} for r, v in by_rule.items()
                                if r != cfg.calibrate_from},
                "overhead_per_call_s": float(np.mean([i["overhead_per_call_s"] for i in infos])),
                "overhead_per_step_s": float(np.mean([i["overhead_per_step_s"] for i in infos])),
                "machine_loadavg_1m": [infos[0]["machine_loadavg_1m"][0], infos[-1]["machine_loadavg_1m"][1]],
                "blocks": infos}


def _errors(sim: dict, live: dict) -> dict:
    return {m: (100.0 * (sim[m] - live[m]) / live[m] if live[m] else None) for m in METRICS}


def run_loop(cfg: LoopConfig, out: Path, *, log: Callable[[str], None] | None = None) -> dict:
    """The whole loop; writes ``closed_loop.json`` (and every call's record, simulated and measured,
    to ``calls.jsonl``) to ``out`` and returns it. ``log`` gets one line per stage (default: this
    module's logger at INFO)."""
    log = log or logging.getLogger(__name__).info
    from harness.servers.launcher import Fleet, ServerSpec
    from harness.servers.deploy import endpoints_from_fleet
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    path, spec = build_model(cfg, out / "model")
    gpus = (0,) if cfg.device.startswith("cuda") else ()
    env = {"OMP_NUM_THREADS": str(cfg.threads), "MKL_NUM_THREADS": str(cfg.threads), "TRANSFORMERS_VERBOSITY": "error"}
    specs = {iid: ServerSpec(name=iid.replace("/", "."), backend=cfg.server, model=str(path), port=cfg.base_port + k,
                             gpus=gpus, dtype=cfg.dtype, engine=ENGINE, env=env, startup_timeout_s=cfg.startup_timeout_s,
                             cpus=cpus)
             for k, (iid, cpus) in enumerate(zip((A, B), server_cpus(cfg)))}
    with Fleet(list(specs.values()), log_dir=out / "servers") as fleet:
        eps = endpoints_from_fleet(fleet, specs, timeout_s=cfg.timeout_s, retries=0)
        log(f"servers up ({time.monotonic() - t0:.0f} s); profiling {spec.name} on {cfg.device}")
        rows = profile(cfg, spec)
        step, cal = calibrate(cfg, spec, rows)
        log(f"calibrated: {cal_text(cal)}")
        none = Overheads(0.0, 0.0, 0.0, 0.0)
        over, probes = probe_overheads(step, eps, cfg) if cfg.overhead else (none, [])
        log(f"serving overhead: alone {1e3 * over.alone_call_s:.1f} ms per call + {1e3 * over.alone_step_s:.2f} ms "
            f"per iteration; all busy {1e3 * over.busy_call_s:.1f} + {1e3 * over.busy_step_s:.2f} ms")
        insts, tasks = loop_tasks(cfg, spec, gpus)
        alone = over.at(step, 0.0)
        service = [call_service_s(alone, s.prompt_tokens, s.output_tokens) for s in cfg.stages]
        slo = cfg.slo_factor * sum(service)          # rates and SLO from the servers alone
        bench = _Bench(cfg, eps, step, insts, tasks, service, slo, log,
                       pids=[fleet.servers[sp.name].proc.pid for sp in specs.values()])
        if not cfg.overhead:
            cfg = cfg.model_copy(update={"block_requests": None})
            bench.cfg = cfg
        result = {"config": cfg.model_dump(mode="json"), "model": spec.model_dump(), "calibration": cal,
                  "serving_overhead": {**vars(over), "probes": probes},
                  "server_cpus": [list(c) for c in server_cpus(cfg)], "service_s": service, "latency_slo_s": slo,
                  "loads": []}
        for r in range(cfg.repeats):
            order = list(enumerate(cfg.loads))
            for k, load in (order if r % 2 == 0 else order[::-1]):
                result["loads"].append(bench.load(over, load, k, r))
                _write(out, {**result, "elapsed_s": time.monotonic() - t0}, bench.records, "partial_")
        for ep in eps.values():
            ep.client.close()
    result["elapsed_s"] = time.monotonic() - t0
    _write(out, result, bench.records)
    return result


def _write(out: Path, result: dict, records: list[dict], prefix: str = "") -> None:
    """``closed_loop.json`` and ``calls.jsonl`` (``prefix`` ``partial_``: after each load, so that an
    interrupted run keeps what it measured)."""
    (out / f"{prefix}closed_loop.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    with open(out / f"{prefix}calls.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(rec) + "\n" for rec in records)
    if not prefix:
        for p in (out / "partial_closed_loop.json", out / "partial_calls.jsonl"):
            p.unlink(missing_ok=True)


def summary_md(result: dict, *, within_pct: float = 20.0) -> str:
    """The side-by-side table of a run (a repeat column when it has several), the spread of each
    load's errors over the repeats, and the machine's load per block."""
    def f(v, scale=1.0, d=3):
        return "-" if v is None else f"{v * scale:.{d}f}"
    lines = ["| repeat | load | rate req/s | metric | simulated | measured | error % | profiler only |",
             "|---|---|---|---|---|---|---|---|"]
    for ld in result["loads"]:
        for m, name, sc in (("ttft_mean_s", "TTFT mean ms", 1e3), ("tpot_mean_s", "TPOT mean ms", 1e3),
                            ("e2e_mean_s", "E2E mean s", 1.0), ("goodput", "goodput", 1.0)):
            e = ld["error_pct"][m]
            lines.append(f"| {ld.get('repeat', 0)} | {ld['load']:g} | {ld['rate_rps']:.3f} | {name} | "
                         f"{f(ld['simulated'][m], sc)} | {f(ld['measured'][m], sc)} | "
                         f"{'-' if e is None else f'{e:+.1f}'} | {f(ld['profiler_only'][m], sc)} |")
    lines += ["", *spread(result["loads"], within_pct), *other_rules(result["loads"])]
    o = result["serving_overhead"]
    lines += ["", f"Latency SLO {result['latency_slo_s']:.3f} s; serving overhead per call + per iteration "
              f"before the first load: {1e3 * o['alone_call_s']:.1f} + {1e3 * o['alone_step_s']:.2f} ms alone, "
              f"{1e3 * o['busy_call_s']:.1f} + {1e3 * o['busy_step_s']:.2f} ms all busy (weighted by the other "
              f"server's utilisation: " + ", ".join(f"{ld['busy_share']:.2f}" for ld in result["loads"]) + "); "
              f"{cal_text(result['calibration'])}; machine load average (1 min) at each load's start and end: "
              + ", ".join(f"{ld['machine_loadavg_1m'][0]:.1f}-{ld['machine_loadavg_1m'][1]:.1f}"
                          for ld in result["loads"]) + "."]
    return "\n".join(lines) + "\n"
