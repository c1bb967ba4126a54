"""Runtime: graph scheduler + engine schedulers over a discrete-event simulation. Names below are
resolved lazily (PEP 562): ``import orchestrator.runtime.events`` loads only the event loop."""
from __future__ import annotations

from flowmaker.lazy import lazy_exports

_EXPORTS = {"simulate": "api", "prepare": "api", "Prepared": "api", "make_payload": "api",
            "pass_context": "api", "RequestResult": "sim"}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
