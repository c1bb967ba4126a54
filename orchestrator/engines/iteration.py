"""Iteration-level LLM instance: the vLLM scheduler loop that Teola's engines run.

The discrete-event runtime drives it with ``enqueue`` (primitives placed on the instance) and
``start_iteration(now_s)`` (the next forward pass, or None when idle); the pass's results are
delivered when it ends. Rules, from the vLLM that Teola/Ayo ships (``NetX-lab/Ayo``,
``vllm/vllm/core/scheduler.py``, ``Scheduler._schedule``):

* prompts first: if prompts wait, the iteration is a prefill pass over waiting prompts in FCFS
  order while ``len(batch) * max(prompt tokens) <= max_num_batched_tokens`` (padded batch),
  ``max_num_seqs`` and KV capacity allow; running decodes stall for that pass;
* else one decode step for every running sequence (each emits one token);
* a FullPrefilling continues a partially prefilled request and goes to the *front* of the
  waiting queue (``self.waiting.insert(0, seq_group)`` for groups with a new prompt chunk); it
  only pays its new tokens (plus attention over the cached prefix).

So queued prefills of different queries share one pass (one fixed per-pass cost), a split
prefill costs an extra pass only when no other prompt shares it, and prefills delay decodes:
the three effects a per-batch timing model cannot show.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from orchestrator import ops
from orchestrator.engines.base import EngineError, Invocation
from orchestrator.engines.profiles import LatencyProfile
from orchestrator.engines.sim import SimLLMEngine
from orchestrator.jsonstream import stream_pieces
from orchestrator.primitives import Kind, PREFILL_KINDS


@dataclass
class _Seq:
    inv: Invocation
    context: int
    n_out: int
    text: str
    pieces: list[tuple[int, Any]]
    generated: int = 0
    emitted: int = 0


@dataclass(frozen=True)
class Iteration:
    """One forward pass: ``duration_s``; ``done``: ``(invocation key, output)`` final at its end;
    ``pieces``: ``(invocation key, piece index, value)`` streamed JSON items completed by it."""
    duration_s: float
    done: tuple[tuple[str, Any], ...]
    pieces: tuple[tuple[str, int, Any], ...] = ()
    kind: str = "decode"


class IterationLLMEngine(SimLLMEngine):
    """A :class:`SimLLMEngine` that, driven by the discrete-event runtime, runs vLLM's
    iteration-level schedule instead of timing each submitted batch on its own. ``submit`` (the
    batch-at-once protocol other runtimes use) is inherited unchanged."""
    iterative = True

    def __init__(self, *, name: str, profile: LatencyProfile, kv_capacity_tokens: int = 16_000,
                 prefix_caching: bool = False, max_num_batched_tokens: int = 4096,
                 max_num_seqs: int = 256, **kw: Any) -> None:
        super().__init__(name=name, profile=profile, kv_capacity_tokens=kv_capacity_tokens,
                         prefix_caching=prefix_caching, **kw)
        self.max_num_batched_tokens, self.max_num_seqs = max_num_batched_tokens, max_num_seqs
        self._waiting: list[Invocation] = []
        self._running: list[_Seq] = []
        self.busy = False
        self.iterations = {"prefill": 0, "decode": 0}

    # ---- bookkeeping -------------------------------------------------------------------------
    def occupied_kv_tokens(self) -> int:
        """KV held: prefilled prompts (incl. partial ones waiting for the rest) and every running
        sequence with the tokens it generated so far."""
        return super().occupied_kv_tokens() + sum(s.context + s.generated for s in self._running)

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def enqueue(self, batch: Sequence[Invocation]) -> None:
        """Place primitives on this instance; they join the next iteration that admits them."""
        for inv in batch:
            if inv.kind == Kind.FULL_PREFILLING:
                if inv.kv_key not in self._kv:
                    raise EngineError(f"{self.name}: FullPrefilling {inv.key} has no KV cache {inv.kv_key!r} here")
                self._waiting.insert(0, inv)
            elif inv.kind in PREFILL_KINDS:
                self._waiting.append(inv)
            elif inv.kind == Kind.DECODING:
                self._running.append(self._admit_decode(inv))
            else:
                raise EngineError(f"engine {self.name!r} only runs LLM primitives, not {inv.kind}")

    def _admit_decode(self, inv: Invocation) -> _Seq:
        if inv.kv_key not in self._kv:
            raise EngineError(f"{self.name}: Decoding {inv.key} has no KV cache {inv.kv_key!r} here")
        kv = self._kv.pop(inv.kv_key)
        n = int(inv.params["output_tokens"])
        fmt = inv.params["fmt"]
        text = ops.generate(kv, fmt=fmt, n_tokens_out=n, n_items=int(inv.params.get("n_items", 1)))
        pieces = stream_pieces(text, n) if fmt == "json_list" else []
        return _Seq(inv, ops.n_tokens(kv), n, text, pieces)

    # ---- one iteration -----------------------------------------------------------------------
    def start_iteration(self, now_s: float) -> Iteration | None:
        """The next forward pass at ``now_s`` (prefill pass if prompts wait and fit, else one
        decode step), or None when there is nothing to run."""
        if self._waiting:
            it = self._prefill_pass()
            if it is not None:
                return it
        if self._running:
            return self._decode_step()
        return None

    def _prompt_tokens(self, inv: Invocation) -> int:
        return ops.n_tokens(ops.prompt_segments(inv.inputs["segments"]))

    def _prefill_pass(self) -> Iteration | None:
        chosen, lens = [], []
        kv_free = self.kv_capacity_tokens - self.occupied_kv_tokens()
        n_seqs = len(self._running)
        for inv in self._waiting:
            n = self._prompt_tokens(inv)
            padded = (len(lens) + 1) * max(lens + [n])
            if chosen and (padded > self.max_num_batched_tokens or n_seqs + 1 > self.max_num_seqs or n > kv_free):
                break
            if not chosen and n > kv_free and (self._running or super().occupied_kv_tokens()):
                return None          # wait for KV to free up (vLLM: AllocStatus.LATER)
            chosen.append(inv)
            lens.append(n)
            kv_free -= n
            n_seqs += 1
        if not chosen:
            return None
        self._waiting = self._waiting[len(chosen):]
        news, cached, kvs = self._prefill_all(chosen)
        done = [(inv.key, kv) for inv, kv in zip(chosen, kvs)]
        self.iterations["prefill"] += 1
        return Iteration(self.profile.prefill_s(news, cached), tuple(done), (), "prefill")

    def _decode_step(self) -> Iteration:
        seqs = self._running
        dur = self.profile.decode_step_s(len(seqs), sum(s.context + s.generated for s in seqs))
        done, pieces, still = [], [], []
        for s in seqs:
            s.generated += 1
            while s.pieces and s.pieces[0][0] == s.generated:
                _, el = s.pieces.pop(0)
                pieces.append((s.inv.key, s.emitted, [el]))
                s.emitted += 1
            if s.generated >= s.n_out:
                done.append((s.inv.key, s.text))
            else:
                still.append(s)
        self._running = still
        self.iterations["decode"] += 1
        return Iteration(dur, tuple(done), tuple(pieces), "decode")
