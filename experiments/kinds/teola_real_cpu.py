"""Real end-to-end run on CPU: naive and advanced RAG over the shipped document set
(``configs/docs_corpus``) with real engines (random tiny Llama on torch, MiniLM embeddings, a
MiniLM cross-encoder reranker, PostgreSQL + pgvector from pgserver), each app run under Teola and
under every baseline on fresh copies of the same engines, in wall-clock time.

Design (issue 26): first one isolated query per (app, scheme); then ``repeats`` rounds, each
running every (rate, app) block with the schemes in an order rotated by one per round and block,
the same Poisson arrivals for every scheme of a block. Within a block (in-process, ``interleave``)
the schemes take turns per arrival segment, the arrivals between drawn gaps longer than
``segment_gap_s``, in an order rotated per segment, each scheme on its own engines built once per
block (randomized multiple interleaved trials, Abedi and Brecht, ICPE 2017: slow phases of the shared
machine, CPU steal from other tenants included, fall on every scheme alike); where no query is in flight and every engine is idle, the wait
for the next arrival is cut to ``idle_gap_s`` (the queries meet what they would have; the machine's
idle time buys more queries). Each block records the load average (``os.getloadavg``) before and
after it, the CPU steal time during it and its wall time. ``queries.parquet``: one row per query; ``blocks.parquet``;
``calls.parquet``: every engine invocation of the blocks with its ready, dispatch, start, end and
completion times and its batch's thread CPU time (summary.md tabulates them per primitive kind for
Teola and the best baselines: ``_teola_real_calls``);
``summary.parquet`` / ``summary.md``: per (app, rate, scheme) the mean over repeats of each
repeat's mean latency with its range, Teola's speedup over the best baseline with the range of the
per-repeat ratios and a 95% paired bootstrap interval (queries paired by repeat and arrival), and the rate's regime (``saturated`` when the best baseline's mean exceeds
``saturation`` x the mean latency of its first query per block, which arrives at idle engines under
that block's own load: on a shared machine the isolated queries ran at another load). Each block (and each app's isolated queries) is a cell of
:func:`experiments.executor.run_cells`: the config's top-level ``runtime: ray`` runs it as a Ray
task, a run is resumed with ``--run-id``, and the tables are the same either way.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from experiments.context import NameList, RunContext, atomic_write_parquet, atomic_write_text
from experiments.kinds import _teola_real_calls as real_calls
from experiments.kinds import _teola_real_report as report
from flowmaker.entry import UserError
from flowmaker.names import name_problem
from orchestrator.apps import check_apps
from profiler.catalog import configs_dir

CORPUS_DIR = configs_dir() / "docs_corpus"
#: the real embedder's measured engine profile (its cost per batch of the real run's texts; configs/engines/)
EMBEDDER_PROFILE = "all-minilm-l6-v2-realtext_cpu"


SCHEMES = ["teola", "llamadist-po", "llamadist-to", "llamadistpc-po", "llamadistpc-to", "llamadist-open-po",
           "llamadist-open-to", "llamadistpc-open-po", "llamadistpc-open-to"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    apps: Annotated[NameList, AfterValidator(check_apps)] = Field(default_factory=lambda: ["naive_rag", "advanced_rag"])
    schemes: list[str] = Field(default_factory=lambda: list(SCHEMES), min_length=2,
                               description="the first is Teola; the rest are baselines")
    corpus: str = "ostvik_guide"
    n_queries: int = Field(3, ge=1, le=10_000)
    rates_rps: dict[str, list[float]] = Field(
        default_factory=lambda: {"naive_rag": [0.2, 0.4], "advanced_rag": [0.1, 0.2]},
        description="Poisson arrival rates per app; the same arrivals for every scheme of a block")
    n_paragraphs: int | None = Field(12, ge=1, description="the corpus's first paragraphs (one chunk each); None: all")
    fetch_k: int | None = Field(6, ge=1, description="chunks retrieved per (expanded) query; None: the app's")
    repeats: int = Field(3, ge=1, le=100)
    saturation: float = Field(1.6, gt=1)
    answer_tokens: int = Field(16, ge=1)
    leaf_tokens: int = Field(16, ge=1, description="tokens per tree-synthesis leaf answer")
    llm_instances: int = Field(2, ge=1)
    llm_dtype: str = "float32"
    llm_max_batch: int = Field(8, ge=1)
    embed_max_batch: int | None = Field(
        None, ge=1, description="the embedder's max efficient batch (drives stage decomposition); None: the knee "
                                "(orchestrator.engines.profiles.max_efficient_batch) of its measured profile, "
                                f"configs/engines/{EMBEDDER_PROFILE}.yaml, as the simulation of this run takes it")
    reranker: Literal["cross-encoder", "bi-encoder"] = "cross-encoder"
    torch_threads: int = Field(1, ge=1)
    cpu_cores: int | None = Field(
        None, ge=1, description="the CPU cores the in-process engines share (Teola's background work starts only while "
                                "one is free: engine_scheduler.CoreBudget); None: the cores this process may run on")
    idle_gap_s: float | None = Field(
        0.5, gt=0, description="in-process runtime: a wait with no query in flight and every engine idle is cut to "
                               "this (run_realtime's idle_gap_s): each query still meets idle engines or the same "
                               "overlap with the next ones, and the machine's idle time goes to more queries; None or "
                               "the Ray runtime: the arrivals as drawn")
    interleave: bool = Field(
        True, description="in-process runtime: a block's schemes take turns per arrival segment (runs of arrivals no "
                          "drawn gap above segment_gap_s separates), the order rotated per segment, each scheme's "
                          "engines built once per block (randomized multiple interleaved trials); False or Ray: each "
                          "scheme runs the whole block in turn")
    segment_gap_s: float = Field(3.0, gt=0, description="a drawn gap longer than this ends a segment (interleave); "
                                                        "above every unsaturated latency, so engines are idle there")
    pg_url: str | None = Field(None, description="a PostgreSQL+pgvector server; default: an embedded pgserver")
    simulation: str | None = Field(
        "teola_real_cpu_sim", description="the simulation of this deployment, a teola_apps experiment config (by "
                                          "name or path), run when the summary is written: its direction beside the "
                                          "real run's per (app, rate, baseline) in summary.md; None: no comparison")
    runtime: Literal["inprocess", "ray"] = Field(
        "inprocess", description="how a cell runs its engines: in this process, or as Ray actors (run_ray); where the "
                                 "cells run is the config's top-level runtime (experiments.executor)")
    ray_address: str | None = None
    timeout_s: float = Field(600.0, gt=0)


def embed_max_batch(params: Params) -> int:
    """``params.embed_max_batch``, or the knee of the real embedder's measured profile (16 for
    ``all-minilm-l6-v2-realtext_cpu``: 8 to 16 texts still gains 6% in texts per second)."""
    if params.embed_max_batch is not None:
        return params.embed_max_batch
    from orchestrator.engines.factory import build_instances, load_engine_spec
    return build_instances(load_engine_spec(EMBEDDER_PROFILE))[0].max_batch_size()


def cpu_cores(params: Params) -> int:
    """The CPU cores the in-process engines share: ``params.cpu_cores`` or those this process may use."""
    return params.cpu_cores or len(os.sched_getaffinity(0))


def load_corpus(name: str) -> tuple[list[str], list[str]]:
    p = CORPUS_DIR / f"{name}.yaml"
    if name_problem(name) is not None or not p.exists():
        known = ", ".join(sorted(q.stem for q in CORPUS_DIR.glob("*.yaml")))
        raise UserError(f"field 'params.corpus': unknown corpus {name!r}; known: {known}")
    raw = yaml.safe_load(p.read_text())
    return [str(x) for x in raw["paragraphs"]], [str(x) for x in raw["questions"]]


def app_for_corpus(app_name: str, n_chunks: int, params: Params):
    """The app spec with its query configuration fitted to the corpus: one paragraph per chunk."""
    from orchestrator import load_app
    app = load_app(app_name)
    fetch = min(params.fetch_k or app.query.fetch_k, app.query.fetch_k)
    q = app.query.model_copy(update={"doc_tokens": 64 * n_chunks, "chunk_size_tokens": 64, "chunk_overlap_tokens": 0,
                                     "answer_tokens": params.answer_tokens, "fetch_k": min(fetch, n_chunks)})
    comps = tuple(replace(c, params={**c.params, "leaf_tokens": params.leaf_tokens})
                  if c.op == "synthesis" else c for c in app.components)
    return app.model_copy(update={"query": q, "components": comps, "doc_tokens_choices": ()})


@dataclass(frozen=True)
class Workload:
    """One (app, seed, rate)'s queries: the app fitted to the corpus, drawn arrivals, payloads."""
    app_name: str
    app: Any
    arrivals: np.ndarray
    payloads: list[dict]


def workload(app_name: str, params: Params, seed: int, rate_rps: float) -> Workload:
    paragraphs, questions = load_corpus(params.corpus)
    paragraphs = paragraphs[:params.n_paragraphs] if params.n_paragraphs else paragraphs
    app = app_for_corpus(app_name, len(paragraphs), params)
    rng = np.random.default_rng(seed)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate_rps, params.n_queries - 1))])
    payloads = [{"question": questions[i % len(questions)], "chunks": paragraphs} for i in range(params.n_queries)]
    return Workload(app_name, app, arrivals, payloads)


def _engine_kwargs(w: Workload, scheme: str, params: Params, llm_dir: str, pg_url: str, ce_dir: str | None) -> dict:
    """``build_real_engines``' arguments: each scheme its own vector table."""
    return dict(llm_dir=llm_dir, pg_url=pg_url, llm_instances=params.llm_instances, llm_dtype=params.llm_dtype,
                llm_max_batch=params.llm_max_batch, embed_max_batch=embed_max_batch(params),
                table=f"chunks_{w.app_name}_{scheme.replace('-', '_')}", cross_encoder_dir=ce_dir)


def _run_in_process(w: Workload, scheme: str, engines: dict, params: Params, span: slice = slice(None)) -> Any:
    """The queries ``span`` of ``w`` on ``engines`` in real time, the first arriving at 0."""
    from orchestrator.runtime.realtime import run_realtime
    arr = w.arrivals[span]
    return run_realtime(w.app.template(), [w.app.query] * len(arr), arr - arr[0], engines, scheme=scheme,
                        payloads=w.payloads[span], timeout_s=params.timeout_s, cpu_cores=cpu_cores(params),
                        idle_gap_s=params.idle_gap_s)


def _rows(w: Workload, scheme: str, rate_rps: float, rep: Any, first: int = 0) -> list[dict]:
    """One row per query of ``rep`` (a ``RealtimeReport`` of the queries from ``first`` on): ``qid``
    the query's index in ``w``, ``arrival_s`` on the run's clock after idle cuts (plus the drawn
    arrival of query ``first``), ``drawn_arrival_s`` as drawn."""
    base = {"app": w.app_name, "scheme": scheme, "rate_rps": rate_rps, "makespan_s": rep.wall_s,
            "idle_cut_s": rep.idle_cut_s}
    t0, rows = float(w.arrivals[first]), []
    for r in rep.results:
        ans = str(next(iter(r.outputs.values())))
        rows.append(dict(base, qid=first + r.qid, arrival_s=t0 + r.arrival_s, latency_s=r.latency_s,
                         finish_s=t0 + r.finish_s, failed=False, answer=ans,
                         answer_sha=hashlib.sha1(ans.encode()).hexdigest()[:12]))
    for qid, why in rep.failed.items():
        rows.append(dict(base, qid=first + qid, arrival_s=float("nan"), latency_s=float("nan"), finish_s=float("nan"),
                         failed=True, answer=why, answer_sha=""))
    return [dict(r, drawn_arrival_s=float(w.arrivals[r["qid"]])) for r in rows]


def run_cell(app_name: str, scheme: str, params: Params, llm_dir: str, pg_url: str, seed: int,
             rate_rps: float = 1.0, ce_dir: str | None = None, calls: list[dict] | None = None) -> list[dict]:
    """One (app, scheme) at ``rate_rps``: fresh real engines, the queries in real time; one row per
    query. ``calls``, if given, receives one row per engine invocation (``RealtimeReport.calls``)."""
    import torch

    from orchestrator.engines.real.factory import build_real_engines, close_engines
    torch.set_num_threads(params.torch_threads)
    w = workload(app_name, params, seed, rate_rps)
    kw = _engine_kwargs(w, scheme, params, llm_dir, pg_url, ce_dir)
    if params.runtime == "ray":
        from orchestrator.runtime.ray_runtime import run_ray
        rep = run_ray(w.app.template(), [w.app.query] * params.n_queries, w.arrivals, engine_kwargs=dict(kw, app=w.app),
                      scheme=scheme, payloads=w.payloads, timeout_s=params.timeout_s,
                      torch_threads=params.torch_threads)
    else:
        engines = build_real_engines(w.app, **kw)
        try:
            rep = _run_in_process(w, scheme, engines, params)
        finally:
            close_engines(engines)
    if calls is not None:
        calls += [dict(c, app=app_name, scheme=scheme, rate_rps=rate_rps) for c in rep.calls]
    return _rows(w, scheme, rate_rps, rep)


def segments(arrivals: np.ndarray, gap_s: float) -> list[slice]:
    """The runs of ``arrivals`` (sorted) that no drawn gap longer than ``gap_s`` separates."""
    cuts = [0, *(int(i) + 1 for i in np.flatnonzero(np.diff(arrivals) > gap_s)), len(arrivals)]
    return [slice(a, b) for a, b in zip(cuts, cuts[1:])]


def run_interleaved(app_name: str, order: list[str], params: Params, llm_dir: str, pg_url: str, seed: int,
                    rate_rps: float, ce_dir: str | None, calls: list[dict]) -> list[dict]:
    """A block's schemes taking turns per arrival segment (:func:`segments` of ``segment_gap_s``), in
    ``order`` rotated by one per segment, each scheme on its own engines built once for the block:
    randomized multiple interleaved trials (Abedi and Brecht, ICPE 2017), so a slow phase of the
    shared machine falls on every scheme alike. Rows as :func:`run_cell`'s."""
    import torch

    from orchestrator.engines.real.factory import build_real_engines, close_engines
    torch.set_num_threads(params.torch_threads)
    w = workload(app_name, params, seed, rate_rps)
    engines: dict[str, dict] = {}
    rows: list[dict] = []
    try:
        for s in order:
            engines[s] = build_real_engines(w.app, **_engine_kwargs(w, s, params, llm_dir, pg_url, ce_dir))
        for j, span in enumerate(segments(w.arrivals, params.segment_gap_s)):
            for s in _block_order(order, j):
                rep = _run_in_process(w, s, engines[s], params, span)
                calls += [dict(c, app=app_name, scheme=s, rate_rps=rate_rps, qid=span.start + c["qid"])
                          for c in rep.calls]
                rows += _rows(w, s, rate_rps, rep, span.start)
    finally:
        for e in engines.values():
            close_engines(e)
    return rows


def _block_order(schemes: list[str], k: int) -> list[str]:
    """The schemes rotated by ``k``: each round and block starts with another scheme."""
    k %= len(schemes)
    return schemes[k:] + schemes[:k]


def _blocks(params: Params) -> list[tuple[int, float, str, list[str]]]:
    """(repeat, rate, app, scheme order) in run order."""
    out, k = [], 0
    for rep in range(params.repeats):
        for i in range(max(len(params.rates_rps.get(a, [1.0])) for a in params.apps)):
            for app in params.apps:
                rates = params.rates_rps.get(app, [1.0])
                if i >= len(rates):
                    continue
                rate = rates[i]
                out.append((rep, rate, app, _block_order(params.schemes, k)))
                k += 1
    return out


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _steal_s() -> float:
    """CPU time the hypervisor gave other machines since boot (all cores; /proc/stat's steal), NaN
    where the kernel does not say."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


_WARM: set[str] = set()


def _warm(app: str, params: Params, llm_dir: str, pg_url: str, seed: int, ce: str | None) -> None:
    """One unmeasured query per app and process: model loads, first-call overheads, table creation."""
    if app not in _WARM:
        one = params.model_copy(update={"n_queries": 1, "runtime": "inprocess"})
        run_cell(app, params.schemes[0], one, llm_dir, pg_url, seed, ce_dir=ce)
        _WARM.add(app)


def isolated_cell(app: str, params: Params, llm_dir: str, pg_url: str, seed: int, ce: str | None) -> pd.DataFrame:
    """One query alone per scheme: the reference of the saturation rule."""
    _warm(app, params, llm_dir, pg_url, seed, ce)
    one = params.model_copy(update={"n_queries": 1, "runtime": "inprocess"})
    return pd.DataFrame([r for s in params.schemes for r in run_cell(app, s, one, llm_dir, pg_url, seed, ce_dir=ce)])


def block_cell(rep: int, rate: float, app: str, order: list[str], params: Params, llm_dir: str, pg_url: str,
               seed: int, ce: str | None) -> dict[str, pd.DataFrame]:
    """One block: every scheme in ``order`` on the same arrivals, one after another, with the load
    average before and after and the block's wall time."""
    import time
    _warm(app, params, llm_dir, pg_url, seed, ce)
    before, tb, steal, calls = _load(), time.perf_counter(), _steal_s(), []
    if params.interleave and params.runtime == "inprocess":
        rows = [dict(r, repeat=rep) for r in run_interleaved(app, order, params, llm_dir, pg_url, seed + rep, rate, ce,
                                                             calls)]
    else:
        rows = [dict(r, repeat=rep) for s in order
                for r in run_cell(app, s, params, llm_dir, pg_url, seed + rep, rate, ce, calls)]
    block = {"repeat": rep, "rate_rps": rate, "app": app, "order": " ".join(order),
             "wall_s": time.perf_counter() - tb, "load_before": before, "load_after": _load(),
             "steal_s": _steal_s() - steal}
    print(f"block {rep} {rate:g} {app}: {block['wall_s']:.1f} s, load {block['load_after']}", flush=True)
    return {"queries": pd.DataFrame(rows), "block": pd.DataFrame([block]), "calls": pd.DataFrame(calls).assign(repeat=rep)}


def run(params: Params, ctx: RunContext) -> None:
    """Isolated queries, then the interleaved blocks, each a cell of :func:`experiments.executor.run_cells`
    (local or Ray, resumable with ``--run-id``), one cell in flight at a time: they measure wall time."""
    import time

    from experiments.executor import Cell, run_cells
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from orchestrator.engines.real.embedding import build_minilm_cross_encoder
    from orchestrator.engines.real.pgvector import embedded_server
    from orchestrator.engines.real.tinyllm import build_tiny_llama
    from orchestrator.schemes import get_scheme
    for s in params.schemes:
        try:
            get_scheme(s)
        except KeyError as e:
            raise UserError(f"field 'params.schemes': {e.args[0]}") from None
    t0 = time.perf_counter()
    llm_dir = str(build_tiny_llama(Path(tempfile.gettempdir()) / "flowmaker_tiny_llama"))
    ce = (str(build_minilm_cross_encoder(Path(tempfile.gettempdir()) / "flowmaker_minilm_cross_encoder"))
          if params.reranker == "cross-encoder" else None)
    pg_url = params.pg_url or embedded_server(ctx.run_dir / "pgdata")
    shared = (params, llm_dir, pg_url)
    iso_cells = [Cell(f"isolated-{a}", isolated_cell, (a, *shared, ctx.seed, ce), label=f"isolated {a}")
                 for a in params.apps]
    blocks = _blocks(params)
    block_cells = [Cell(f"block-{rep}-{a}-{rate:g}", block_cell, (rep, rate, a, order, *shared, ctx.seed, ce),
                        tables=("queries", "block", "calls"), label=f"block {rep} {a} {rate:g}")
                   for rep, rate, a, order in blocks]
    res = run_cells(ctx, iso_cells + block_cells, desc="teola real blocks", max_parallel=1)
    iso = pd.concat(res[:len(iso_cells)], ignore_index=True)
    df = pd.concat([r["queries"] for r in res[len(iso_cells):]], ignore_index=True)
    bl = pd.concat([r["block"] for r in res[len(iso_cells):]], ignore_index=True)
    calls = pd.concat([r["calls"] for r in res[len(iso_cells):]], ignore_index=True)
    summary = report.summarise(df, params.schemes, iso, params.saturation)
    for name, d in [("queries", df), ("isolated", iso), ("blocks", bl), ("summary", summary), ("calls", calls)]:
        atomic_write_parquet(ctx.run_dir / f"{name}.parquet", d)
    md = report.markdown(summary, bl, params, time.perf_counter() - t0, float(bl.wall_s.sum()),
                         cores=cpu_cores(params), embed_batch=embed_max_batch(params), queries=df)
    if len(calls):
        md += "\n".join(real_calls.markdown(calls, summary)) + "\n"
    atomic_write_text(ctx.run_dir / "summary.md", md)
    print(md)
