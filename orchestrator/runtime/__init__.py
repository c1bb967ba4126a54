"""Runtime: graph scheduler + engine schedulers over a discrete-event simulation."""
from orchestrator.runtime.api import Prepared, make_payload, pass_context, prepare, simulate
from orchestrator.runtime.sim import RequestResult

__all__ = ["simulate", "prepare", "Prepared", "make_payload", "pass_context", "RequestResult"]
