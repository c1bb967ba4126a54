"""Report glossaries that match their tables: the one rule every ``summary.md`` writer can apply.

A glossary is a markdown list of ``- `name`: meaning`` entries (continuation lines indented);
:func:`table_columns` reads the header cells of the markdown tables of a report, and
:func:`matching` keeps only the entries that name one of them, so a report never explains a column
its tables lack (issue 27 item 5; ``tests/experiments/test_glossaries.py`` checks the published ones).
"""
from __future__ import annotations

import re

_ENTRY = re.compile(r"^- `([^`]+)`")
_RULE = re.compile(r"^\|[\s:|-]+\|?$")


def table_columns(markdown: str) -> set[str]:
    """Header cells (backticks stripped) of every markdown table in ``markdown``."""
    lines = markdown.splitlines()
    cols: set[str] = set()
    for head, rule in zip(lines, lines[1:]):
        if head.startswith("|") and _RULE.match(rule.strip()):
            cols |= {c.strip().strip("`") for c in head.strip().strip("|").split("|")}
    return cols


def glossary_entries(markdown: str) -> list[str]:
    """The names the glossary entries of ``markdown`` explain."""
    return [m.group(1) for m in map(_ENTRY.match, markdown.splitlines()) if m]


def matching(glossary: str, report: str) -> str:
    """``glossary`` without the entries (with their continuation lines) naming no column of ``report``."""
    cols, out, keep = table_columns(report), [], True
    for line in glossary.splitlines():
        m = _ENTRY.match(line)
        if m:
            keep = m.group(1) in cols
        elif not line.startswith(" "):
            keep = True
        if keep:
            out.append(line)
    return "\n".join(out) + ("\n" if glossary.endswith("\n") else "")
