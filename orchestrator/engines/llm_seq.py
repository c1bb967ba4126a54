"""The vocabulary the LLM core (``orchestrator.engines.llm_core``) and its policies
(``orchestrator.engines.admission``) share: a sequence (:class:`Seq`, its states, the callbacks the
core tells of finished sequences and reached marks), what a policy sees of the core
(:class:`CoreView`, read-only), what it decides (:class:`IterationPlan`, immutable) and the policy
interface itself (:class:`Policy`).

Tokens: the prefill that completes a prompt produces the first output token (vLLM); each
decode iteration one more. A prefill-only sequence (``output == 0``) parks its KV under
``park`` (blocks stay allocated) and records whether its last logits give a first token
(``final``); a later sequence with ``kv_from`` set takes that KV over: it prefills only its own
new tokens, paying attention over the parked prefix, or, with nothing new to prefill, joins the
decode batch at once.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from orchestrator.runtime.events import Event
from profiler.engine import EngineConfig

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
                 "filled", "tokens0", "ctx0", "join", "finish", "preemptions", "owner", "background")

    def __init__(self, id: int, prompt: int, output: int, arrival_s: float = NAN, owner: object = None, *,
                 cached: int = 0, kv_from: Hashable | None = None, park: Hashable | None = None, final: bool = True,
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

    @property
    def failed(self) -> bool:
        return self.state == FAILED


Sink = Callable[[Seq, float], "Iterable[Event] | None"]
PieceSink = Callable[[Seq, int, float], "Iterable[Event] | None"]


class IterationPlan(NamedTuple):
    """One iteration as a policy decides it; only the core applies it, in this order (vLLM v1's
    ``SchedulerOutput``: ``preempted_req_ids``, then ``num_scheduled_tokens`` per request).

    ``preempt``: sequences preempted by recomputation, in order; each frees its blocks and goes to
    the head of the waiting queue (so the last one ends first), to prefill its whole context
    (:meth:`CoreView.recompute_tokens`) when readmitted. ``decode``: whether the decode batch left
    after the preemptions decodes one token per sequence (the batch advances as a whole: its
    bookkeeping is O(1) per iteration; a policy that would decode only some preempts the others).
    ``chunks``: (sequence, prompt tokens) prefilled in this iteration, in order: a sequence being
    prefilled continues, a waiting one (the head of its queue, the regular queue before the
    background one) is admitted first, taking the blocks of its whole prompt.

    The core times the iteration from the plan (the step time model), not the policy."""

    preempt: tuple[Seq, ...] = ()
    decode: bool = False
    chunks: tuple[tuple[Seq, int], ...] = ()


#: an iteration with nothing to run; one where only the decode batch runs
IDLE = IterationPlan()
DECODE_ONLY = IterationPlan(decode=True)


class CoreView(Protocol):
    """What a policy may read of a core (``LLMCore`` is one); nothing here may be written.

    Queues in order: ``waiting`` (regular sequences not admitted), ``background`` (low-priority
    prefills, ``Seq.background``), ``prefilling`` (admitted, prompt not fully prefilled) and
    ``running`` (decoding, by id in admission order). KV in blocks of ``block_size`` tokens:
    ``free`` of ``total_blocks``, ``watermark`` kept free at admission."""

    @property
    def config(self) -> EngineConfig: ...
    @property
    def waiting(self) -> Sequence[Seq]: ...
    @property
    def background(self) -> Sequence[Seq]: ...
    @property
    def prefilling(self) -> Sequence[Seq]: ...
    @property
    def running(self) -> Mapping[int, Seq]: ...
    @property
    def free(self) -> int: ...
    @property
    def watermark(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_batch_tokens(self) -> int: ...

    def blocks(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""

    def new_blocks(self, s: Seq) -> int:
        """Blocks waiting sequence ``s`` must newly take to be admitted."""

    def need_blocks(self) -> int:
        """New blocks the decode batch needs in its next decode iteration."""

    def needs_block(self, s: Seq) -> bool:
        """Whether decoding sequence ``s`` is one of those needing a new block."""

    def held_blocks(self, s: Seq) -> int:
        """Blocks admitted sequence ``s`` (decoding or prefilling) frees when preempted now."""

    def recompute_tokens(self, s: Seq) -> int:
        """Tokens admitted sequence ``s`` prefills when readmitted after a preemption now."""


class Policy(Protocol):
    """Decides each iteration of one core (``EngineConfig.scheduler`` names one).

    A policy may declare ``decodes_when_quiet = True``: with nothing waiting, prefilling, ready
    or in the background queue and the decode batch's next blocks free, its plan is always
    :data:`DECODE_ONLY`, so the core does not ask (most iterations of a busy core; every policy
    of ``orchestrator.engines.admission`` declares it). Without it the core asks every time."""

    name: str

    def schedule(self, view: CoreView) -> IterationPlan:
        """The next iteration; :data:`IDLE` when there is nothing to run."""
