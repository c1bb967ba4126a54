"""The papers' reported figures that reports set beside ours, read from
``configs/reference/<paper>.yaml`` (each file names its source in ``../shared/reference``)."""
from __future__ import annotations

import functools
from typing import Any

import yaml

from profiler.catalog import configs_dir


@functools.cache
def reference(paper: str) -> dict[str, Any]:
    """``configs/reference/<paper>.yaml`` (``flowmaker``, ``teola``) as a mapping."""
    with open(configs_dir() / "reference" / f"{paper}.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)
