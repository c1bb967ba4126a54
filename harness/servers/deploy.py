"""Put a set of deployments on real servers: one server per planned instance, or endpoints the
user already runs.

``specs_for_instances`` turns a deployment's :class:`~selector.deployment.InstanceSpec` list into
one :class:`ServerSpec` each (its TP/PP degree, ``CUDA_VISIBLE_DEVICES`` from its GPU ids, the
local checkpoint ``model_paths[model]``). ``stand_in`` replaces every catalog model by one local
checkpoint on CPU (TP/PP and GPUs dropped): latencies are then the stand-in's, not the catalog
models'. ``endpoints_from_fleet`` / ``endpoints_from_urls`` give the ``{instance id: Endpoint}``
mapping that :func:`harness.live.replay_live` sends requests to.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.servers.client import OpenAIClient, served_model
from harness.servers.launcher import Fleet, ServerSpec
from selector.deployment import InstanceSpec


@dataclass
class Endpoint:
    """Where one instance's calls go. ``backend`` says how to ask for exact output lengths
    (``harness.servers.client.exact_output_body``; None: ask nothing, record what comes back);
    ``alive`` is the server process's liveness when we launched it (None: unknown)."""
    client: OpenAIClient
    backend: str | None = None
    alive: Callable[[], bool] | None = None

    def dead(self) -> bool:
        return self.client.dead or (self.alive is not None and not self.alive())


def server_name(instance_id: str) -> str:
    """A server (and log file) name for an instance id such as ``rag-qa/answer/0``."""
    return re.sub(r"[^A-Za-z0-9_.@#-]", ".", instance_id)


def specs_for_instances(instances: Sequence[InstanceSpec], *, model_paths: Mapping[str, str] | None = None,
                        stand_in: str | None = None, backend: str = "vllm", base_port: int = 8100,
                        **common) -> dict[str, ServerSpec]:
    """One :class:`ServerSpec` per instance, keyed by instance id, on ports from ``base_port``.
    ``common`` goes to every spec (``dtype``, ``startup_timeout_s``, ``extra_args``, ...). A model
    without a checkpoint is a ``KeyError`` naming the model, the instance and the given models."""
    specs: dict[str, ServerSpec] = {}
    names: set[str] = set()
    for k, inst in enumerate(instances):
        name = server_name(inst.id)
        if name in names:
            name = f"{name}-{k}"
        names.add(name)
        if stand_in is not None:
            model, tp, pp, gpus = stand_in, 1, 1, ()
        else:
            if inst.model not in (model_paths or {}):
                raise KeyError(f"no local checkpoint for model {inst.model!r} (instance {inst.id}); "
                               f"given: {', '.join(sorted(model_paths or {})) or 'none'}")
            model, tp, pp, gpus = model_paths[inst.model], inst.tp, inst.pp, tuple(inst.gpus)
        specs[inst.id] = ServerSpec(name=name, backend=backend, model=model, port=base_port + k, tp=tp, pp=pp,
                                    gpus=gpus, **common)
    return specs


def endpoints_from_fleet(fleet: Fleet, specs: Mapping[str, ServerSpec], *, timeout_s: float,
                         retries: int = 1, exact_output: bool = True) -> dict[str, Endpoint]:
    """Endpoints on the servers ``fleet`` started from ``specs`` (as returned above)."""
    out = {}
    for iid, spec in specs.items():
        proc = fleet.servers[spec.name]
        out[iid] = Endpoint(fleet.client(spec.name, timeout_s=timeout_s, retries=retries),
                            spec.backend if exact_output else None, proc.alive)
    return out


def endpoints_from_urls(urls: Mapping[str, str], *, timeout_s: float, retries: int = 1,
                        backend: str | None = None, models: Mapping[str, str] | None = None) -> dict[str, Endpoint]:
    """Endpoints on servers the user runs: ``{instance id: base URL}``. The model name sent in
    requests is ``models[id]`` when given, else the first one the server's ``/v1/models`` lists."""
    out = {}
    for iid, url in urls.items():
        model = (models or {}).get(iid) or served_model(url)
        out[iid] = Endpoint(OpenAIClient(base_url=url, model=model, name=iid, timeout_s=timeout_s, retries=retries),
                            backend)
    return out
