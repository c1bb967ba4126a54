"""The paper experiment's cells on real servers (the harness's ``servers`` backend): deploy the
tasks in sequence with each selector (as ``paper_goodput_cost``), start one OpenAI-compatible
server per deployed instance (or use the user's ``endpoints``), replay each (trace, load) cell in
wall-clock time with ``harness.live.replay_live`` and report the simulator's metrics.

Servers: ``model_paths`` maps catalog model names to local checkpoints (nothing is downloaded);
each server gets its instance's TP/PP, ``CUDA_VISIBLE_DEVICES``, the experiment's ``engine``
configuration (``profiler.engine.EngineConfig``; prefix caching off) and, on GPUs, its planned
share of each GPU's memory (``harness.servers.deploy.memory_share``), plus ``extra_args`` (all
servers) and ``instance_args`` (per instance id). ``stand_in_model`` serves
every catalog model with one local checkpoint on CPU instead (``tiny-random-llama`` builds the
tests' random Llama in the run folder): the latencies are then the stand-in's, not the catalog
models', and the output says so. Outputs: ``results.parquet`` (one row per cell, the simulator's
columns plus the live ones), ``tasks.parquet``, ``requests.parquet``, ``calls.parquet``,
``deployments.parquet``, ``summary.md``, server logs in ``servers/``. Cells are written
atomically and skipped on a rerun with ``--run-id``.
"""
from __future__ import annotations

import json
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from flowmaker.entry import UserError
from experiments.kinds.paper_goodput_cost import deploy_all, load_traces, resolve_all
from profiler.engine import EngineConfig
from selector.taskspec import TaskList

TINY = "tiny-random-llama"
BANNER = ("STAND-IN MODEL: every catalog model is served by {model} on CPU; latencies, goodput and "
          "residency are those of the stand-in, NOT of the catalog models (memory and cost use the plan's GB)")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tasks: TaskList
    cluster: str = "a6000x8"
    selectors: list[str] = Field(min_length=1, description="registry names; 'name:setting' for routellm")
    traces: list[str] = Field(default=["conv"])
    loads_pct: list[float] = Field(default=[100])
    requests: dict[str, int] = Field(default={"conv": 20}, description="requests per cell, by trace")
    price_per_gb_s: float = Field(default=1e-6, ge=0)
    time_limit_s: float = Field(default=30.0, gt=0)
    data_dir: str | None = None
    # where the instances run
    backend: Literal["transformers", "vllm", "trtllm"] = Field("vllm", description="server binary launched")
    model_paths: dict[str, str] = Field(default_factory=dict, description="catalog model -> local checkpoint dir")
    stand_in_model: str | None = Field(None, description=f"one local checkpoint for every model, on CPU ({TINY!r}: "
                                                         "build the random test Llama)")
    endpoints: dict[str, str] = Field(default_factory=dict, description="{instance id: URL} of running servers; "
                                                                         "one selector only")
    exact_output: bool = Field(True, description="ask the server to ignore EOS (exactly max_tokens)")
    base_port: int = Field(8100, ge=1024, le=65000)
    dtype: str = "auto"
    startup_timeout_s: float = Field(300.0, gt=0)
    extra_args: list[str] = Field(default_factory=list, description="appended to every server's command line")
    instance_args: dict[str, list[str]] = Field(default_factory=dict, description="{instance id: extra arguments}")
    engine: EngineConfig | None = Field(None, description="every server's engine settings (None: the backend's "
                                                          "default; prefix caching off either way)")
    memory_shares: bool = Field(True, description="give each GPU instance its planned share of GPU memory")
    chat: bool = Field(False, description="send /v1/chat/completions instead of /v1/completions")
    api_key_env: str | None = Field(None, description="environment variable holding the servers' API key")
    # replay
    time_scale: float = Field(1.0, gt=0, description="multiplies arrival times (> 1: lighter load)")
    timeout_s: float = Field(60.0, gt=0, description="per call, per attempt")
    retries: int = Field(1, ge=0)
    max_concurrency: int = Field(64, ge=1)
    stream: bool = Field(True, description="stream calls (TTFT/TPOT per call)")
    max_prompt_tokens: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(None, ge=1)


def _servers(params: Params, ctx: RunContext, label: str, instances, gpu: str):
    """``(fleet or None, {instance id: Endpoint})`` for one selector's instances."""
    import os

    from harness.servers.launcher import Fleet
    from harness.servers.deploy import endpoints_from_fleet, endpoints_from_urls, specs_for_instances
    client = {"chat": params.chat, "max_connections": params.max_concurrency}
    if params.endpoints:
        try:
            backend = params.backend if params.exact_output else None
            key = os.environ.get(params.api_key_env) if params.api_key_env else None
            return None, endpoints_from_urls(params.endpoints, timeout_s=params.timeout_s, retries=params.retries,
                                             backend=backend, api_key=key, **client)
        except Exception as exc:
            raise UserError(f"field 'params.endpoints': {type(exc).__name__}: {exc}") from None
    stand_in = params.stand_in_model
    if stand_in == TINY:
        from orchestrator.engines.real.tinyllm import build_tiny_llama
        stand_in = str(build_tiny_llama(ctx.run_dir / "stand_in_model"))
    try:
        gpus = [i for i in instances if i.gpus]
        specs = specs_for_instances(instances, model_paths=params.model_paths, stand_in=stand_in,
                                    backend=params.backend, base_port=params.base_port, dtype=params.dtype,
                                    startup_timeout_s=params.startup_timeout_s, extra_args=tuple(params.extra_args),
                                    engine=params.engine, require_local=True, instance_args=params.instance_args,
                                    gpu=gpu if params.memory_shares and stand_in is None and gpus else None,
                                    api_key_env=params.api_key_env)
    except (KeyError, ValueError) as exc:
        field = "model_paths" if isinstance(exc, KeyError) else "backend"
        raise UserError(f"field 'params.{field}': {exc.args[0]}") from None
    fleet = Fleet(list(specs.values()), log_dir=ctx.run_dir / "servers" / label)
    try:
        fleet.start()           # a failure or Ctrl-C inside stops the servers already up
    except Exception as exc:
        raise UserError(f"{label}: servers did not start: {str(exc).splitlines()[0]} "
                        f"(logs: {ctx.run_dir / 'servers' / label})") from None
    try:
        return fleet, endpoints_from_fleet(fleet, specs, timeout_s=params.timeout_s, retries=params.retries,
                                           exact_output=params.exact_output, **client)
    except BaseException:       # Ctrl-C or an error after the start: the caller never gets the fleet
        fleet.stop()
        raise


def run(params: Params, ctx: RunContext) -> None:
    from harness.live import LiveSettings, replay_live
    from harness.servers.calls import ServerError
    from harness.workload import cell_workload

    if params.endpoints and len(params.selectors) > 1:
        raise UserError("field 'params.endpoints': running servers serve one deployment; give one selector")
    if not params.endpoints and params.stand_in_model is None and not params.model_paths:
        raise UserError("field 'params.model_paths': no local checkpoints given (or set stand_in_model / endpoints)")
    if params.stand_in_model is not None:
        print(BANNER.format(model=params.stand_in_model))
    problems, gpu, tokens = resolve_all(params)
    deps = deploy_all(params, problems, ctx)
    traces = load_traces(params, ctx.seed)
    for kind in params.traces:
        if kind not in params.requests:
            raise UserError(f"field 'params.requests': no request count for trace '{kind}'")
    settings = LiveSettings(time_scale=params.time_scale, max_concurrency=params.max_concurrency,
                            max_prompt_tokens=params.max_prompt_tokens, max_output_tokens=params.max_output_tokens,
                            seed=ctx.seed, stream=params.stream)
    rates = [p.task.arrival_rate_rps for p in problems]
    cells = [(s, k, ld) for s in deps for k in params.traces for ld in params.loads_pct]
    bar = tqdm(total=len(cells), disable=not ctx.progress, desc="cells", unit="cell")
    for label in deps:
        todo = [(k, ld) for s, k, ld in cells if s == label and not ctx.cell_path(_cell(s, k, ld)).exists()]
        bar.update(len(params.traces) * len(params.loads_pct) - len(todo))
        if not todo:
            continue
        seen, dl = [p for p, _ in deps[label]], [plan.deployment for _, plan in deps[label]]
        fleet, eps = None, {}
        try:
            fleet, eps = _servers(params, ctx, label, [i for d in dl if d is not None for i in d.instances], gpu)
            for kind, load in todo:
                trace, source = traces[kind]
                wl = cell_workload(trace, rates, load=load / 100.0, n_requests=params.requests[kind], seed=ctx.seed)
                try:
                    res = replay_live(seen, dl, tokens, wl, endpoints=eps, price_per_gb_s=params.price_per_gb_s,
                                      settings=settings)
                except KeyError as exc:
                    raise UserError(f"field 'params.endpoints': {exc.args[0]}") from None
                except ServerError as exc:      # a server failed its calibration probes, before the clock
                    raise UserError(f"{label}: {exc}") from None
                name = _cell(label, kind, load)
                meta = {"selector": label, "trace": kind, "load_pct": load}
                atomic_write_parquet(ctx.cell_path(name + "__requests"), pd.DataFrame([{**meta, **r} for r in res.requests]))
                atomic_write_parquet(ctx.cell_path(name + "__calls"), pd.DataFrame([{**meta, **c} for c in res.calls]))
                atomic_write_parquet(ctx.cell_path(name), pd.DataFrame([{
                    **meta, "trace_source": source, "backend": "servers", "server": params.backend,
                    "stand_in_model": params.stand_in_model, **res.summary, "per_task": json.dumps(res.per_task)}]))
                bar.set_postfix_str(f"{label} {kind} {load:g}%: {res.summary['completed']}/{res.summary['requests']} done")
                bar.update()
        finally:
            for ep in eps.values():
                ep.client.close()
            if fleet is not None:
                fleet.stop()
    bar.close()
    _collect(params, ctx, cells)


def _cell(label: str, kind: str, load: float) -> str:
    return f"{label}__{kind}__{load:g}"


def _collect(params: Params, ctx: RunContext, cells) -> None:
    def read(suffix: str) -> pd.DataFrame:
        return pd.concat([pd.read_parquet(ctx.cell_path(_cell(*c) + suffix)) for c in cells], ignore_index=True)
    df = read("")
    atomic_write_parquet(ctx.run_dir / "results.parquet", df.drop(columns=["per_task"]))
    tasks = [dict(selector=r.selector, trace=r.trace, load_pct=r.load_pct, **t)
             for r in df.itertuples() for t in json.loads(r.per_task)]
    atomic_write_parquet(ctx.run_dir / "tasks.parquet", pd.DataFrame(tasks))
    atomic_write_parquet(ctx.run_dir / "requests.parquet", read("__requests"))
    atomic_write_parquet(ctx.run_dir / "calls.parquet", read("__calls"))
    text = summary_md(df, params)
    atomic_write_text(ctx.run_dir / "summary.md", text)
    print(text)


def summary_md(df: pd.DataFrame, params: Params) -> str:
    lines = ["# Live replay on servers: summary", ""]
    if params.stand_in_model is not None:
        lines += ["**" + BANNER.format(model=params.stand_in_model) + ".**", ""]
    lines += [f"Server: {params.backend}{' (user endpoints)' if params.endpoints else ''}; time scale "
              f"{params.time_scale:g}; trace source: {', '.join(sorted(set(df.trace_source)))}.", "",
              "| selector | trace | load | requests | completed | failed | goodput | latency mean / p50 / p99 s | "
              "TTFT / TPOT mean s | instances | GB reserved | unplaced | residency s | cost USD | calls | call faults | "
              "dead instances |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        lat = " / ".join("-" if v is None or pd.isna(v) else f"{v:.3f}"
                         for v in (r.latency_mean_s, r.latency_p50_s, r.latency_p99_s))
        tt = " / ".join("-" if v is None or pd.isna(v) else f"{v:.4f}" for v in (r.ttft_mean_s, r.tpot_mean_s))
        lines.append(f"| {r.selector} | {r.trace} | {r.load_pct:g}% | {r.requests} | {r.completed} | {r.failed} | "
                     f"{r.goodput:.3f} | {lat} | {tt} | {r.instances} | {r.gb_reserved:.1f} | {r.tasks_unplaced} | "
                     f"{r.residency_s:.2f} | {r.cost_usd:.4g} | {r.calls} | {r.call_faults or '-'} | "
                     f"{r.dead_instances or '-'} |")
    lines += ["", "Metrics as the simulator's (docs/metrics.md), in wall seconds; goodput compares the measured "
              "latency with each task's SLO."]
    return "\n".join(lines) + "\n"
