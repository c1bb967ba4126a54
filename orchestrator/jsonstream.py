"""Incremental JSON parser for decode pipelining.

Feed it the text of a top-level JSON array as it is generated, in arbitrary pieces (tokens);
each call returns the elements completed by that piece, already decoded with ``json.loads``.
Strings may contain brackets, commas and escaped quotes; elements may be nested values.

    p = IncrementalJsonList()
    p.feed('["a b", "c')   # -> ["a b"]
    p.feed('"]')           # -> ["c"]
"""
from __future__ import annotations

import json
from typing import Any


class JsonStreamError(ValueError):
    """The stream is not a JSON array."""


class IncrementalJsonList:
    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._depth = 0          # nesting inside the current element
        self._in_str = False
        self._escape = False
        self._buf: list[str] = []
        self.emitted = 0

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, text: str) -> list[Any]:
        """Consume ``text``; return the elements it completed, in order."""
        out: list[Any] = []
        for ch in text:
            if self._done:
                if not ch.isspace():
                    raise JsonStreamError(f"trailing data after the array: {ch!r}")
                continue
            if not self._started:
                if ch.isspace():
                    continue
                if ch != "[":
                    raise JsonStreamError(f"expected '[' to open the array, got {ch!r}")
                self._started = True
                continue
            if self._in_str:
                self._buf.append(ch)
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_str = False
                continue
            if self._depth == 0 and ch in ",]":
                self._flush(out, closing=ch == "]")
                if ch == "]":
                    self._done = True
                continue
            if ch == '"':
                self._in_str = True
            elif ch in "[{":
                self._depth += 1
            elif ch in "]}":
                self._depth -= 1
            self._buf.append(ch)
        return out

    def _flush(self, out: list[Any], *, closing: bool) -> None:
        raw = "".join(self._buf).strip()
        self._buf.clear()
        if not raw:
            if closing and self.emitted == 0:
                return  # "[]"
            raise JsonStreamError("empty array element")
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise JsonStreamError(f"bad element {raw[:40]!r}: {exc}") from None
        self.emitted += 1


def stream_pieces(text: str, n_tokens: int, close_tokens: int | None = None) -> list[tuple[int, Any]]:
    """Split ``text`` into ``n_tokens`` near-equal slices (one per decode step), feed them to a
    parser and return ``(step, element)`` for each element, ``step`` counted from 1. With
    ``close_tokens`` the array ends at that step: its text is spread over the first
    ``close_tokens`` steps and whatever follows the array is not parsed."""
    n_tokens = max(1, n_tokens)
    if close_tokens is not None:
        n_tokens = max(1, min(close_tokens, n_tokens))
        start = len(text) - len(text.lstrip())
        text = text[:start + json.JSONDecoder().raw_decode(text[start:])[1]]
    bounds = [round(i * len(text) / n_tokens) for i in range(n_tokens + 1)]
    p = IncrementalJsonList()
    out = []
    for step in range(n_tokens):
        for el in p.feed(text[bounds[step]:bounds[step + 1]]):
            out.append((step + 1, el))
    if not p.done:
        raise JsonStreamError("the array was never closed")
    return out
