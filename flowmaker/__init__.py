"""flowmaker: the distribution's own package. It holds what every command-line face shares
(:mod:`flowmaker.entry`: one-line errors, exit statuses, ``--version``, logging) and imports no
other part of the project, so ``profiler/``, the lowest part, may use it."""
from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("flowmaker")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
