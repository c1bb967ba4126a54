"""Teola apps experiment: apps x Poisson rates x schemes x seeds in simulation, plus ablations and
a batch-cap experiment (topology-aware vs blind batching where the cap binds).

Writes per-request latencies (one parquet cell per app/rate/scheme/seed, run by
``experiments.executor``: local processes or Ray; resumable),
``summary.parquet`` (mean/p99 per cell), ``speedups.parquet`` (Teola vs the best baseline, mean
and spread over seeds, the rate regime by the saturation rule), ``ablation.parquet``,
``batch_cap.parquet``, PNG plots and ``summary.md`` with the paper's figures beside ours
(``experiments/kinds/_teola_report.py``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text
from experiments.kinds import _teola_critical as critical
from experiments.kinds import _teola_passes as by_pass
from flowmaker.entry import UserError
from experiments.executor import Cell, run_cells
from experiments.kinds import _teola_report as report
from orchestrator import BASELINES, get_scheme, load_app, simulate
from flowmaker.names import check_distinct
from orchestrator.apps import AppSpec, check_apps
from orchestrator.engines import build_instances, load_engine_spec, per_word, profiler_llm_instances, share_cores
from orchestrator.guided import choose_passes
from orchestrator.schemes import ALL, Scheme, only_scheme
from orchestrator.passes import GraphCache, passes_named
from orchestrator.runtime.api import pass_context
from orchestrator.template import QueryConfig

ABLATION_SCHEMES = ("teola", "teola-no-prune", "teola-no-stage", "teola-no-prefill_split",
                    "teola-no-decode_pipeline", "teola-no-rerank_pipeline", "teola-no-par-pipe", "teola-blind",
                    "teola-topo-lowest")


#: queries one simulated cell may hold (the paper's runs use 150): more is a run of days
MAX_QUERIES = 100_000


class AppOverride(BaseModel):
    """Change an app's workload for a run (a sensitivity study): ``query`` fields of its
    ``QueryConfig``; ``params`` per component name (e.g. an LLM call's ``output_tokens``)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    query: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    engines: dict[str, str] = Field(default_factory=dict, description="engine name -> configs/engines spec")
    doc_tokens_choices: tuple[int, ...] | None = Field(None, description="() : every query has `query.doc_tokens`")
    tokens_per_word: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict, description=(
        "engine name -> its tokenizer's tokens per workload token (a word): its profile re-indexed by words "
        "(orchestrator.engines.factory.per_word), a measured ratio on the workload's real text"))


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    apps: tuple[str, ...] = ("search_gen", "naive_rag", "advanced_rag", "contextual_rag")
    # A grid of rates per app. "low" is its smallest rate; "high" the largest at which the best
    # baseline's mean stays under `saturation` x its isolated-query mean (queries `isolated_rate_rps`
    # apart); beyond it the engines saturate and every scheme's latency grows with the run length
    # (ratios then only measure queue length). Chosen from the baselines alone, never from Teola's.
    rates_rps: dict[str, tuple[float, ...]] = Field(default_factory=lambda: {
        "search_gen": (1.0, 2.0, 4.0), "naive_rag": (1.0, 2.0, 4.0), "advanced_rag": (0.5, 1.0, 2.0),
        "contextual_rag": (0.25, 0.5, 1.0)})
    saturation: float = Field(1.6, gt=1)
    isolated_rate_rps: float = Field(0.02, gt=0, description="rate at which queries do not interact")
    n_isolated: int = Field(20, ge=1, le=MAX_QUERIES, description="queries per isolated-latency cell")
    n_queries: int = Field(150, ge=1, le=MAX_QUERIES, description="queries per cell")
    seeds: tuple[int, ...] = Field((0,), min_length=1, description="one run of every cell per seed")
    schemes: tuple[str, ...] = (report.GUIDED, "teola", report.PREFIX_GUIDED, "teola+prefix-cache") + BASELINES
    # `teola-guided` (and `teola+prefix-cache-guided`): Teola whose optimiser applies only the passes its cost model says pay at the
    # deployment's rate (orchestrator/guided.py): the simulation of the app on its engines' profiles,
    # `guide_queries` queries drawn with `guide_seed` (never an evaluated seed), backward elimination
    # 300: twice an evaluated cell; with 100, the run's start from empty engines weighs so much that naive RAG at
    # 2 req/s (prefix cache) found splitting 1% faster where 300 queries and the evaluated seeds find it 1-4% slower
    guide_queries: int = Field(300, ge=1, le=MAX_QUERIES, description="calibration queries per (app, rate)")
    guide_seed: int = Field(1000, description="calibration workload's seed; keep it out of `seeds`")
    guide_min_gain: float = Field(0.005, ge=0, lt=1, description="a pass is dropped when that lowers the cost by more")
    app_overrides: dict[str, AppOverride] = Field(default_factory=dict)
    # each pass's share of the speedup: every pass subset (identical graphs run once) at each listed
    # app's lowest rate and for one query (experiments/kinds/_teola_passes.py)
    decompose_apps: tuple[str, ...] | None = Field(None, description="None: every app in `apps`")
    ablation_app: str = "advanced_rag"
    ablation_rate_rps: float = Field(2.0, gt=0)
    ablation_schemes: tuple[str, ...] = ABLATION_SCHEMES
    # Topology-aware batching only reorders work when more is pending than the cap admits: the
    # same cell with the engine scheduler's cap lowered to `batch_cap` (items in flight per instance).
    # per app, the rate to run it at (the paper's rates: each app's high one); 2 LLM instances as in the paper
    batch_cap_rates: dict[str, float] = Field(default_factory=lambda: {
        "search_gen": 4.0, "naive_rag": 2.0, "advanced_rag": 1.0, "contextual_rag": 0.25})
    batch_cap: dict[str, int] = Field(default_factory=lambda: {"llm": 4})
    # Teola's e-graph in every listed app; in `batch_cap_nosplit_apps` also the same without prompt
    # splitting: there a refine step's prompt starts a new sequence the cap holds back, while a split one
    # continues its partial prefill (placed whatever the cap), so only the former leaves the policy
    # anything to reorder
    batch_cap_schemes: tuple[str, ...] = ("teola", "teola-blind", "teola-topo-lowest")
    batch_cap_nosplit_apps: tuple[str, ...] = ("advanced_rag",)
    dispatch_overhead_s: float = Field(0.002, ge=0, description="per batch dispatch (communication)")
    engine_prefix_cache: bool = Field(True, description="False: no scheme's LLM engines cache prefixes (the real "
                                      "engines of teola_real_cpu have none); True: those of schemes that have one")
    engine_max_batch: dict[str, int] = Field(default_factory=dict, description="per engine name, the max batch "
                                             "(items in flight per instance) every cell uses, as a real deployment sets it")
    cpu_cores: int | None = Field(None, ge=1, description="every engine instance on this many shared CPU cores "
                                  "(processor sharing, orchestrator.engines.cpu_sharing.SharedCores); None: each its own")
    cpu_background: float = Field(0.0, ge=0, description="with cpu_cores: runnable tasks of other programs on the cores")
    cpu_same_process: float = Field(0.0, ge=0, description="with cpu_cores: the engines run in one process, and each "
                                    "further execution running at once slows every one by this fraction beyond the "
                                    "cores (the interpreter lock; SharedCores.same_process)")
    cpu_same_process_decode: float | None = Field(None, ge=0, description="with cpu_same_process: the same for an LLM "
                                                  "iteration that only decodes (SharedCores.decode_same_process); "
                                                  "None: cpu_same_process")
    llm_latency: Literal["table", "profiler"] = "table"
    profiler_gpu: str = Field("a6000", description="stand-in for the paper's RTX 3090 (not in the catalog)")

    @model_validator(mode="after")
    def _apps_load(self) -> Params:
        """Every app named anywhere (a name or a .yaml path) loads, with its engine specs, before
        any cell runs; their names are distinct."""
        if self.cpu_background and self.cpu_cores is None:
            raise ValueError("cpu_background: needs cpu_cores (the cores the other programs share)")
        if (self.cpu_same_process or self.cpu_same_process_decode) and self.cpu_cores is None:
            raise ValueError("cpu_same_process: needs cpu_cores (the cores the process's engines share)")
        check_distinct(self.apps, "apps")
        check_apps([*self.apps, self.ablation_app, *self.batch_cap_rates, *(self.decompose_apps or ())])
        return self


def _app(p: Params, name: str) -> AppSpec:
    app = load_app(name)
    o = p.app_overrides.get(name)
    if o is None:
        return app
    names = {c.name for c in app.components}
    if set(o.params) - names:
        raise UserError(f"app_overrides.{name}.params: unknown components {sorted(set(o.params) - names)}; "
                        f"known: {', '.join(sorted(names))}")
    comps = tuple(replace(c, params={**c.params, **o.params.get(c.name, {})}) for c in app.components)
    query = QueryConfig.model_validate({**app.query.model_dump(), **o.query})
    for field in ("engines", "tokens_per_word"):
        if set(getattr(o, field)) - set(app.engines):
            raise UserError(f"app_overrides.{name}.{field}: unknown engines "
                            f"{sorted(set(getattr(o, field)) - set(app.engines))}; known: {', '.join(sorted(app.engines))}")
    engines = {k: b.model_copy(update={"spec": o.engines.get(k, b.spec)}) for k, b in app.engines.items()}
    docs = app.doc_tokens_choices if o.doc_tokens_choices is None else o.doc_tokens_choices
    return app.model_copy(update={"query": query, "components": comps, "engines": engines, "doc_tokens_choices": docs})


def _engines(app, scheme, p: Params, app_name: str | None = None):
    over, cache = {}, scheme.prefix_caching and p.engine_prefix_cache
    if p.llm_latency == "profiler":
        for name, b in app.engines.items():
            spec = load_engine_spec(b.spec)
            if spec.kind == "llm" and spec.model in ("llama-2-7b", "llama-2-13b"):
                tp = 2 if spec.model == "llama-2-13b" else 1
                cfg = spec.engine.model_copy(update={"prefix_caching": cache})
                over[name] = profiler_llm_instances(spec.model, p.profiler_gpu, tp=tp, n_instances=b.instances,
                                                    kv_capacity_tokens=cfg.kv_capacity_tokens, config=cfg)
    o = p.app_overrides.get(app_name or app.name)
    for name, tpw in (o.tokens_per_word.items() if o else ()):
        b = app.engines[name]
        over[name] = build_instances(per_word(load_engine_spec(b.spec), tpw), n_instances=b.instances,
                                     prefix_caching=cache)
    engines = app.build_engines(prefix_caching=cache, overrides=over)
    if p.cpu_cores is not None:
        share_cores(engines, p.cpu_cores, p.cpu_background, p.cpu_same_process, p.cpu_same_process_decode)
    return engines


def _cell_name(app_name: str, rate: float, scheme_name: str, n: int, seed: int, cap: dict[str, int] | None) -> str:
    tag = "" if not cap else "__cap" + "-".join(f"{k}{v}" for k, v in sorted(cap.items()))
    return f"{app_name}__{rate:g}rps__{scheme_name}__n{n}__s{seed}{tag}"


_GUIDED: dict[tuple, tuple[str, ...]] = {}


def _guide_key(p: Params, app_name: str, rate: float, n: int, scheme_name: str) -> tuple:
    return p.model_dump_json(), app_name, p.isolated_rate_rps if n == 1 else rate, scheme_name


def guided_passes(p: Params, app_name: str, rate: float, n: int, scheme_name: str = report.GUIDED) -> tuple[str, ...]:
    """The passes a guided scheme (``teola-guided``, ``teola+prefix-cache-guided``) applies to
    ``app_name`` deployed at ``rate`` (``n`` = 1: one query alone, calibrated on ``n_isolated``
    queries that do not interact), chosen on the calibration workload with the engines of the scheme
    it guides."""
    key = _guide_key(p, app_name, rate, n, scheme_name)
    cal_rate = key[2]
    n_cal = p.guide_queries if n > 1 else min(p.guide_queries, p.n_isolated)    # isolated queries do not interact
    if key not in _GUIDED:
        base = get_scheme(report.guided_base(scheme_name))
        reps, sims = _decompose_reps(p, app_name), {}

        def cost(passes: tuple[str, ...]) -> float:
            rep = reps[tuple(x for x in ALL if x in passes)]      # identical graphs simulate identically
            if rep not in sims:
                _, res, _ = _simulate(p, app_name, cal_rate, _with_passes(base, rep), n_cal, p.guide_seed)
                sims[rep] = float(np.mean([r.latency_s for r in res]))
            return sims[rep]
        _GUIDED[key] = choose_passes(cost, ALL, min_gain=p.guide_min_gain)
    return _GUIDED[key]


def _with_passes(base: Scheme, passes: tuple[str, ...]) -> Scheme:
    """``base`` (Teola, with or without prefix caching) with only ``passes`` on."""
    if set(passes) == set(base.passes):
        return base
    return get_scheme(only_scheme(passes, base.prefix_caching))


def _resolve(p: Params, app_name: str, rate: float, scheme_name: str, n: int) -> tuple[Scheme, str]:
    """The scheme a cell runs and the passes it applies ("" unless a guided scheme)."""
    if report.guided_base(scheme_name) is None:
        return get_scheme(scheme_name), ""
    passes = guided_passes(p, app_name, rate, n, scheme_name)
    return _with_passes(get_scheme(report.guided_base(scheme_name)), passes), "+".join(passes) or "none"


def _simulate(p: Params, app_name: str, rate: float, scheme_name: str | Scheme, n: int, seed: int,
              cap: dict[str, int] | None = None, traces: dict | None = None) -> tuple[list, list, dict]:
    """One (app, rate, scheme, queries, seed, batch cap) simulation: its configs, results and engines."""
    app = _app(p, app_name)
    scheme = scheme_name if isinstance(scheme_name, Scheme) else _resolve(p, app_name, rate, scheme_name, n)[0]
    rng = np.random.default_rng([seed, abs(int(rate * 1000)), len(app_name)])
    cfgs = app.query_configs(n, rng)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n)) if n > 1 else np.zeros(1)
    engines = _engines(app, scheme, p, app_name)
    res = simulate(app.template(), cfgs, arrivals, engines, scheme=scheme, seed=seed,
                   dispatch_overhead_s=p.dispatch_overhead_s, max_batch={**p.engine_max_batch, **(cap or {})} or None,
                   traces=traces)
    return cfgs, res, engines


def guide_frame(p: Params, app_name: str, rate: float, n: int, scheme_name: str) -> pd.DataFrame:
    """One calibration: the passes ``scheme_name`` applies at ``rate`` (one row)."""
    return pd.DataFrame([{"app": app_name, "rate_rps": rate, "n_queries": n, "scheme": scheme_name,
                          "passes": "+".join(guided_passes(p, app_name, rate, n, scheme_name))}])


def _given(p: Params, app_name: str, rate: float, n: int, scheme_name: str, passes: str | None) -> None:
    """Record a calibration made elsewhere (another process: ``run`` makes each once)."""
    if passes is not None and report.guided_base(scheme_name) is not None:
        _GUIDED[_guide_key(p, app_name, rate, n, scheme_name)] = tuple(x for x in passes.split("+") if x)


def cell_frame(p: Params, app_name: str, rate: float, scheme_name: str, n: int, seed: int,
               cap: dict[str, int] | None = None, passes: str | None = None) -> pd.DataFrame:
    """One (app, rate, scheme, queries, seed, batch cap) cell: its requests' latencies (``passes``:
    a guided scheme's calibrated choice, when made already)."""
    _given(p, app_name, rate, n, scheme_name, passes)
    cfgs, res, _ = _simulate(p, app_name, rate, scheme_name, n, seed, cap)
    return pd.DataFrame({"app": app_name, "rate_rps": rate, "scheme": scheme_name, "seed": seed,
                         "passes": _resolve(p, app_name, rate, scheme_name, n)[1],
                         "qid": [r.qid for r in res], "arrival_s": [r.arrival_s for r in res],
                         "latency_s": [r.latency_s for r in res], "n_primitives": [r.n_primitives for r in res],
                         "doc_tokens": [c.doc_tokens for c in cfgs]})


def path_frame(p: Params, app_name: str, rate: float, scheme_name: str, n: int, seed: int, at_rate: float,
               passes: str | None = None) -> pd.DataFrame:
    """The same simulation as a cell, its queries' critical paths (``_teola_critical``), filed under ``at_rate``."""
    _given(p, app_name, rate, n, scheme_name, passes)
    traces: dict = {}
    _, _, engines = _simulate(p, app_name, rate, scheme_name, n, seed, traces=traces)
    mb = {k: p.engine_max_batch.get(k, v[0].max_batch_size()) for k, v in engines.items()}
    return pd.DataFrame(critical.path_rows(traces, mb)).assign(
        app=app_name, rate_rps=at_rate, scheme=scheme_name, setting="one_query" if n == 1 else "load")


def _paths(p: Params, ctx: RunContext, sp: pd.DataFrame) -> pd.DataFrame:
    """Critical paths of Teola (the headline one: the best baseline's engine features) and the best
    baseline where Teola is slower and at each app's high rate (``_teola_critical.explained``; seed 0):
    one query, and at the rate."""
    rows = sp[[critical.explained(*r) for r in zip(sp.speedup_mean, sp.saturated, sp.regime)]]
    jobs = [(a, r, s, n, p.seeds[0], rate) for a, rate, best, t in zip(rows.app, rows.rate_rps, rows.best_baseline,
                                                                         rows.teola_scheme)
            for s in (t, best) for r, n in [(1.0, 1), (rate, p.n_queries)]]
    guides = _guides(p, ctx, [(j[0], j[1], j[2], j[3]) for j in jobs])
    cells = [Cell("path__" + _cell_name(*j[:5], None) + f"__at{j[5]:g}", path_frame, (p, *j),
                  {"passes": guides.get((j[0], j[1], j[2], j[3] == 1))}) for j in jobs]
    return critical.parts(pd.concat(run_cells(ctx, cells, desc="critical paths"), ignore_index=True)) if cells \
        else pd.DataFrame()


def _decompose_reps(p: Params, app_name: str) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each pass subset -> the subset that runs for it (identical optimised graphs on every
    query configuration of the app run once)."""
    app = _app(p, app_name)
    engines = _engines(app, get_scheme("teola"), p, app_name)
    ctx, cache, tpl = pass_context(engines), GraphCache(), app.template()
    cfgs = [app.query.model_copy(update={"doc_tokens": int(d)}) for d in app.doc_tokens_choices] or [app.query]
    return by_pass.classes(lambda s: [cache.get(tpl, c, passes_named(s), ctx) for c in cfgs])


def _cap_schemes(p: Params, app: str) -> tuple[str, ...]:
    extra = ("teola-no-prefill_split", "teola-no-prefill_split-blind", "teola-no-prefill_split-topo-lowest")
    return p.batch_cap_schemes + (extra if app in p.batch_cap_nosplit_apps else ())


def _jobs(p: Params) -> dict[str, list[tuple]]:
    base = [s for s in p.schemes if s in BASELINES]
    jobs = {"main": [(a, r, s, p.n_queries, seed, None) for a in p.apps for r in p.rates_rps.get(a, (1.0,))
                     for s in p.schemes for seed in p.seeds],
            "isolated": [(a, p.isolated_rate_rps, s, p.n_isolated, seed, None) for a in p.apps for s in base
                         for seed in p.seeds],
            "ablation": [(p.ablation_app, r, s, n, seed, None) for r, n in [(1.0, 1), (p.ablation_rate_rps, p.n_queries)]
                         for s in p.ablation_schemes for seed in p.seeds],
            "batch_cap": [(a, r, s, p.n_queries, seed, cap) for a, r in p.batch_cap_rates.items()
                          for cap in (None, dict(p.batch_cap)) for s in _cap_schemes(p, a) for seed in p.seeds],
            "decomposition": [(a, 1.0, b, 1, seed, None) for a in _decompose_apps(p) for b in base
                              for seed in p.seeds]}       # the baselines' one query; Teola's: _decomposition_jobs
    return jobs


def _decompose_apps(p: Params) -> tuple[str, ...]:
    return p.apps if p.decompose_apps is None else p.decompose_apps


def _decomposition_settings(p: Params, summary: pd.DataFrame, one: pd.DataFrame) -> list[tuple]:
    """Per decomposed app, one query and its lowest rate: (app, rate, queries, best baseline, its
    mean, the headline Teola: the best baseline's engine features, ``_teola_report.like_for_like``)."""
    base = [s for s in p.schemes if s in BASELINES]
    main = summary.groupby(["app", "rate_rps", "scheme"], sort=False).mean_latency_s.mean()
    one_mean = report.summarise(one.assign(capped=False)).groupby(["app", "scheme"]).mean_latency_s.mean()
    out = []
    for a in _decompose_apps(p):
        rate = p.rates_rps.get(a, (1.0,))[0]
        for r, n, b in [(1.0, 1, one_mean.loc[a][base]), (rate, p.n_queries, main.loc[(a, rate)][base])]:
            out.append((a, r, n, str(b.idxmin()), float(b.min()), report.like_for_like(str(b.idxmin()), p.schemes)))
    return out


def _prefix_cached(scheme: str) -> bool:
    return get_scheme(report.guided_base(scheme) or scheme).prefix_caching


def _decomposition_jobs(p: Params, settings: list[tuple]) -> list[tuple]:
    """Every distinct pass subset of the headline Teola in each decomposition setting, per seed."""
    out = []
    for a, r, n, _, _, t in settings:
        reps = sorted(set(_decompose_reps(p, a).values()), key=len, reverse=True)
        out += [(a, r, by_pass.scheme_of(s, _prefix_cached(t)), n, seed, None) for s in reps for seed in p.seeds]
    return out


def _guides(p: Params, ctx: RunContext, jobs: list[tuple]) -> dict[tuple, str]:
    """Each guided scheme's calibration among ``jobs`` ((app, rate, scheme, n, ...)), made once
    (cells ``guide__...``) -> {(app, rate, scheme, one query): passes}."""
    need = list(dict.fromkeys((a, r, s, n == 1) for a, r, s, n, *_ in jobs if report.guided_base(s) is not None))
    cells = [Cell(f"guide__{a}__{'isolated' if one else f'{r:g}rps'}__{s}", guide_frame, (p, a, r, 1 if one else 2, s))
             for a, r, s, one in need]
    out = run_cells(ctx, cells, desc="calibrations") if cells else []
    return {k: str(f.passes.iloc[0]) for k, f in zip(need, out)}


def _frames(p: Params, ctx: RunContext, jobs: dict[str, list[tuple]], guides: dict[tuple, str]) -> dict[str, pd.DataFrame]:
    """Run every job's cell (resumable); each part's requests in one frame."""
    cells = {part: [Cell(_cell_name(*job), cell_frame, (p, *job),
                         {"passes": guides.get((job[0], job[1], job[2], job[3] == 1))},
                         label=f"{job[0]} {job[1]:g}rps {job[2]} s{job[4]}") for job in part_jobs]
             for part, part_jobs in jobs.items()}
    results = iter(run_cells(ctx, [c for part in cells.values() for c in part], desc="teola cells"))
    frames: dict[str, pd.DataFrame] = {}
    for part, part_jobs in jobs.items():
        out = [next(results).assign(capped=bool(job[5]), n_queries=job[3]) for job in part_jobs]
        frames[part] = pd.concat(out, ignore_index=True) if out else pd.DataFrame()
    return frames


def run(params: Params, ctx: RunContext) -> None:
    jobs = _jobs(params)
    one = [(a, 1.0, g, 1) for a in _decompose_apps(params)
           for g in (report.GUIDED, report.PREFIX_GUIDED) if g in params.schemes]   # the decomposition's one query
    guides = _guides(params, ctx, [j for part in jobs.values() for j in part] + one)
    frames = _frames(params, ctx, jobs, guides)
    summary = report.summarise(frames["main"])
    main = frames["main"]
    guided = main[main.scheme.map(report.guided_base).notna()]
    applied = {(a, r, s): ps for a, r, s, ps in guided[["app", "rate_rps", "scheme", "passes"]]
               .drop_duplicates().itertuples(index=False)}
    sp = report.speedups(summary, report.summarise(frames["isolated"]), params, applied)
    ab = report.ablation(frames["ablation"])
    cap = report.batch_cap(frames["batch_cap"]) if len(frames["batch_cap"]) else pd.DataFrame()
    dec = pd.DataFrame()
    if len(frames["decomposition"]):
        settings = _decomposition_settings(params, summary, frames["decomposition"])
        teola = _frames(params, ctx, {"d": _decomposition_jobs(params, settings)}, guides)["d"]
        dec = _decomposition(params, teola, settings, guides)
    paths = _paths(params, ctx, sp)
    for name, df in [("summary", summary), ("speedups", sp), ("ablation", ab), ("batch_cap", cap),
                     ("decomposition", dec), ("critical_paths", paths)]:
        atomic_write_parquet(ctx.run_dir / f"{name}.parquet", df)
    report.plot(summary, ab, ctx.run_dir)
    md = report.markdown(sp, ab, cap, params) + ("\n".join(by_pass.markdown(dec)) + "\n" if len(dec) else "")
    md += "\n".join(critical.markdown(sp, paths, params.dispatch_overhead_s)) + "\n" \
        if len(paths) else ""
    atomic_write_text(ctx.run_dir / "summary.md", md)
    print(md)


def _decomposition(p: Params, df: pd.DataFrame, settings: list[tuple], guides: dict[tuple, str]) -> pd.DataFrame:
    """Per decomposition setting (``_decomposition_settings``): each pass subset's mean latency
    over seeds (through its representative), decomposed against the setting's best baseline; the
    Shapley values are over the passes the headline Teola applies there."""
    mean = report.summarise(df.assign(capped=False)).groupby(["app", "rate_rps", "n_queries", "scheme"]).mean_latency_s.mean()
    out = []
    for app, rate, n, best, best_s, t in settings:
        pc = _prefix_cached(t)
        lat = {sub: float(mean[(app, rate, n, by_pass.scheme_of(rep, pc))]) for sub, rep in _decompose_reps(p, app).items()}
        key = (app, rate, t, n == 1)
        applied = tuple(x for x in guides[key].split("+") if x) if key in guides else ALL
        out.append(by_pass.decompose(app, 0.0 if n == 1 else rate, "one_query" if n == 1 else "load", lat,
                                     best, best_s, applied).assign(teola_scheme=t))
    return pd.concat(out, ignore_index=True)
