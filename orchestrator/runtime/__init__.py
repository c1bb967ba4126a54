"""Runtime: graph scheduler + engine schedulers over a discrete-event simulation."""
from orchestrator.runtime.api import make_payload, pass_context, simulate
from orchestrator.runtime.sim import RequestResult

__all__ = ["simulate", "make_payload", "pass_context", "RequestResult"]
