"""Ray as the distributed runtime: each engine's scheduler and instances run in a Ray actor
(experiment cells, ``teola_real_cpu``'s blocks included, run as Ray tasks through
``experiments.executor``, which starts Ray here). The in-process runtime (:mod:`orchestrator.runtime.realtime`)
stays the default; this module reuses it whole and only moves each :class:`EngineHost` into an
actor: the graph scheduler stays in the driver, ``enqueue`` / ``dispatch`` become actor calls,
and completions come back through a long-poll (one thread per actor feeds the driver's event
queue). Engines are built inside their actor from a picklable builder, so model weights never
cross the wire; primitives' inputs and outputs do.

    report = run_ray(template, configs, arrivals, builders={"llm": make_llm, ...}, scheme="teola")

``address``: a running cluster (``ray://...`` or ``host:port``); default: ``RAY_ADDRESS`` or a
local instance started on first use. ``ray`` is imported only here, when called.

Code reaches the workers through Ray's ``runtime_env``: ``working_dir`` is this checkout (code and
``configs/``, less the virtual environment, git data, results and logs; a few MB, uploaded once
per content hash), so workers on other machines need no shared disk, only the same Python
packages (:func:`runtime_env`). Engines on GPUs get ``num_gpus`` per engine (``run_ray(...,
num_gpus={engine name: n})``; Ray then sets ``CUDA_VISIBLE_DEVICES`` in their actor). Worker
output reaches the driver's terminal (``log_to_driver``), and an actor that fails, when its
engines are built or later, fails with the worker's exception and traceback in the message.

A local instance is private to this machine and this user (issue 14): Ray's GCS, raylet,
workers and runtime-env agent listen on 127.0.0.1 only (Ray binds its gRPC servers to
loopback only when the node address is 127.0.0.1, which it uses for a single-node cluster:
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), and token authentication is on, with a random
per-process token in ``RAY_AUTH_TOKEN`` unless one is configured (``RAY_AUTH_TOKEN`` or
``RAY_AUTH_TOKEN_PATH``), so another local user cannot submit work either. An explicit
``RAY_AUTH_MODE`` is respected. A cluster reachable from other machines is never started
here: start it deliberately with ``ray start`` and pass its address (docs/real_execution.md).
"""
from __future__ import annotations

import functools
import os
import queue
import secrets
import sys
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from orchestrator.runtime.realtime import EngineHost, RealtimeReport, drain, run_realtime
from profiler.catalog import repo_root



LOOPBACK = "127.0.0.1"


def _private_local_defaults() -> None:
    """Environment for a local, single-node Ray: loopback only, token auth with a private token.
    Set before ``import ray`` where possible: Ray reads both at import time."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"     # single node: Ray uses 127.0.0.1
    if "ray._private.ray_constants" in sys.modules:            # imported earlier: the flag was read
        sys.modules["ray._private.ray_constants"].ENABLE_RAY_CLUSTER = False
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return                                                 # an explicit choice (e.g. CI's "disabled")
    os.environ["RAY_AUTH_MODE"] = "token"
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)   # never written to disk
    if "ray._raylet" in sys.modules:                           # re-read the mode, as Ray itself does
        raylet = sys.modules["ray._raylet"]
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()


#: never shipped to workers: environments, git data, outputs
WORKING_DIR_EXCLUDES = [".venv", "venv", ".git", "results", "logs", "notebooks", "**/__pycache__", "*.egg-info",
                        ".pytest_cache", ".hypothesis"]


def runtime_env() -> dict[str, Any]:
    """What every Ray worker gets: this checkout as ``working_dir`` (it goes first on the
    worker's ``sys.path``, and ``configs/`` travels with it) and quiet, offline Hugging Face
    settings. No ``PYTHONPATH``: nothing depends on the driver's disk."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    return {"working_dir": str(repo_root()), "excludes": list(WORKING_DIR_EXCLUDES), "env_vars": env}


def init_ray(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None,
             log_to_driver: bool = True, logging_level: int = 20) -> Any:
    """Connect to ``address`` (or ``RAY_ADDRESS``), else start a local Ray listening on loopback
    only, with token authentication (module docstring); idempotent. Code ships as
    :func:`runtime_env`; worker output is printed here unless ``log_to_driver`` is False;
    ``logging_level``: Ray's own log records shown here (default 20, INFO)."""
    address = address or os.environ.get("RAY_ADDRESS")
    running = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    if address is None and not running:
        _private_local_defaults()
    elif address is not None and address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost") and not running:
        # a cluster on this machine's loopback (`ray start --node-ip-address 127.0.0.1`): without this Ray
        # rewrites 127.0.0.1 to the machine's address and never reaches it
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    if ray.is_initialized():
        return ray
    # "local": a new instance of our own, never a `ray start` cluster that ray.init(None) would join
    ray.init(address=address or "local", num_cpus=num_cpus, num_gpus=num_gpus if address is None else None,
             include_dashboard=False, log_to_driver=log_to_driver, ignore_reinit_error=True,
             logging_level=logging_level,
             runtime_env=runtime_env())
    if address is None and ray.util.get_node_ip_address() != LOOPBACK:
        ip = ray.util.get_node_ip_address()
        ray.shutdown()
        raise RuntimeError(f"local Ray started on {ip}, not {LOOPBACK}: refusing to run a cluster reachable "
                           f"from the network (start one deliberately with `ray start`, docs/real_execution.md)")
    return ray


class _HostActor:
    """Actor body: one :class:`EngineHost` whose events go to a local queue the driver polls."""

    def __init__(self, name: str, builder: Callable[[], list], policy: Any, torch_threads: int | None,
                 time_scale: float) -> None:
        if torch_threads:
            import torch
            torch.set_num_threads(torch_threads)
        self._q: queue.Queue = queue.Queue()
        instances = builder()
        for e in instances:          # load weights / connect before the clock starts
            getattr(e, "warm", lambda: None)()
        t0 = time.perf_counter()
        self.host = EngineHost(name=name, instances=instances, policy=policy, max_batch=None, sink=self._q.put,
                               clock=lambda: time.perf_counter() - t0, time_scale=time_scale)

    def max_batch(self) -> int:
        return self.host.max_batch()

    def enqueue_many(self, pendings: list) -> None:
        for p in pendings:
            self.host.enqueue(p)
        self.host.dispatch()

    def drop(self, qids: list[int]) -> None:
        self.host.drop(set(qids))

    def promote(self, key: str) -> None:
        self.host.promote(key, 0.0)

    def poll(self, timeout_s: float) -> list[tuple]:
        return drain(self._q, timeout_s)

    def batches(self) -> list[int]:
        return list(self.host.sched.batches)


class RayHost:
    """Driver-side stand-in for an :class:`EngineHost` living in an actor."""

    def __init__(self, *, name: str, instances: Callable[[], list], policy: Any, max_batch: int | None,
                 sink: Callable[[tuple], None], clock: Callable[[], float], time_scale: float = 1.0,
                 torch_threads: int | None = None, num_gpus: float = 0) -> None:
        import ray
        self._ray = ray
        self.name = name
        cls = ray.remote(**actor_options(num_gpus))(_HostActor)
        self.actor = cls.remote(name, instances, policy, torch_threads, time_scale)
        try:
            self._mb = ray.get(self.actor.max_batch.remote())
        except Exception as exc:  # noqa: BLE001 - the engines could not be built in the worker
            raise RuntimeError(f"engine {name}: its Ray actor failed to start: {worker_error(exc)}") from None
        self._buf: list = []
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, args=(sink,), daemon=True, name=f"ray-poll-{name}")
        self._poller.start()

    def max_batch(self) -> int:
        return self._mb

    def enqueue(self, p: Any) -> None:
        self._buf.append(p)

    def dispatch(self) -> None:
        if self._buf:
            self.actor.enqueue_many.remote(self._buf)
            self._buf = []

    def drop(self, qids: set[int]) -> None:
        self._buf = [p for p in self._buf if p.qid not in qids]
        self.actor.drop.remote(sorted(qids))

    def promote(self, key: str, now_s: float) -> list:
        """As :meth:`EngineHost.promote`, in the actor (buffered work is sent first: one caller's
        actor calls run in order)."""
        self.dispatch()
        self.actor.promote.remote(key)
        return []

    def _poll(self, sink: Callable[[tuple], None]) -> None:
        while not self._stop.is_set():
            try:
                for ev in self._ray.get(self.actor.poll.remote(0.2)):
                    sink(ev)
            except Exception as exc:  # noqa: BLE001 - the actor died: its engine is dead
                sink(("dead", f"engine {self.name}: its Ray actor died: {worker_error(exc)}"))
                return

    def close(self) -> list[int]:
        self._stop.set()
        self._poller.join(timeout=5)
        try:
            return self._ray.get(self.actor.batches.remote(), timeout=5)
        finally:
            self._ray.kill(self.actor)


def actor_options(num_gpus: float = 0) -> dict[str, Any]:
    """Ray options of an engine host's actor: no CPU reserved (its threads mostly wait), the
    engine's GPUs when it has any."""
    return {"num_cpus": 0, "num_gpus": num_gpus, "max_concurrency": 4}


def worker_error(exc: BaseException, limit: int = 2000) -> str:
    """A worker-side failure as one readable string: the exception and the worker's traceback
    (Ray's ``RayTaskError`` / ``RayActorError`` carry it), at most ``limit`` characters."""
    cause = getattr(exc, "cause", None)
    text = str(exc) if cause is None else f"{type(cause).__name__}: {cause}\n{exc}"
    text = text.strip() or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def _build_real(name: str, kwargs: Mapping[str, Any]) -> list:
    from orchestrator.engines.real.factory import build_real_engines
    app = kwargs["app"]
    one = app.model_copy(update={"engines": {name: app.engines[name]}})
    return build_real_engines(one, **{k: v for k, v in kwargs.items() if k != "app"})[name]


def run_ray(template: Any, query_configs: Sequence[Any], arrivals_s: Sequence[float], *,
            builders: Mapping[str, Callable[[], list]] | None = None, engine_kwargs: Mapping[str, Any] | None = None,
            address: str | None = None, torch_threads: int | None = None,
            num_gpus: Mapping[str, float] | None = None, **kwargs: Any) -> RealtimeReport:
    """:func:`~orchestrator.runtime.realtime.run_realtime` with each engine in a Ray actor.
    Engines come from ``builders`` (engine name -> picklable zero-argument callable returning its
    instances) or, for real engines, ``engine_kwargs`` of
    :func:`orchestrator.engines.real.factory.build_real_engines` (with ``app``). ``num_gpus``:
    GPUs per engine name (its actor's Ray resource request; Ray assigns the devices)."""
    ray = init_ray(address)
    if builders is None:
        if engine_kwargs is None:
            raise ValueError("give builders or engine_kwargs")
        builders = {n: functools.partial(_build_real, n, dict(engine_kwargs)) for n in engine_kwargs["app"].engines}
    hosts: list[RayHost] = []

    def factory(**kw: Any) -> RayHost:
        h = RayHost(torch_threads=torch_threads, num_gpus=(num_gpus or {}).get(kw["name"], 0), **kw)
        hosts.append(h)
        return h
    try:
        rep = run_realtime(template, query_configs, arrivals_s, builders, host_factory=factory, **kwargs)
    finally:
        batches = {}
        for h in hosts:
            try:
                batches[h] = h.close()
            except Exception:  # noqa: BLE001 - already gone
                pass
    _ = ray
    return rep
