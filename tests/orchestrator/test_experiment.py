"""The small Teola apps experiment runs end to end, writes its outputs and resumes."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.run import main

CFG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "teola_apps_small.yaml"


def test_small_experiment_writes_tables_plots_and_resumes(tmp_path, capsys):
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "t", "--no-progress"]) == 0
    run = tmp_path / "teola_apps_small" / "t"
    for f in ["summary.parquet", "speedups.parquet", "ablation.parquet", "batch_cap.parquet", "summary.md",
              "latency_vs_rate.png", "ablation.png", "meta.json"]:
        assert (run / f).exists(), f
    sp = pd.read_parquet(run / "speedups.parquet")
    assert set(sp.app) == {"naive_rag", "advanced_rag"} and (sp.speedup_mean > 0).all()
    assert (sp.n_seeds == 2).all() and (sp.speedup_min <= sp.speedup_max).all()
    assert set(sp.regime) <= {"low", "low (saturated)"} and (sp.prefix_cache_speedup > 0).all()
    cap = pd.read_parquet(run / "batch_cap.parquet")
    assert set(cap.capped) == {False, True} and {"teola", "teola-blind", "teola-topo-lowest",
                                                 "teola-no-prefill_split-blind"} <= set(cap.scheme)
    assert cap.lower_vs_blind.notna().all()                     # each scheme is set against its own blind twin
    assert "| app |" in capsys.readouterr().out
    assert set(sp.best_default) <= {"llamadist-to", "llamadistpc-to"} and (sp.speedup_vs_default > 0).all()
    same = sp[sp.default_teola == sp.teola_scheme]          # the best of all is at least as fast
    assert (same.speedup_vs_default >= same.speedup_mean - 1e-12).all()
    # the headline Teola has the best baseline's engine features; the paper's (no prefix cache) is beside it
    assert list(sp.teola_scheme) == ["teola+prefix-cache" if "pc" in b else "teola" for b in sp.best_baseline]
    assert (sp.no_cache_scheme == "teola").all() and (sp.no_cache_speedup > 0).all()
    dec = pd.read_parquet(run / "decomposition.parquet")
    assert set(dec.setting) == {"one_query", "load"} and set(dec.app) == {"naive_rag"}
    for _, g in dec.groupby("setting"):                  # over the headline Teola's engines
        assert g.teola_scheme.iloc[0] == ("teola+prefix-cache" if "pc" in g.baseline.iloc[0] else "teola")
    for _, g in dec.groupby("setting"):                  # the factors multiply to the total (Shapley: exact)
        parts, total = g[~g.part.str.startswith("total")], g[g.part.str.startswith("total")].iloc[0]
        assert abs(parts.factor.prod() / total.factor - 1) < 1e-9
        assert abs(total.factor - total.baseline_s / total.teola_s) < 1e-9
    paths = pd.read_parquet(run / "critical_paths.parquet")       # where Teola is slower: both schemes' paths
    slower = sp[(sp.speedup_mean < 1) & ~sp.saturated]
    assert set(zip(paths.app, paths.rate_rps)) == set(zip(slower.app, slower.rate_rps))
    md = (run / "summary.md").read_text()
    for r in slower.itertuples():
        assert f"### {r.app} at {r.rate_rps:g} req/s" in md and "Binding parts of Teola's path" in md
    cells = sorted((run / "cells").glob("*.parquet"))
    stamp = {c: c.stat().st_mtime_ns for c in cells}
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "t", "--no-progress"]) == 0
    assert {c: c.stat().st_mtime_ns for c in cells} == stamp      # finished cells are skipped


def test_app_overrides_change_a_workload_and_unknown_components_fail():
    import pytest

    from flowmaker.entry import UserError
    from experiments.kinds.teola_apps import Params, _app
    p = Params.model_validate({"app_overrides": {"advanced_rag": {
        "query": {"answer_tokens": 64}, "params": {"expansion": {"output_tokens": 72, "json_close_tokens": None}}}}})
    app = _app(p, "advanced_rag")
    assert app.query.answer_tokens == 64 and app.template().component("expansion").params["output_tokens"] == 72
    assert _app(p, "naive_rag").query.answer_tokens == 10                 # others untouched
    with pytest.raises(UserError, match="known"):
        _app(Params.model_validate({"app_overrides": {"naive_rag": {"params": {"nope": {}}}}}), "naive_rag")


def test_engine_prefix_cache_off_gives_every_scheme_plain_engines():
    from experiments.kinds.teola_apps import Params, _app, _engines
    from orchestrator import get_scheme
    app = _app(Params(), "naive_rag")
    on, off = Params(), Params(engine_prefix_cache=False)
    assert _engines(app, get_scheme("llamadistpc-to"), on)["llm"][0].prefix_caching
    assert not _engines(app, get_scheme("llamadistpc-to"), off)["llm"][0].prefix_caching
    assert not _engines(app, get_scheme("teola"), on)["llm"][0].prefix_caching


def test_tokens_per_word_reindexes_an_engines_profile_by_words():
    import pytest

    from experiments.kinds.teola_apps import Params, _app, _engines
    from flowmaker.entry import UserError
    from orchestrator import get_scheme
    from orchestrator.engines import load_engine_spec, per_word
    from orchestrator.primitives import Kind
    emb = load_engine_spec("all-minilm-l6-v2_cpu")
    t = emb.profiles[Kind.EMBEDDING]
    half = per_word(emb, 2.0).profiles[Kind.EMBEDDING]
    assert half.build().batch_s(4, 16) == pytest.approx(t.build().batch_s(4, 32))    # 16 words = 32 tokens
    llm = load_engine_spec("tiny-llama_cpu")
    a, b = llm.profile.build(), per_word(llm, 3.0).profile.build()
    assert b.step_s(100, 100 * 100, 0, 0) == pytest.approx(a.step_s(300, 300 * 300, 0, 0))
    assert b.step_s(0, 0, 2, 100) == pytest.approx(a.step_s(0, 0, 2, 300))
    over = {"naive_rag": {"engines": {"llm": "tiny-llama_cpu", "embedder": "all-minilm-l6-v2_cpu"},
                          "tokens_per_word": {"llm": 3.0}}}
    p = Params.model_validate({"app_overrides": over})
    eng = _engines(_app(p, "naive_rag"), get_scheme("teola"), p, "naive_rag")
    assert eng["llm"][0].step.step_s(100, 0, 0, 0) == pytest.approx(a.step_s(300, 0, 0, 0))
    with pytest.raises(UserError, match="tokens_per_word: unknown engines"):
        _app(Params.model_validate({"app_overrides": {"naive_rag": {"tokens_per_word": {"nope": 2.0}}}}), "naive_rag")
    with pytest.raises(ValueError):
        Params.model_validate({"app_overrides": {"naive_rag": {"tokens_per_word": {"llm": 0}}}})
