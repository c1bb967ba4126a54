"""Names that become parts of file paths: the one place that says which names are safe as a
path component (experiment names, run ids, task names, app names) and maps any other string
(a cell key built from user values, an app given by path) to a safe file name, so that nothing
a user writes in a config or task file can place a file outside the results folder.

A safe name is one plain folder or file name: letters, digits, ``_``, ``.``, ``+``, ``=`` and
``-``, starting with a letter or digit (so never ``.``, ``..`` or a hidden file), at most
:data:`MAX_NAME` characters, no separators, no NUL, no surrogates.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from flowmaker.inputs import InputError

MAX_NAME = 128
NAME_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.+=-]{{0,{MAX_NAME - 1}}}")   # matched whole (fullmatch)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+=-]+")


class BadName(InputError):
    """A name that cannot be a path component, or one given twice; ``str(exc)`` names the field."""


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a safe path component (see the module), or None when it is."""
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if NAME_RE.fullmatch(name):
        return None
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME:
        return f"longer than {MAX_NAME} characters"
    return ("must be letters, digits, '_', '.', '+', '=' or '-', starting with a letter or digit "
            "(one plain file name: no '/', no '..')")


def check_name(name: object, field: str) -> str:
    """``name`` when it is a safe path component; otherwise a :class:`BadName` naming ``field``."""
    why = name_problem(name)
    if why is not None:
        raise BadName(f"{field} {str(name)[:80]!r}", why)
    return name  # type: ignore[return-value]


def file_name(key: str) -> str:
    """A safe file name for any string: ``key`` itself when it is safe, else its safe characters
    (runs of others become ``_``) plus 10 hex digits of its SHA-256, so that two different keys
    never share a file."""
    if NAME_RE.fullmatch(key):
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    stem = _UNSAFE.sub("_", key).strip("._-")[: MAX_NAME - 12] or "x"
    if not stem[0].isalnum():
        stem = "x" + stem
    return f"{stem}-{digest}"


def path_inside(root: Path, *parts: str) -> Path:
    """``root`` joined with ``parts`` mapped through :func:`file_name`: always a path inside ``root``."""
    return root.joinpath(*(file_name(p) for p in parts))


def check_distinct(names: Iterable[str], field: str) -> None:
    """:class:`BadName` naming the first name that occurs twice in ``names``."""
    try:
        distinct(list(names))
    except ValueError as exc:
        raise BadName(field, str(exc)) from None


def distinct(names: list[str]) -> list[str]:
    """``names`` when no name occurs twice; a ValueError naming the repeated one (a pydantic
    ``AfterValidator``)."""
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"'{n}' occurs twice; names must be distinct")
        seen.add(n)
    return names
