"""Real end-to-end run on CPU: naive and advanced RAG over the shipped document set
(``configs/docs_corpus``) with real engines (random tiny Llama on torch, MiniLM embeddings,
embedding-similarity reranking, PostgreSQL + pgvector from pgserver), each app run under Teola
and under LlamaDist on fresh copies of the same engines, in wall-clock time.

Per (app, scheme) it writes one row per query (``queries.parquet``: latency, answer) and a summary
(``summary.parquet``): makespan and mean latency, the speedup of Teola over each baseline and
whether every answer is identical. ``runtime: ray`` runs the engine schedulers and engines as
Ray actors and each cell as a Ray task (``ray_address`` or ``RAY_ADDRESS`` joins a cluster).
Cells run one at a time through ``experiments.executor`` (wall-clock measurements must not
disturb each other), are kept in ``cells/`` and skipped on a resume.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import yaml

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from experiments.context import NameList, RunContext, UserError, atomic_write_parquet
from flowmaker.names import name_problem
from orchestrator.apps import check_apps
from experiments.executor import Cell, run_cells

CORPUS_DIR = Path(__file__).resolve().parents[2] / "configs" / "docs_corpus"


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    apps: Annotated[NameList, AfterValidator(check_apps)] = Field(default_factory=lambda: ["naive_rag", "advanced_rag"])
    schemes: list[str] = Field(default_factory=lambda: ["teola", "llamadist-po"], min_length=2)
    corpus: str = "ostvik_guide"
    n_queries: int = Field(8, ge=1, le=10_000)
    rate_rps: float = Field(4.0, gt=0, description="Poisson arrival rate; the same arrivals for every scheme")
    answer_tokens: int = Field(16, ge=1)
    leaf_tokens: int = Field(16, ge=1, description="tokens per tree-synthesis leaf answer")
    llm_instances: int = Field(2, ge=1)
    llm_dtype: str = "float32"
    llm_max_batch: int = Field(8, ge=1)
    embed_max_batch: int = Field(8, ge=1, description="the embedder's max efficient batch (drives stage decomposition)")
    torch_threads: int = Field(1, ge=1)
    pg_url: str | None = Field(None, description="a PostgreSQL+pgvector server; default: an embedded pgserver")
    runtime: Literal["inprocess", "ray"] = "inprocess"
    ray_address: str | None = None
    timeout_s: float = Field(600.0, gt=0)


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
    q = app.query.model_copy(update={"doc_tokens": 64 * n_chunks, "chunk_size_tokens": 64, "chunk_overlap_tokens": 0,
                                     "answer_tokens": params.answer_tokens, "fetch_k": min(app.query.fetch_k, n_chunks)})
    comps = tuple(c.model_copy(update={"params": {**c.params, "leaf_tokens": params.leaf_tokens}})
                  if c.op == "synthesis" else c for c in app.components)
    return app.model_copy(update={"query": q, "components": comps, "doc_tokens_choices": ()})


def run_cell(app_name: str, scheme: str, params: Params, llm_dir: str, pg_url: str, seed: int) -> list[dict]:
    """One (app, scheme): fresh real engines, the queries in real time; one row per query."""
    import torch

    from orchestrator.engines.real.factory import build_real_engines, close_engines
    from orchestrator.runtime.realtime import run_realtime
    torch.set_num_threads(params.torch_threads)
    paragraphs, questions = load_corpus(params.corpus)
    app = app_for_corpus(app_name, len(paragraphs), params)
    rng = np.random.default_rng(seed)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / params.rate_rps, params.n_queries - 1))])
    payloads = [{"question": questions[i % len(questions)], "chunks": paragraphs} for i in range(params.n_queries)]
    table = f"chunks_{app_name}_{scheme.replace('-', '_')}"
    if params.runtime == "ray":
        from orchestrator.runtime.ray_runtime import run_ray
        factory = dict(app=app, llm_dir=llm_dir, pg_url=pg_url, llm_instances=params.llm_instances,
                       llm_dtype=params.llm_dtype, llm_max_batch=params.llm_max_batch,
                       embed_max_batch=params.embed_max_batch, table=table)
        rep = run_ray(app.template(), [app.query] * params.n_queries, arrivals, engine_kwargs=factory,
                      scheme=scheme, payloads=payloads, timeout_s=params.timeout_s, torch_threads=params.torch_threads)
    else:
        engines = build_real_engines(app, llm_dir=llm_dir, pg_url=pg_url, llm_instances=params.llm_instances,
                                     llm_dtype=params.llm_dtype, llm_max_batch=params.llm_max_batch,
                                     embed_max_batch=params.embed_max_batch, table=table)
        try:
            rep = run_realtime(app.template(), [app.query] * params.n_queries, arrivals, engines, scheme=scheme,
                               payloads=payloads, timeout_s=params.timeout_s)
        finally:
            close_engines(engines)
    rows = []
    for r in rep.results:
        ans = str(next(iter(r.outputs.values())))
        rows.append({"app": app_name, "scheme": scheme, "qid": r.qid, "arrival_s": r.arrival_s,
                     "latency_s": r.latency_s, "finish_s": r.finish_s, "failed": False, "answer": ans,
                     "answer_sha": hashlib.sha1(ans.encode()).hexdigest()[:12], "makespan_s": rep.wall_s})
    for qid, why in rep.failed.items():
        rows.append({"app": app_name, "scheme": scheme, "qid": qid, "arrival_s": float(arrivals[qid]),
                     "latency_s": float("nan"), "finish_s": float("nan"), "failed": True, "answer": why,
                     "answer_sha": "", "makespan_s": rep.wall_s})
    return rows


def cell_frame(app_name: str, scheme: str, params: Params, llm_dir: str, pg_url: str, seed: int) -> pd.DataFrame:
    """:func:`run_cell` as a table (``experiments.executor``)."""
    return pd.DataFrame(run_cell(app_name, scheme, params, llm_dir, pg_url, seed))


def summarise(df: pd.DataFrame, schemes: list[str]) -> pd.DataFrame:
    rows = []
    for app, g in df.groupby("app", sort=False):
        by = {s: g[g.scheme == s] for s in schemes}
        ref = by[schemes[0]].sort_values("qid")
        for s in schemes:
            d = by[s].sort_values("qid")
            same = (not d.failed.any() and list(d.answer_sha) == list(ref.answer_sha))
            rows.append({"app": app, "scheme": s, "n_queries": len(d), "failed": int(d.failed.sum()),
                         "makespan_s": float(d.makespan_s.max()), "mean_latency_s": float(d.latency_s.mean()),
                         "p99_latency_s": float(d.latency_s.quantile(0.99)),
                         "same_answers_as_" + schemes[0]: bool(same)})
    out = pd.DataFrame(rows)
    base = out[out.scheme == schemes[0]].set_index("app")
    out["speedup_mean_latency"] = [r.mean_latency_s / base.loc[r.app, "mean_latency_s"] for r in out.itertuples()]
    out["speedup_makespan"] = [r.makespan_s / base.loc[r.app, "makespan_s"] for r in out.itertuples()]
    return out


def run(params: Params, ctx: RunContext) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from orchestrator.engines.real.pgvector import embedded_server
    from orchestrator.engines.real.tinyllm import build_tiny_llama
    from orchestrator.schemes import SCHEMES
    for s in params.schemes:
        if s not in SCHEMES:
            raise UserError(f"field 'params.schemes': unknown scheme {s!r}; known: {', '.join(SCHEMES)}")
    llm_dir = str(build_tiny_llama(Path(tempfile.gettempdir()) / "flowmaker_tiny_llama"))
    pg_url = params.pg_url or embedded_server(ctx.run_dir / "pgdata")
    # warm-up (not measured): model loads, first-call overheads, table creation
    for a in params.apps:
        run_cell(a, params.schemes[0], params.model_copy(update={"n_queries": 1, "runtime": "inprocess"}),
                 llm_dir, pg_url, ctx.seed)
    if params.runtime == "ray":      # cells as Ray tasks too (their engines are actors: the task holds no CPU)
        ex = ctx.execution.model_copy(update={"runtime": "ray",
                                              "ray_address": params.ray_address or ctx.execution.ray_address})
        ctx = dataclasses.replace(ctx, execution=ex)
    cells = [Cell(f"{a}__{s}", cell_frame, (a, s, params, llm_dir, pg_url, ctx.seed), cpus=0, label=f"{a} {s}")
             for a in params.apps for s in params.schemes]
    df = pd.concat(run_cells(ctx, cells, desc="real cells", max_parallel=1), ignore_index=True)   # wall clock: one at a time
    atomic_write_parquet(ctx.run_dir / "queries.parquet", df)
    summary = summarise(df, params.schemes)
    atomic_write_parquet(ctx.run_dir / "summary.parquet", summary)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(summary.to_string(index=False))
    print("speedup = scheme / " + params.schemes[0] + " (above 1: Teola faster); measured wall clock, real engines on CPU")
