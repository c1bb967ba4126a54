"""Where the tests find the project's shared folder (``profiler.catalog.shared_root``:
``<repository>/../shared``). The spec examples are part of the tests' input: a checkout without
them fails the tests that need them, it does not skip them."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.catalog import shared_root

EXAMPLES = shared_root() / "spec" / "examples"


def spec_example(name: str, suffix: str = ".yaml") -> Path:
    """``EXAMPLES/<name><suffix>``; fails the calling test when it is missing."""
    path = EXAMPLES / f"{name}{suffix}"
    if not path.is_file():
        pytest.fail(f"spec example {path} not found: the tests need ../shared/spec/examples next to the "
                    "repository (clone the shared folder beside it)", pytrace=False)
    return path
