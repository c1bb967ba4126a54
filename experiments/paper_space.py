"""The paper-sized selection space (FlowMaker paper section 2): 3 candidate workflows of 1, 2
and 2 stages, 11 models, 10 configs -> 11*10 + 2*(11*10)^2 = 24,310 new-deployment variants,
plus reuse of instances already deployed.

Numbers come from the real catalog and the analytic profiler on 8x RTX A6000, resolved like
every task (``selector.resolve``). The paper counts every model on every config, so unlike
the quickstart this space keeps configs that vLLM's sharding rules refuse (e.g. 28 heads on
tp=8) and deployments too big for a GPU: the former are profiled with heads/FFN padded up to
a multiple of tp (a documented approximation), the latter simply fail placement. Three tasks
(code-completion, chat, rag-qa) are deployed first with ``flowmaker`` so that reuse options exist.
"""
from __future__ import annotations

import math

from selector.deploy import deploy_task, with_cluster
from selector.problem import Problem
from selector.resolve import AnalyticPerf, ResolveSettings, load_catalog, load_cluster_file, resolve_task
from selector.taskspec import TaskSpec

PAPER_TASK = TaskSpec.model_validate({
    "name": "paper-space", "description": "the paper's example space: workflows of 1, 2 and 2 stages",
    "trace": "conv", "accuracy_slo": 24.0, "latency_slo_factor": 4.0, "arrival_rate_rps": 1.0,
    "workflows": [
        {"name": "answer", "stages": [{"name": "answer", "role": "answer"}]},
        {"name": "rewrite-answer", "stages": [{"name": "rewrite", "role": "rewrite"}, {"name": "answer", "role": "answer"}]},
        {"name": "answer-verify", "stages": [{"name": "answer", "role": "answer"}, {"name": "verify", "role": "verify"}]},
    ]})


def _padded(model, tp: int):
    """The model with heads, KV heads and FFN rounded up to multiples of ``tp``."""
    up = lambda x: int(math.ceil(x / tp) * tp)  # noqa: E731
    kv = model.kv_heads if (model.kv_heads % tp == 0 or tp % model.kv_heads == 0) else up(model.kv_heads)
    return model.model_copy(update={"heads": up(model.heads), "kv_heads": kv, "ffn": up(model.ffn)})


class EveryConfigPerf(AnalyticPerf):
    """Analytic numbers for every (model, tp, pp), padding shardings vLLM would refuse."""

    def latency_s(self, model, gpu, tp, pp, batch, prompt, output) -> float:
        return super().latency_s(self._fix(model, tp, pp), gpu, tp, pp, batch, prompt, output)

    def mem_gb(self, model, gpu, tp, pp, s: ResolveSettings) -> float | None:
        sm = self.model.step_model(self._fix(model, tp, pp), gpu, tp, pp)
        return sm.mem_gb(s.kv_reserve_tokens, s.max_batch_tokens, s.max_batch)

    def _fix(self, model, tp, pp):
        from profiler.analytic import unsupported_reason
        return model if unsupported_reason(model, tp, pp) is None else _padded(model, tp)


def paper_sized_problem() -> Problem:
    """The paper-sized problem on 8x A6000 with two tasks already deployed (reuse options)."""
    catalog = load_catalog()
    cluster, gpu = load_cluster_file()
    perf = EveryConfigPerf()
    from solvers.registry import get_solver
    for warm in ("code-completion", "chat", "rag-qa"):
        p = resolve_task(warm, catalog=catalog, cluster=cluster, gpu=gpu)
        _, cluster = deploy_task(with_cluster(p, cluster), get_solver("flowmaker"))
    return resolve_task(PAPER_TASK, catalog=catalog, cluster=cluster, gpu=gpu, perf=perf,
                        settings=ResolveSettings(keep_unfit=True))
