"""Launch one OpenAI-compatible server per planned instance and keep them healthy.

A :class:`ServerSpec` says which backend serves which model on which port, with its tensor /
pipeline parallel degree, the GPUs it may see (``CUDA_VISIBLE_DEVICES``; empty: CPU), its one
engine configuration (:class:`profiler.engine.EngineConfig`, the simulator's) and its share of
GPU memory. :func:`build_command` renders it as the backend's command line (flags per backend
below); :func:`config_files` gives the files the command refers to (TensorRT-LLM's
``--config`` YAML). :class:`ServerProcess` starts it in its own process group with a log file,
polls its health endpoint until it answers (or the process exits, or ``startup_timeout_s``
passes), and stops it (SIGTERM, then SIGKILL). :class:`Fleet` does this for a list of specs:
servers on disjoint GPUs start together; a server sharing a GPU with an earlier one starts only
once that one is healthy, so each engine sizes its memory with the others already resident
(vLLM measures free memory at start-up and refuses a share larger than what is free).
``harness.servers.deploy.specs_for_instances`` derives the specs from a plan's deployment.

How :class:`EngineConfig` maps to each backend (``-`` = no flag; the backend's own behaviour):

| EngineConfig | vLLM (``vllm serve``) | TensorRT-LLM (``trtllm-serve``, pytorch backend) | ``transformers serve`` |
|---|---|---|---|
| max_num_seqs | ``--max-num-seqs`` | ``--max_batch_size`` | 1: no continuous batching (one request at a time); > 1: ``--continuous-batching`` (no cap flag) |
| max_num_batched_tokens | ``--max-num-batched-tokens`` | ``--max_num_tokens`` | ``--cb-max-batch-tokens`` (continuous batching) |
| block_size | ``--block-size`` | ``kv_cache_config.tokens_per_block`` | ``--cb-block-size`` (continuous batching) |
| gpu_memory_utilization | ``--gpu-memory-utilization`` | ``kv_free_fraction`` (converted: see deploy.py) | - |
| kv_capacity_tokens | ``--num-gpu-blocks-override`` | ``kv_cache_config.max_tokens`` | ``--cb-num-blocks`` (continuous batching) |
| prefix_caching | ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` | ``kv_cache_config.enable_block_reuse`` | - (refused when asked for) |
| scheduler vllm-v1, sarathi / vllm | ``--enable-chunked-prefill`` / ``--no-enable-chunked-prefill`` | ``--enable_chunked_prefill`` / - | - |
| long_prefill_token_threshold (> 0) | ``--long-prefill-token-threshold`` | - | - |
| async_scheduling (True) | ``--async-scheduling`` (False: no flag, so vLLM >= 0.14 keeps its async default; ``--args ID=--no-async-scheduling`` turns it off there) | - | - |
| (context length: ``ServerSpec.max_model_len``, ``harness.servers.export_rules``) | ``--max-model-len`` | ``--max_seq_len`` | - |

A fourth backend, ``torch`` (``harness/servers/torchserve.py``: the profiler's decoder behind a
stdlib HTTP server, PyTorch only), takes ``model`` = an architecture JSON and serves one
sequence at a time (``max_num_seqs = 1``); it exists for machines where nothing else runs.

Flag sets: vLLM's ``EngineArgs`` (``vllm/engine/arg_utils.py``); TensorRT-LLM's ``trtllm-serve``
(``tensorrt_llm/commands/serve.py`` at NVIDIA/TensorRT-LLM 00209af: ``--max_batch_size``,
``--max_num_tokens``, ``--tp_size``, ``--pp_size``, ``--kv_cache_free_gpu_memory_fraction``,
``--enable_chunked_prefill``, ``--config`` YAML merged into the LLM arguments, which replaces
the whole ``kv_cache_config``, so the fraction is repeated there); ``transformers serve --help``
(transformers 5.x). The ``padded`` scheduler (Ayo's vLLM fork) has no upstream flag: refused.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from profiler.engine import EngineConfig


#: ``transformers serve`` without continuous batching runs one ``generate`` at a time
TRANSFORMERS_DEFAULT = EngineConfig(max_num_seqs=1)


class ServerSpec(BaseModel):
    """One server process. ``model``: a local checkpoint directory or a name the backend can
    resolve (an ``hf_id``); ``gpus``: physical GPU ids it sees; ``engine``: its engine settings
    (vLLM's ``--gpu-memory-utilization`` is ``engine.gpu_memory_utilization``, the share of each
    GPU's total memory; None: :attr:`engine_config`, the backend's default); ``kv_free_fraction`` / ``kv_max_tokens``: TensorRT-LLM's
    ``free_gpu_memory_fraction`` (of the memory free after weights and buffers) and
    ``KvCacheConfig.max_tokens``; ``max_model_len``: the context length (``export_rules``; None: the
    model's); ``served_model_name``: the name clients send (default: the
    model); ``api_key_env``: the server requires the key held in that environment variable
    (passed to vLLM as ``VLLM_API_KEY``, never on the command line); ``extra_args`` go last on this server's command line; ``env`` is added
    to the launcher's environment."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.@#-]+$")
    backend: Literal["transformers", "vllm", "trtllm", "torch"] = "transformers"
    model: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(ge=1024, le=65535)
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    gpus: tuple[int, ...] = ()
    dtype: str = "auto"
    engine: EngineConfig | None = None
    kv_free_fraction: float | None = Field(None, gt=0, le=1)
    kv_max_tokens: int | None = Field(None, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cpus: tuple[int, ...] = Field((), description="CPU cores the server process (and every thread it starts) "
                                  "may run on (os.sched_setaffinity; ignored where the OS lacks it); () = any")
    startup_timeout_s: float = Field(300.0, gt=0)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def engine_config(self) -> EngineConfig:
        """``engine``, or the backend's default: :class:`EngineConfig`'s for vLLM and TensorRT-LLM
        (prefix caching off), one sequence at a time for ``transformers serve`` (what it does
        without ``--continuous-batching``)."""
        if self.engine is not None:
            return self.engine
        return TRANSFORMERS_DEFAULT if self.backend in ("transformers", "torch") else EngineConfig()

    @property
    def request_model(self) -> str:
        """The model name clients put in requests."""
        return self.served_model_name or self.model


def _bin(name: str) -> str:
    """The console script next to this interpreter when there is one (a venv), else the bare name."""
    cand = Path(sys.executable).with_name(name)
    return str(cand) if cand.exists() else name


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".")


def trtllm_config_name(spec: ServerSpec) -> str:
    return f"{spec.name}.trtllm.yaml"


def config_files(spec: ServerSpec) -> dict[str, str]:
    """Files ``build_command(spec)`` refers to, by name (relative to its ``config_dir``)."""
    if spec.backend != "trtllm":
        return {}
    e = spec.engine_config
    kv = {"enable_block_reuse": e.prefix_caching, "tokens_per_block": e.block_size}
    if spec.kv_free_fraction is not None:
        kv["free_gpu_memory_fraction"] = spec.kv_free_fraction
    tokens = spec.kv_max_tokens or e.kv_capacity_tokens
    if tokens is not None:
        kv["max_tokens"] = tokens
    lines = ["# written by harness.servers.launcher: merged into trtllm-serve's LLM arguments",
             "kv_cache_config:"] + [f"  {k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in kv.items()]
    if spec.dtype != "auto":
        lines.append(f"dtype: {json.dumps(spec.dtype)}")  # a YAML string, whatever --dtype holds
    return {trtllm_config_name(spec): "\n".join(lines) + "\n"}


def build_command(spec: ServerSpec, *, config_dir: str | Path = ".") -> list[str]:
    """The backend's command line for ``spec`` (module docstring: how ``spec.engine`` maps to
    flags). ``config_dir``: where :func:`config_files` are written. ValueError for a setting the
    backend cannot take."""
    b, e = spec.backend, spec.engine_config
    if spec.gpus and len(spec.gpus) != spec.tp * spec.pp:
        raise ValueError(f"{spec.name}: {len(spec.gpus)} GPUs given for tp*pp = {spec.tp * spec.pp}")
    if e.scheduler == "padded":
        raise ValueError(f"{spec.name}: scheduler 'padded' is Ayo's vLLM fork; no server flag reproduces it "
                         f"(use vllm or sarathi)")
    if b == "transformers":
        cmd = _transformers(spec)
    elif b == "vllm":
        cmd = [_bin("vllm"), "serve", spec.model, "--host", spec.host, "--port", str(spec.port),
               "--tensor-parallel-size", str(spec.tp), "--pipeline-parallel-size", str(spec.pp),
               "--dtype", spec.dtype, "--max-num-seqs", str(e.max_num_seqs),
               "--max-num-batched-tokens", str(e.token_budget), "--block-size", str(e.block_size),
               "--gpu-memory-utilization", _num(e.gpu_memory_utilization),
               "--enable-prefix-caching" if e.prefix_caching else "--no-enable-prefix-caching",
               "--enable-chunked-prefill" if e.scheduler in CHUNKED else "--no-enable-chunked-prefill"]
        if e.long_prefill_token_threshold:
            cmd += ["--long-prefill-token-threshold", str(e.long_prefill_token_threshold)]
        if e.async_scheduling:
            cmd += ["--async-scheduling"]
        if e.kv_capacity_tokens is not None:
            cmd += ["--num-gpu-blocks-override", str(math.ceil(e.kv_capacity_tokens / e.block_size))]
        if spec.max_model_len is not None:
            cmd += ["--max-model-len", str(spec.max_model_len)]
        if spec.served_model_name:
            cmd += ["--served-model-name", spec.served_model_name]
    elif b == "torch":
        if spec.tp * spec.pp > 1 or e.max_num_seqs != 1 or e.prefix_caching:
            raise ValueError(f"{spec.name}: the torch server runs one sequence at a time on one device "
                             f"(max_num_seqs 1, no prefix caching, tp = pp = 1)")
        dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "fp32"}.get(spec.dtype, spec.dtype)
        cmd = [sys.executable, str(Path(__file__).with_name("torchserve.py")), "--arch", spec.model,
               "--host", spec.host, "--port", str(spec.port), "--device", "cuda" if spec.gpus else "cpu",
               "--dtype", dtype, "--name", spec.request_model]
    elif b == "trtllm":
        cmd = [_bin("trtllm-serve"), spec.model, "--host", spec.host, "--port", str(spec.port),
               "--backend", "pytorch", "--tp_size", str(spec.tp), "--pp_size", str(spec.pp),
               "--max_batch_size", str(e.max_num_seqs), "--max_num_tokens", str(e.token_budget)]
        if spec.kv_free_fraction is not None:
            cmd += ["--kv_cache_free_gpu_memory_fraction", _num(spec.kv_free_fraction)]
        if spec.max_model_len is not None:
            cmd += ["--max_seq_len", str(spec.max_model_len)]
        if e.scheduler in CHUNKED:
            cmd.append("--enable_chunked_prefill")
        cmd += ["--config", str(Path(config_dir) / trtllm_config_name(spec))]
        if spec.api_key_env:
            raise ValueError(f"{spec.name}: trtllm-serve has no API-key flag; put it behind a proxy")
    else:  # pydantic keeps this unreachable
        raise KeyError(f"unknown backend {b!r}; known: {', '.join(BACKENDS)}")
    return cmd + list(spec.extra_args)


def _transformers(spec: ServerSpec) -> list[str]:
    e = spec.engine_config
    if spec.tp * spec.pp > 1:
        raise ValueError(f"{spec.name}: transformers serve has no tensor/pipeline parallel flags "
                         f"(tp={spec.tp}, pp={spec.pp}); use backend vllm or trtllm")
    if e.prefix_caching:
        raise ValueError(f"{spec.name}: transformers serve has no prefix-caching switch; use prefix_caching: false")
    if spec.api_key_env or spec.served_model_name:
        raise ValueError(f"{spec.name}: transformers serve takes neither an API key nor a served model name")
    cmd = [_bin("transformers"), "serve", spec.model, "--host", spec.host, "--port", str(spec.port),
           "--device", "cuda" if spec.gpus else "cpu", "--dtype", spec.dtype]
    if e.max_num_seqs > 1:      # one generate() at a time otherwise: max_num_seqs = 1 models that
        cmd += ["--continuous-batching", "--cb-block-size", str(e.block_size),
                "--cb-max-batch-tokens", str(e.token_budget)]
        if e.kv_capacity_tokens is not None:
            cmd += ["--cb-num-blocks", str(math.ceil(e.kv_capacity_tokens / e.block_size))]
    return cmd


#: admission policies whose servers run chunked prefill
CHUNKED = ("vllm-v1", "sarathi")
BACKENDS = ("transformers", "vllm", "trtllm", "torch")


def server_env(spec: ServerSpec) -> dict[str, str]:
    """The server's environment: the launcher's, its GPUs, offline hub, ``spec.env`` and, with
    ``api_key_env``, vLLM's ``VLLM_API_KEY`` (a missing variable is a ValueError)."""
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.update(spec.env)
    if spec.api_key_env:
        if not env.get(spec.api_key_env):
            raise ValueError(f"{spec.name}: environment variable {spec.api_key_env} (the API key) is not set")
        env["VLLM_API_KEY"] = env[spec.api_key_env]
    return env


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy in time; the message ends with its log tail."""


def _pinning(cpus: tuple[int, ...]) -> Callable[[], None] | None:
    """A pre-exec hook that pins the child to ``cpus`` (None when there is nothing to pin or the OS
    has no ``sched_setaffinity``): set before exec, so every thread the server starts inherits it."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, set(cpus))


class ServerProcess:
    """One server: its command (and config files) written next to its log ``<log_dir>/<name>.log``."""

    def __init__(self, spec: ServerSpec, *, log_dir: str | Path) -> None:
        self.spec = spec
        self.log_path = Path(log_dir) / f"{spec.name}.log"
        self.proc: subprocess.Popen | None = None
        self.command = build_command(spec, config_dir=Path(log_dir).resolve())

    def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for name, text in config_files(self.spec).items():
            (self.log_path.parent / name).write_text(text, encoding="utf-8")
        env = server_env(self.spec)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True, preexec_fn=_pinning(self.spec.cpus))
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
    """Servers for a list of specs, stopped together. Servers on disjoint GPUs start together; a
    server sharing a GPU with an earlier one waits until that one is healthy (module docstring).
    Use as a context manager; a start failure stops the ones already up and re-raises."""

    def __init__(self, specs: Sequence[ServerSpec], *, log_dir: str | Path = "logs/servers") -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate server names: {sorted({n for n in names if names.count(n) > 1})}")
        ports = [s.port for s in specs]
        if len(set(ports)) != len(ports):
            raise ValueError("two servers on one port")
        self.servers = {s.name: ServerProcess(s, log_dir=log_dir) for s in specs}
        self.log_dir = log_dir

    def start(self) -> "Fleet":
        deadline: dict[str, float] = {}
        pending: list[ServerProcess] = []          # started, not yet known healthy
        try:
            for s in self.servers.values():
                mine = set(s.spec.gpus)
                for other in [o for o in pending if mine & set(o.spec.gpus)]:
                    other.wait_healthy(deadline[other.spec.name])
                    pending.remove(other)
                deadline[s.spec.name] = time.monotonic() + s.spec.startup_timeout_s
                pending.append(s.start())
            for s in pending:
                s.wait_healthy(deadline[s.spec.name])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()

    def launch(self, spec: ServerSpec) -> ServerProcess:
        """Start one more server now without waiting for it (poll its ``healthy()`` or call
        ``wait_healthy``): a server added while the fleet serves (``harness.adaptive``). The fleet
        stops it with the others."""
        if spec.name in self.servers:
            raise ValueError(f"duplicate server name: {spec.name}")
        if any(s.spec.port == spec.port for s in self.servers.values()):
            raise ValueError("two servers on one port")
        proc = self.servers[spec.name] = ServerProcess(spec, log_dir=self.log_dir)
        return proc.start()

    def retire(self, name: str, *, timeout_s: float = 10.0) -> None:
        """Stop server ``name`` (SIGTERM, SIGKILL after ``timeout_s``) and drop it from the fleet;
        its log stays. The caller drains it first (no call in flight)."""
        self.servers.pop(name).stop(timeout_s)

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
        kwargs.setdefault("backend", spec.backend)
        if spec.api_key_env:
            kwargs.setdefault("api_key", os.environ.get(spec.api_key_env))
        return OpenAIClient(base_url=spec.base_url, model=spec.request_model, name=name, **kwargs)
