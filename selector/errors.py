"""Errors raised on bad user input; the command-line faces print them as one line."""
from __future__ import annotations


class ProblemError(ValueError):
    """A resolved problem (or a file describing one) is malformed.

    ``field`` is a dotted path to the offending entry (``perf[3].latency_s``); the message
    names it so the user can fix the input without reading a traceback.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)
