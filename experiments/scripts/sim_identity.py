"""Whether a change to the simulator kept its behaviour bit for bit (issue 22 item 7).

``dump OUT.npz``: the per-call times (arrival, admission, first token, done, failed) of the
``bench_sim`` what-if cases (vllm, sarathi), of five more ``harness.simulate`` runs (vllm-v1 on the
code trace, padded with two round-robin replicas, vllm-v1 with a small cache and a long-prefill cap
under Poisson load, vllm in a closed loop, sarathi with a small cache: preemptions in the last
three), each instance's iterations and preemptions, and the per-request done times and event
counts of the ``bench_sim`` cluster case and of a 16-GPU ``sim_scaling`` fleet for 300 s; every run's
instance busy times (``LLMCore.busy_s``; the cluster runs' GPU busy times too).
``compare A.npz B.npz``: every array byte for byte; exit 1 on any difference.

Run ``dump`` from each checkout (``cd CHECKOUT && PYTHONPATH=. python
experiments/scripts/sim_identity.py dump /tmp/x.npz``), then ``compare``.
"""
from __future__ import annotations

import sys

import numpy as np

RUNS = (  # name, trace, SimulateConfig fields, engine fields
    ("whatif-vllm", "conv", dict(model="llama-2-70b", gpu="a100-80gb", tp=2), dict(scheduler="vllm")),
    ("whatif-sarathi", "conv", dict(model="llama-2-70b", gpu="a100-80gb", tp=2), dict(scheduler="sarathi")),
    ("v1-default-code", "code", dict(model="llama-3.1-8b", gpu="a100-80gb", max_requests=6000), {}),
    ("padded-rr2", "conv", dict(model="llama-3.1-8b", gpu="a6000", replicas=2, router="round-robin",
                                max_requests=6000), dict(scheduler="padded")),
    ("v1-kvsmall-rate", "conv", dict(model="llama-3.1-8b", gpu="a100-80gb", max_requests=5000, rate_rps=8),
     dict(kv_capacity_tokens=8000, long_prefill_token_threshold=256)),
    ("vllm-closed", "code", dict(model="llama-3.1-8b", gpu="a100-80gb", max_requests=3000, concurrency=64),
     dict(scheduler="vllm", kv_capacity_tokens=12000)),
    ("sarathi-kvsmall", "code", dict(model="llama-3.1-8b", gpu="a100-80gb", max_requests=3000, rate_rps=6),
     dict(scheduler="sarathi", kv_capacity_tokens=9000)),
)


def dump(path: str) -> None:
    import harness.cluster as hc
    from experiments.kinds import bench_sim, sim_scaling
    from harness.simulate import SimulateConfig, simulate
    from harness.trace import azure_trace_path, load_trace
    from profiler.engine import EngineConfig

    out: dict[str, np.ndarray] = {}
    traces = {k: load_trace(azure_trace_path(k)) for k in ("conv", "code")}
    for name, trace, cfg, eng in RUNS:
        r = simulate(traces[trace], SimulateConfig(**cfg, engine=EngineConfig(**eng)))
        for k in ("arrival_s", "sched_s", "first_s", "done_s", "failed"):
            out[f"{name}/{k}"] = r.table[k]
        out[f"{name}/iters"] = np.array([i.iterations for i in r.instances] + [i.preemptions for i in r.instances])
        out[f"{name}/busy_s"] = np.array([i.busy_s for i in r.instances])
        print(name, f"{r.summary['wall_s']:.2f} s", r.summary["events"], "events", flush=True)
    run = hc.ClusterSim.run
    for name, case in (("cluster", bench_sim.cluster),
                       ("scaling16", lambda: sim_scaling.run_size(sim_scaling.Params(sizes_gpus=[16], duration_s=300),
                                                                  16, 0))):
        def keep(self, work, name=name):
            res = run(self, work)
            out[f"{name}/done_s"], out[f"{name}/failed"] = res["done_s"].copy(), res["failed"].copy()
            out[f"{name}/events"] = np.array([self.events])
            out[f"{name}/busy_s"] = np.array([i.busy_s for i in self.instances.values()]
                                             + list(self.gpu_busy_s.values()))
            return res
        hc.ClusterSim.run = keep
        try:
            case()
        finally:
            hc.ClusterSim.run = run
        print(name, int(out[f"{name}/events"][0]), "events", flush=True)
    np.savez(path, **out)


def compare(a_path: str, b_path: str) -> int:
    a, b = np.load(a_path), np.load(b_path)
    differ = sorted(set(a.files) ^ set(b.files))
    for k in sorted(set(a.files) & set(b.files)):
        x, y = a[k], b[k]
        if x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes():
            differ.append(k)
    for k in differ:
        print("DIFFERENT", k)
    print(f"{len(a.files) - len(differ)}/{len(a.files)} arrays bit-for-bit identical")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        print(__doc__.strip().splitlines()[0], "\nusage: sim_identity.py dump OUT.npz | compare A.npz B.npz",
              file=sys.stderr)
        sys.exit(2)
