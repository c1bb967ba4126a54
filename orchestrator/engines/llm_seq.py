"""A sequence as the LLM core (``orchestrator.engines.llm_core``) serves it: :class:`Seq`, its
states, and the callbacks the core tells of finished sequences and reached marks.

Tokens: the prefill that completes a prompt produces the first output token (vLLM); each
decode iteration one more. A prefill-only sequence (``output == 0``) parks its KV under
``park`` (blocks stay allocated) and records whether its last logits give a first token
(``final``); a later sequence with ``kv_from`` set takes that KV over: it prefills only its own
new tokens, paying attention over the parked prefix, or, with nothing new to prefill, joins the
decode batch at once.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from orchestrator.runtime.events import Event

WAITING, PREFILL, DECODE, DONE, FAILED = range(5)
NAN = float("nan")


class Seq:
    """One sequence served by one core: ``prompt`` new tokens in, ``output`` tokens out.

    ``cached``: prefix tokens whose KV is already computed (a prefix-cache hit; not prefilled,
    blocks allocated). ``kv_from``/``park``/``final``: see the module docstring. ``marks``:
    ascending counts of generated tokens at which the core reports a piece. ``background``: a
    low-priority prefill (Teola's partial prefilling): admitted only into a prefill pass that runs
    anyway, with what its budget leaves, or on an idle instance; never ahead of a queued
    sequence (:meth:`LLMCore.promote` makes it a regular one). Times are simulated
    seconds (NaN until they happen): ``arrival_s`` (reached the instance), ``sched_s`` (first
    admitted), ``first_s`` (first output token), ``done_s`` (finished, parked or rejected).
    ``owner`` is free for the caller."""

    __slots__ = ("id", "prompt", "output", "cached", "kv_from", "park", "final", "marks", "mark_i",
                 "arrival_s", "sched_s", "first_s", "done_s", "state", "gen", "have", "held", "eff",
                 "filled", "tokens0", "ctx0", "join", "finish", "preemptions", "owner", "instance", "background")

    def __init__(self, id: int, prompt: int, output: int, arrival_s: float = NAN, owner: Any = None, *,
                 cached: int = 0, kv_from: Any = None, park: Any = None, final: bool = True,
                 marks: Sequence[int] = (), background: bool = False) -> None:
        self.id, self.prompt, self.output, self.owner = id, prompt, output, owner
        self.background = background
        self.cached, self.kv_from, self.park, self.final = cached, kv_from, park, final
        self.marks, self.mark_i = tuple(marks), 0
        self.arrival_s = arrival_s
        self.sched_s = self.first_s = self.done_s = NAN
        self.state = WAITING
        self.gen = 0          # output tokens generated so far
        self.have = cached    # context tokens whose KV exists when admitted
        self.held = 0         # KV blocks it owns before admission (a parked prefix)
        self.eff = prompt     # tokens the next prefill must process
        self.filled = 0       # of `eff`, already prefilled (chunked prefill)
        self.tokens0 = cached + prompt   # its context before generating (set again on kv_from)
        self.ctx0 = 0         # KV tokens when it joined the decode pool ...
        self.join = 0         # ... at this decode-iteration index
        self.finish = -1      # decode-iteration index of its last token
        self.preemptions = 0
        self.instance: Any = None

    @property
    def failed(self) -> bool:
        return self.state == FAILED


Sink = Callable[[Seq, float], "Iterable[Event] | None"]
PieceSink = Callable[[Seq, int, float], "Iterable[Event] | None"]
