"""Launch one OpenAI-compatible server per planned instance and keep them healthy.

A :class:`ServerSpec` says which backend serves which model on which port, with its tensor /
pipeline parallel degree and the GPUs it may see (``CUDA_VISIBLE_DEVICES``; empty: CPU).
:func:`build_command` turns it into the backend's command line; :class:`ServerProcess` starts
it in its own process group with a log file, polls its health endpoint until it answers (or the
process exits, or ``startup_timeout_s`` passes), and stops it (SIGTERM, then SIGKILL).
:class:`Fleet` does this for a list of specs (all started at once, then waited for);
``harness.servers.deploy.specs_for_instances`` derives the specs from a plan's deployment
(one server per instance).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field


class ServerSpec(BaseModel):
    """One server process. ``model``: a local checkpoint directory (or a name the backend can
    resolve offline); ``gpus``: physical GPU ids it sees; ``extra_args`` go last on the command
    line; ``env`` is added to the launcher's environment."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.@#-]+$")
    backend: Literal["transformers", "vllm", "trtllm"] = "transformers"
    model: str
    host: str = "127.0.0.1"
    port: int = Field(ge=1024, le=65535)
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    gpus: tuple[int, ...] = ()
    dtype: str = "auto"
    prefix_caching: bool = True
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(300.0, gt=0)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _bin(name: str) -> str:
    """The console script next to this interpreter when there is one (a venv), else the bare name."""
    cand = Path(sys.executable).with_name(name)
    return str(cand) if cand.exists() else name


def build_command(spec: ServerSpec) -> list[str]:
    """The backend's command line for ``spec``."""
    b = spec.backend
    if b == "transformers":
        if spec.tp * spec.pp > 1:
            raise ValueError(f"{spec.name}: transformers serve has no tensor/pipeline parallel flags "
                             f"(tp={spec.tp}, pp={spec.pp}); use backend vllm or trtllm")
        cmd = [_bin("transformers"), "serve", spec.model, "--host", spec.host, "--port", str(spec.port),
               "--device", "cuda" if spec.gpus else "cpu", "--dtype", spec.dtype]
    elif b == "vllm":
        cmd = [_bin("vllm"), "serve", spec.model, "--host", spec.host, "--port", str(spec.port),
               "--tensor-parallel-size", str(spec.tp), "--pipeline-parallel-size", str(spec.pp),
               "--dtype", spec.dtype]
        if spec.prefix_caching:
            cmd.append("--enable-prefix-caching")
    elif b == "trtllm":
        cmd = [_bin("trtllm-serve"), spec.model, "--host", spec.host, "--port", str(spec.port),
               "--tp_size", str(spec.tp), "--pp_size", str(spec.pp)]
    else:  # pydantic keeps this unreachable
        raise KeyError(f"unknown backend {b!r}; known: {', '.join(BACKENDS)}")
    if spec.gpus and len(spec.gpus) != spec.tp * spec.pp:
        raise ValueError(f"{spec.name}: {len(spec.gpus)} GPUs given for tp*pp = {spec.tp * spec.pp}")
    return cmd + list(spec.extra_args)


BACKENDS = ("transformers", "vllm", "trtllm")


def server_env(spec: ServerSpec) -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.update(spec.env)
    return env


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy in time; the message ends with its log tail."""


class ServerProcess:
    def __init__(self, spec: ServerSpec, *, log_dir: str | Path) -> None:
        self.spec = spec
        self.log_path = Path(log_dir) / f"{spec.name}.log"
        self.proc: subprocess.Popen | None = None
        self.command = build_command(spec)

    def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=server_env(self.spec), start_new_session=True)
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self) -> bool:
        import httpx
        for path in ("/health", "/v1/models"):
            try:
                if httpx.get(self.spec.base_url + path, timeout=2.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                return False
        return False

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def wait_healthy(self, deadline: float) -> None:
        while True:
            if not self.alive():
                code = None if self.proc is None else self.proc.returncode
                raise ServerStartError(f"{self.spec.name}: exited with {code} before becoming healthy; log:\n"
                                       f"{self.log_tail()}")
            if self.healthy():
                return
            if time.monotonic() > deadline:
                raise ServerStartError(f"{self.spec.name}: not healthy after {self.spec.startup_timeout_s} s; "
                                       f"log:\n{self.log_tail()}")
            time.sleep(0.25)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the server's process group; SIGKILL it if it is still there after ``timeout_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout_s)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """Kill at once (tests use it to make an engine die mid-run)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class Fleet:
    """Servers for a list of specs: started together, waited for together, stopped together.
    Use as a context manager; a start failure stops the ones already up and re-raises."""

    def __init__(self, specs: Sequence[ServerSpec], *, log_dir: str | Path = "logs/servers") -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate server names: {sorted({n for n in names if names.count(n) > 1})}")
        ports = [s.port for s in specs]
        if len(set(ports)) != len(ports):
            raise ValueError("two servers on one port")
        self.servers = {s.name: ServerProcess(s, log_dir=log_dir) for s in specs}

    def start(self) -> "Fleet":
        try:
            for s in self.servers.values():
                s.start()
            deadline = {n: time.monotonic() + s.spec.startup_timeout_s for n, s in self.servers.items()}
            for n, s in self.servers.items():
                s.wait_healthy(deadline[n])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()

    def __enter__(self) -> "Fleet":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dead(self) -> list[str]:
        """Names of servers whose process has exited."""
        return [n for n, s in self.servers.items() if not s.alive()]

    def client(self, name: str, **kwargs):
        from harness.servers.client import OpenAIClient
        spec = self.servers[name].spec
        return OpenAIClient(base_url=spec.base_url, model=spec.model, name=name, **kwargs)
