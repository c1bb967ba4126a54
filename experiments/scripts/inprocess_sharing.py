"""How the real CPU engines slow each other when they run at once IN ONE PROCESS, as in
``teola_real_cpu`` (every engine on its own worker thread of one Python process), measured apart from
any run (issue 26): is it more than fair sharing of the machine's cores (the interpreter lock)?

Each pair times a *victim* batch (through its engine's own ``submit``: wall ``duration_s`` and the
CPU of its thread ``cpu_s``) under three conditions, rotated per round: ``alone``; beside an
*aggressor* batch repeated without pause on another engine instance's worker thread of this process
(``thread``); beside the same aggressor loop in a child process (``process``, the control: it
shares the cores, not the interpreter). Both aggressors are loaded once per pair and idle (waiting
on an event, the interpreter lock released) outside their condition. Two executions on 2 cores: fair sharing predicts the same
wall in ``thread`` as in ``process``. Batches are the real run's: MiniLM on 8 of the guide's
paragraphs (Teola's first index batch), the tiny Llama's 4 partial prefills of 3 paragraphs each
(~450 tokens, Teola's naive-RAG leaf prefixes) and a 16-token decode after a prompt of one paragraph,
torch at 1 thread. Prints per pair and condition the median wall and CPU (ms) and the ratios to
``alone``, and the load average before and after.

    PYTHONPATH=. python experiments/scripts/inprocess_sharing.py [ROUNDS] [pairs|triples|all]

``summarize LOG...`` reads such logs back: per victim group (the decode; every other), the in-process
cost per other execution of each measurement and their median (``teola_apps``'s ``cpu_same_process_decode``
and ``cpu_same_process``):

    PYTHONPATH=. python experiments/scripts/inprocess_sharing.py summarize results/bench_nonllm/inprocess_sharing_*.log
"""
from __future__ import annotations

import multiprocessing as mp
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from experiments.kinds.teola_real_cpu import load_corpus
from orchestrator.engines.base import Invocation
from orchestrator.primitives import Kind

LLM_DIR = Path(tempfile.gettempdir()) / "flowmaker_tiny_llama"
PAIRS = (("embed 8", ("partial prefills",)), ("embed 8", ("decode 16",)), ("decode 16", ("embed 8",)),
         ("partial prefills", ("embed 8",)), ("embed 8", ("embed 8",)))
#: three executions at once on the 2 cores (the model's ``1 + same_process * (k - 1)`` at k = 3 is an
#: assumption until measured): advanced RAG's decode beside an embedding and a reranking-sized batch
TRIPLES = (("decode 16", ("embed 8", "embed 8")), ("embed 8", ("decode 16", "partial prefills")),
           ("decode 16", ("embed 8", "partial prefills")))


class Ops:
    """The engines of one process (an embedder and a tiny-Llama instance) and the batches they run."""

    def __init__(self) -> None:
        import torch
        from orchestrator.engines.real.embedding import SentenceEmbeddingEngine
        from orchestrator.engines.real.llm import TorchLLMEngine
        from orchestrator.engines.real.tinyllm import build_tiny_llama
        torch.set_num_threads(1)
        self.paras, self.questions = load_corpus("ostvik_guide")
        self.emb = SentenceEmbeddingEngine(name="minilm", max_batch=16)
        self.llm = TorchLLMEngine(name="llm", model_dir=build_tiny_llama(LLM_DIR)).load()
        self.emb.warm()
        self.llm.warm()
        self.n = 0

    def run(self, op: str) -> tuple[float, float]:
        """Run one batch of ``op``; its wall and thread CPU (s)."""
        self.n += 1
        r, p = self.n, self.paras
        if op == "embed 8":
            invs = [Invocation("e", Kind.EMBEDDING, {"texts": [p[(r + k) % len(p)] for k in range(8)]}, n_items=8)]
            res = self.emb.submit(invs).result()
        elif op == "partial prefills":
            invs = [Invocation(f"p{r}/{j}", Kind.PARTIAL_PREFILLING,
                               {"segments": (" ".join(p[(r + 3 * j + k) % len(p)] for k in range(3)),)}, {}, f"p{r}/{j}")
                    for j in range(4)]
            res = self.llm.submit(invs).result()
            for inv in invs:                        # nothing continues them: drop their KV
                self.llm._kv.pop(inv.kv_key, None)
        elif op == "decode 16":
            key = f"d{r}"
            self.llm.submit([Invocation(key, Kind.PREFILLING, {"segments": (p[r % len(p)],)}, {}, key)]).result()
            res = self.llm.submit([Invocation(f"{key}/d", Kind.DECODING, {}, {"output_tokens": 16, "fmt": "text"},
                                              key)]).result()
        else:
            raise ValueError(op)
        return res.duration_s, float(res.cpu_s or 0.0)


def _loop(op: str, go: Any, stop: Any, started: Any) -> None:
    ops = Ops()
    started.set()
    while not stop.is_set():
        if go.wait(0.05):
            ops.run(op)


class Aggressor:
    """``op`` repeated without pause while ``go`` is set, on a thread of this process (its own
    engines) or in a child process; loaded once per pair."""

    def __init__(self, op: str, where: str) -> None:
        ctx = mp.get_context("spawn")
        ev = ctx.Event if where == "process" else threading.Event
        self.go, self.stop, started = ev(), ev(), ev()
        args = (op, self.go, self.stop, started)
        self.worker = (ctx.Process(target=_loop, args=args) if where == "process"
                       else threading.Thread(target=_loop, args=args, daemon=True))
        self.worker.start()
        started.wait()

    def close(self) -> None:
        self.stop.set()
        self.worker.join()


def measure(ops: Ops, victim: str, aggressors: tuple[str, ...], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """``victim``'s batches alone, beside every one of ``aggressors`` on threads of this process, and
    beside them in child processes (one each), the conditions rotated per round."""
    out: dict[str, list[tuple[float, float]]] = {}
    aggs = {where: [Aggressor(a, where) for a in aggressors] for where in ("thread", "process")}
    conds = ["alone", "thread", "process"]
    try:
        for r in range(rounds):
            for cond in conds[r % 3:] + conds[:r % 3]:
                for agg in aggs.get(cond, ()):
                    agg.go.set()
                if cond in aggs:
                    time.sleep(0.05)            # their loops are under way
                for _ in range(4):
                    out.setdefault(cond, []).append(ops.run(victim))
                for agg in aggs.get(cond, ()):
                    agg.go.clear()
                if cond in aggs:
                    time.sleep(0.1)             # their batches in flight end
    finally:
        for agg in (a for group in aggs.values() for a in group):
            agg.close()
    return out


def main(rounds: int = 6, which: str = "pairs") -> None:
    print(f"load average before: {os.getloadavg()}; cores: {os.cpu_count()}")
    ops = Ops()
    for victim, aggressors in {"pairs": PAIRS, "triples": TRIPLES, "all": PAIRS + TRIPLES}[which]:
        aggressor = " + ".join(aggressors)
        t = measure(ops, victim, aggressors, rounds)
        wall0 = statistics.median(w for w, _ in t["alone"])
        cpu0 = statistics.median(c for _, c in t["alone"])
        for cond, xs in t.items():
            w, c = statistics.median(x for x, _ in xs), statistics.median(y for _, y in xs)
            q = statistics.quantiles([x for x, _ in xs], n=4) if len(xs) > 1 else [w, w, w]
            print(f"{victim:16s} beside {aggressor:16s} {cond:7s}: wall {1e3 * w:6.1f} ms [{1e3 * q[0]:.1f}-{1e3 * q[2]:.1f}] "
                  f"({w / wall0:4.2f}x alone)  cpu {1e3 * c:6.1f} ms ({c / cpu0:4.2f}x)  n={len(xs)}")
        print(f"  load average now: {os.getloadavg()}", flush=True)
    ops.emb.close()
    ops.llm.close()


_LINE = re.compile(r"^(?P<victim>.+?)\s+beside (?P<aggs>.+?)\s+(?P<cond>thread|process)\s*: wall\s+(?P<wall>[\d.]+) ms")


def per_victim(logs: list[str]) -> dict[str, list[float]]:
    """From this script's logs, each (victim, aggressors) measurement's in-process cost per other execution,
    ``(thread wall / process wall - 1) / (k - 1)`` (``k`` executions at once), grouped into ``decode`` (the
    LLM decode as the victim) and ``other`` (every other victim): ``SharedCores``'s ``decode_same_process``
    and ``same_process`` are their medians."""
    walls: dict[tuple[str, str, str, str], float] = {}
    for log in logs:
        for line in Path(log).read_text().splitlines():
            m = _LINE.match(line)
            if m:
                walls[(log, m["victim"].strip(), m["aggs"].strip(), m["cond"])] = float(m["wall"])
    out: dict[str, list[float]] = {"decode": [], "other": []}
    for (log, victim, aggs, cond), w in sorted(walls.items()):
        if cond == "thread" and (log, victim, aggs, "process") in walls:
            k = 2 + aggs.count(" + ")
            out["decode" if victim.startswith("decode") else "other"].append(
                (w / walls[(log, victim, aggs, "process")] - 1) / (k - 1))
    return out


def summarize(logs: list[str]) -> list[str]:
    """One line per victim group: the median and every measurement (``summarize`` on the command line)."""
    return [f"{group:6s} victims: in-process cost per other execution, median {statistics.median(xs):.3f} "
            f"over {len(xs)} measurements: {', '.join(f'{x:.3f}' for x in sorted(xs))}"
            for group, xs in per_victim(logs).items()]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "summarize":
        print("\n".join(summarize(sys.argv[2:])))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 6, sys.argv[2] if len(sys.argv) > 2 else "pairs")
