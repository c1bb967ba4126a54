"""The Ayo example workloads (configs/apps/*_ayo.yaml) keep their sourced shape, and the experiment
that runs them reports the speedup against the unoptimised DAG."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.run import main
from orchestrator import build_pgraph, load_app

CFG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "teola_ayo.yaml"


@pytest.mark.parametrize("name", ["naive_rag_ayo", "advanced_rag_ayo"])
def test_ayo_workload_shape(name):
    app = load_app(name)
    q = app.query
    assert q.n_chunks == 666 and q.chunk_overlap_tokens == 0          # 666 passages, used as they are
    assert (q.fetch_k, q.top_k, q.answer_tokens) == (20, 2, 10)          # search 20, rerank 2, max_tokens 10
    assert all(b.instances == 1 for b in app.engines.values())
    g = build_pgraph(app.template(), q)
    assert sum(n.kind.name == "DECODING" for n in g.nodes.values()) == (2 if "advanced" in name else 1)


def test_teola_ayo_experiment(tmp_path):
    assert main([str(CFG), "--results", str(tmp_path), "--run-id", "r", "--no-progress"]) == 0
    sp = pd.read_parquet(tmp_path / "teola_ayo" / "r" / "speedups.parquet")
    assert set(sp.app) == {"naive_rag_ayo", "advanced_rag_ayo"}
    assert sp.speedup_vs_unoptimised.notna().all() and sp.paper_speedup.str.contains("Ayo").all()
