"""One LLM call served by one instance, with the timestamps the metrics need."""
from __future__ import annotations

from typing import Any

WAITING, PREFILL, DECODE, DONE, FAILED = range(5)


class Call:
    """A request to one instance: ``prompt`` tokens in, ``output`` tokens out (both >= 1).

    Times are simulated seconds (NaN until they happen): ``arrival_s`` (reached the
    instance), ``sched_s`` (first admitted to a batch), ``first_s`` (first output token),
    ``done_s`` (last output token, or when it was rejected). ``owner`` is free for the
    caller (e.g. the workflow request this call belongs to).
    """

    __slots__ = ("id", "prompt", "output", "arrival_s", "sched_s", "first_s", "done_s", "state",
                 "gen", "eff", "filled", "ctx0", "join", "finish", "preemptions", "owner", "instance")

    def __init__(self, id: int, prompt: int, output: int, arrival_s: float, owner: Any = None) -> None:
        self.id = id
        self.prompt = prompt
        self.output = output
        self.arrival_s = arrival_s
        self.sched_s = self.first_s = self.done_s = float("nan")
        self.state = WAITING
        self.gen = 0          # output tokens generated so far
        self.eff = prompt     # tokens the next prefill must process (prompt + gen after a preemption)
        self.filled = 0       # of `eff`, already prefilled (chunked prefill)
        self.ctx0 = 0         # KV tokens when it joined the decode pool ...
        self.join = 0         # ... at this decode-iteration index
        self.finish = -1      # decode-iteration index of its last token
        self.preemptions = 0
        self.owner = owner
        self.instance: Any = None

    @property
    def failed(self) -> bool:
        return self.state == FAILED
