"""Strict YAML/JSON loading for problem, task, bundle and experiment files: duplicate mapping
keys are an error (not a silent overwrite), syntax errors give the line and column, files are
read with size and nesting bounds (``flowmaker.inputs``); every failure is a ProblemError naming
the file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from flowmaker.inputs import InputError
from flowmaker.inputs import load_mapping as _load_mapping
from selector.errors import ProblemError


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file (``.json``) into a dict; ProblemError on any problem with it."""
    try:
        return _load_mapping(path)
    except InputError as exc:
        raise ProblemError(exc.path, exc.message) from None
