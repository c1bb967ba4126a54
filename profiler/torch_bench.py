"""`torch` backend: measure TTFT, per-token decode time and memory of a random-weight decoder.

One point = (arch, batch, prompt_tokens, output_tokens), static batch, matching
`AnalyticModel.predict`:
- ttft_s: one prefill of `batch` prompts of `prompt_tokens` (KV written, LM head on the last
  position, greedy token), median over `repeats` after `warmup` runs;
- tpot_s: median decode step over `repeats` x `decode_steps` steps at contexts centred on
  prompt + output/2 (the mean context of the decode);
- memory: weights_gb (parameter bytes) and kv_gb (cache of batch*(prompt+output) tokens) are
  exact; mem_gb on CUDA = torch.cuda.max_memory_allocated + runtime overhead (device memory
  NVML sees in use beyond PyTorch's reserved pool: CUDA context, cuBLAS workspace), on CPU =
  peak RSS above the process baseline (Linux /proc/self/clear_refs); activation_gb = the rest.
Timing: CUDA events on GPU, time.perf_counter on CPU; on a shared CPU, cpu_timer="thread"
with one thread times the serving thread's CPU time (time.thread_time: equal to wall time on
an idle core, blind to other processes taking the core). Rows are plain dicts with the
profiler.table column names plus raw extras (spread, repeats); torch + stdlib only.
"""

from __future__ import annotations

import datetime as dt
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import torch

from flowmaker.procmem import reset_peak_rss, status_bytes
from profiler.torch_model import DTYPES, Arch, Decoder, KVCache

GB = 1e9
MMAP_LOW, MMAP_HIGH = 64 << 10, 32 << 20


@dataclass(frozen=True)
class BenchSettings:
    """Repeats and step counts of one measurement (times in the table are medians)."""

    warmup: int = 2
    repeats: int = 5
    decode_steps: int = 8
    min_time_s: float = 0.0  # keep repeating (up to 20x repeats) until this much time is sampled
    dtype: str = "bf16"
    threads: int | None = None  # CPU only: torch.set_num_threads; None keeps torch's default
    cpu_timer: str = "wall"  # CPU only: "wall" (perf_counter) or "thread" (CPU time, threads=1)


def _say(msg: str) -> None:
    sys.stderr.write(f"profiler: {msg}\n")


class _Nvml:
    """Device memory in use through NVML (`nvidia-ml-py`); `ok` False (said once) without it."""

    def __init__(self, index: int) -> None:
        self.ok, self.handle, self.driver = False, None, ""
        try:
            import pynvml  # noqa: PLC0415 - optional (nvidia-ml-py)
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.driver = pynvml.nvmlSystemGetDriverVersion()
            self.driver = self.driver.decode() if isinstance(self.driver, bytes) else str(self.driver)
            self._pynvml, self.ok = pynvml, True
        except Exception as exc:  # ImportError, NVMLError (no driver, no permission)
            _say(f"NVML unavailable ({type(exc).__name__}: {exc}); runtime overhead "
                 "beyond PyTorch's pool is not counted in mem_gb")

    def used_bytes(self) -> int:
        return int(self._pynvml.nvmlDeviceGetMemoryInfo(self.handle).used) if self.ok else 0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _mmap_threshold(nbytes: int) -> bool:
    """glibc M_MMAP_THRESHOLD: with a low threshold every large allocation is an mmap that a
    free returns to the OS, so peak RSS tracks live tensor memory (the malloc arena would
    otherwise hide reused memory); timing runs with a high one (glibc's dynamic maximum)."""
    try:
        import ctypes  # noqa: PLC0415
        libc = ctypes.CDLL("libc.so.6")
        ok = bool(libc.mallopt(-3, nbytes))
        libc.malloc_trim(0)
        return ok
    except (OSError, AttributeError):
        return False


class Device:
    """Where measurements run: timers, synchronisation, memory probes and provenance."""

    def __init__(self, name: str, settings: BenchSettings) -> None:
        self._flushed = False
        self.torch_device = torch.device(name)
        self.is_cuda = self.torch_device.type == "cuda"
        self.thread_timer = False
        self.dtype = DTYPES[settings.dtype]
        self.nvml: _Nvml | None = None
        self.runtime_overhead_bytes = 0
        if self.is_cuda:
            index = self.torch_device.index or 0
            self.nvml = _Nvml(index)
            before = self.nvml.used_bytes()
            torch.cuda.set_device(index)
            a = torch.ones(1024, 1024, device=self.torch_device, dtype=self.dtype)
            (a @ a).sum().item()  # create the context, cuBLAS handle and workspace
            if self.nvml.ok:
                self.runtime_overhead_bytes = max(
                    0, self.nvml.used_bytes() - before - torch.cuda.memory_reserved())
            del a
            self.device_name = torch.cuda.get_device_name(index)
            self.driver = self.nvml.driver
        else:
            if settings.cpu_timer not in ("wall", "thread"):
                raise ValueError(f"cpu_timer must be wall or thread, got {settings.cpu_timer!r}")
            if settings.cpu_timer == "thread" and settings.threads != 1:
                raise ValueError("cpu_timer 'thread' needs threads=1 (one thread does all the work)")
            self.thread_timer = settings.cpu_timer == "thread"
            if settings.threads:
                torch.set_num_threads(settings.threads)
            self._flushed = torch.set_flush_denormal(True)      # undone by close(): it is process-wide
            self.device_name = f"{_cpu_name()} ({torch.get_num_threads()} threads)"
            self.driver = f"{platform.system()} {platform.release()}"
            self.rss_peak_ok = (_mmap_threshold(MMAP_HIGH) and reset_peak_rss()
                                and status_bytes("VmHWM") is not None)
            if not self.rss_peak_ok:
                _say("peak RSS cannot be tracked here (needs Linux + glibc); CPU mem_gb counts "
                     "weights + KV only")
        extra = f"; cuda {torch.version.cuda}" if self.is_cuda else (
            "; timer thread_time" if self.thread_timer else "; timer perf_counter")
        self.library_versions = f"torch {torch.__version__}{extra}; python {platform.python_version()}"

    def close(self) -> None:
        """Undo the CPU's flush-denormal mode set for the measurements: it holds for the whole
        process, and later code (a problem's validation) would read a subnormal number as 0."""
        if self._flushed:
            torch.set_flush_denormal(False)
            self._flushed = False

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize()

    def time_s(self, fn: Callable[[], object]) -> float:
        if self.is_cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3
        clock = time.thread_time if self.thread_timer else time.perf_counter
        t = clock()
        fn()
        return clock() - t

    def peak_bytes(self, run: Callable[[], object], model_bytes: int) -> int | None:
        """Peak memory while `run()` executes, including the model (None: not measurable)."""
        if self.is_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            run()
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() + self.runtime_overhead_bytes
        if not self.rss_peak_ok:
            return None
        _mmap_threshold(MMAP_LOW)
        reset_peak_rss()
        baseline = status_bytes("VmRSS") or 0
        run()
        peak = (status_bytes("VmHWM") or 0) - baseline
        _mmap_threshold(MMAP_HIGH)
        return model_bytes + max(0, peak)


def _median_spread(xs: list[float]) -> tuple[float, float]:
    """Median and relative spread (interquartile range / median)."""
    med = statistics.median(xs)
    if len(xs) < 4:
        return med, (max(xs) - min(xs)) / med if med else 0.0
    q = statistics.quantiles(xs, n=4)
    return med, (q[2] - q[0]) / med if med else 0.0


def _repeat(s: BenchSettings, sample: Callable[[], list[float]]) -> list[float]:
    out: list[float] = []
    rounds = 0
    while rounds < s.repeats or (sum(out) < s.min_time_s and rounds < 20 * s.repeats):
        out += sample()
        rounds += 1
    return out


@torch.inference_mode()
def _measure(model: Decoder, dev: Device, s: BenchSettings, batch: int, prompt: int,
             output: int) -> dict:
    arch, td = model.arch, dev.torch_device
    gen = torch.Generator(device="cpu").manual_seed(batch * 100003 + prompt * 31 + output)
    tokens = torch.randint(0, arch.vocab, (batch, prompt), generator=gen).to(td)
    cache = KVCache(arch, batch, prompt + output, device=td, dtype=dev.dtype)
    for _ in range(s.warmup):
        model(tokens, 0, cache)
    ttfts = _repeat(s, lambda: [dev.time_s(lambda: model(tokens, 0, cache))])
    steps = max(1, min(s.decode_steps, output))
    first = max(prompt, prompt + output // 2 - steps // 2)
    positions = range(first, min(first + steps, prompt + output))
    nxt = tokens[:, -1:]
    for _ in range(s.warmup):
        model(nxt, first, cache)
    tpots = _repeat(s, lambda: [dev.time_s(lambda p=p: model(nxt, p, cache)) for p in positions])
    dev.sync()
    kv = cache.nbytes / GB
    del cache

    def serve_once() -> None:  # the memory window: cache of the whole request, prefill, a step
        c = KVCache(arch, batch, prompt + output, device=td, dtype=dev.dtype)
        model(tokens, 0, c)
        model(nxt, first, c)

    peak = dev.peak_bytes(serve_once, model.weight_bytes)
    ttft, ttft_spread = _median_spread(ttfts)
    tpot, tpot_spread = _median_spread(tpots)
    weights = model.weight_bytes / GB
    mem = peak / GB if peak is not None else weights + kv
    return {"ttft_s": ttft, "tpot_s": tpot, "latency_s": ttft + (output - 1) * tpot,
            "mem_gb": mem, "weights_gb": weights, "kv_gb": kv,
            "activation_gb": max(0.0, mem - weights - kv),
            "ttft_spread": ttft_spread, "tpot_spread": tpot_spread,
            "ttft_samples": len(ttfts), "tpot_samples": len(tpots)}


def build_model(arch: Arch, dev: Device, max_positions: int) -> Decoder:
    """The random-weight decoder on the device (seeded, so repeated runs build the same)."""
    torch.manual_seed(0)
    return Decoder(arch, device=dev.torch_device, dtype=dev.dtype, max_positions=max_positions).eval()


def measure_grid(arch: Arch, *, model_name: str, gpu_name: str, device: Device, settings: BenchSettings,
                 points: Iterable[tuple[int, int, int]], backend: str = "torch") -> Iterator[dict]:
    """Measure (batch, prompt_tokens, output_tokens) points of one architecture at tp=pp=1.

    Yields one row per point as soon as it is measured (callers persist it for resumption).
    The model is built once; `model_name`/`gpu_name` are the catalog names for the key.
    """
    points = list(points)
    if not points:
        return
    longest = max(p + o for _, p, o in points)
    model = build_model(arch, device, longest)
    try:
        for batch, prompt, output in points:
            row = _measure(model, device, settings, batch, prompt, output)
            row.update(model=model_name, gpu=gpu_name, tp=1, pp=1, batch=batch, prompt_tokens=prompt,
                       output_tokens=output, backend=backend, device_name=device.device_name,
                       driver=device.driver, library_versions=device.library_versions,
                       dtype=settings.dtype, layers=arch.layers,
                       measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            yield row
    finally:
        del model
        if device.is_cuda:
            torch.cuda.empty_cache()
