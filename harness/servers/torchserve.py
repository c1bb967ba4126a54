"""A minimal OpenAI-compatible completions server on the profiler's own decoder, needing only
PyTorch and the standard library: the server the closed loop runs where nothing else is installed
(a GPU machine with PyTorch alone; ``experiments/scripts/device_check.py``).

    python harness/servers/torchserve.py --arch ARCH.json --port 8100 [--device cuda] [--dtype bf16]

(run as a script, not with ``-m``: the package ``harness.servers`` imports pydantic and httpx,
which such a machine may lack; the script puts the repository on ``sys.path`` itself).

The model is ``profiler.torch_model.Decoder`` with seeded random weights, the very module the
profiler's ``torch`` backend times, so a closed loop on it checks the simulator's queueing and
the serving overhead, not a second implementation's speed. Text is one token per printable ASCII
character (``CharTokenizer``: id = code - 32); every output token is one character, exactly
``max_tokens`` of them (no EOS). Requests run one at a time in arrival order (``EngineConfig(
max_num_seqs=1)``, like ``transformers serve`` without continuous batching): prefill, then one
decode step per token. Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions``
(``stream``, ``stream_options.include_usage``; streamed answers end with ``[DONE]``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

FIRST, SPAN = 32, 95          # printable ASCII


class CharTokenizer:
    """One token per printable ASCII character (the client side of this server's tokenizer)."""
    all_special_ids: list[int] = []

    def __len__(self) -> int:
        return SPAN

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) - FIRST for c in text if FIRST <= ord(c) < FIRST + SPAN]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(chr(FIRST + int(i) % SPAN) for i in ids)


class _Model:
    def __init__(self, arch_path: str, device: str, dtype: str, max_positions: int, seed: int) -> None:
        import torch
        from profiler.torch_model import DTYPES, Arch, Decoder
        self.torch, self.device = torch, device
        self.arch = Arch.from_mapping(json.loads(Path(arch_path).read_text()))
        self.dtype = DTYPES[dtype]
        torch.manual_seed(seed)
        self.model = Decoder(self.arch, device=device, dtype=self.dtype, max_positions=max_positions).eval()
        self.max_positions = max_positions

    def generate(self, ids: list[int], max_tokens: int, emit) -> None:
        """Prefill ``ids``, then decode; ``emit(token id)`` per output token (greedy)."""
        from profiler.torch_model import KVCache
        torch = self.torch
        n = min(len(ids), self.max_positions - max_tokens)
        with torch.inference_mode():
            cache = KVCache(self.arch, 1, n + max_tokens, device=self.device, dtype=self.dtype)
            tok = self.model(torch.tensor([ids[:n] or [0]], device=self.device), 0, cache)
            for k in range(max_tokens):
                emit(int(tok.item()))
                if k + 1 < max_tokens:
                    tok = self.model(tok[:, None], n + k, cache)


class Server:
    def __init__(self, model: _Model, name: str) -> None:
        self.model, self.name = model, name
        self.lock = asyncio.Lock()        # FIFO: one generation at a time, in arrival order

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split()[:2]
                hdr = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                body = await reader.readexactly(int(hdr.get("content-length", 0)))
                if path == "/health":
                    await self._json(writer, 200, {"status": "ok"})
                elif path == "/v1/models":
                    await self._json(writer, 200, {"object": "list", "data": [{"id": self.name, "object": "model"}]})
                elif path == "/v1/completions" and method == "POST":
                    await self._complete(writer, body)
                else:
                    await self._json(writer, 404, {"error": {"message": f"no route {method} {path}"}})
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _json(self, w: asyncio.StreamWriter, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        w.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
                .encode() + data)
        await w.drain()

    async def _complete(self, w: asyncio.StreamWriter, body: bytes) -> None:
        try:
            req = json.loads(body)
            prompt, n_out = req["prompt"], int(req.get("max_tokens") or 16)
            if not isinstance(prompt, str) or n_out < 1:
                raise ValueError("prompt must be a string and max_tokens >= 1")
        except (ValueError, KeyError, TypeError) as exc:
            await self._json(w, 400, {"error": {"message": f"bad request: {exc}"}})
            return
        ids = CharTokenizer().encode(prompt)
        stream, usage = bool(req.get("stream")), bool((req.get("stream_options") or {}).get("include_usage"))
        rid, created = f"cmpl-{time.monotonic_ns()}", int(time.time())
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        async with self.lock:
            if stream:
                w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            job = loop.run_in_executor(None, self.model.generate, ids, n_out,
                                       lambda t: loop.call_soon_threadsafe(q.put_nowait, t))
            text = []
            for k in range(n_out):
                ch = CharTokenizer().decode([await q.get()])
                text.append(ch)
                if stream:
                    await self._event(w, {"id": rid, "object": "text_completion", "created": created, "model": self.name,
                                          "choices": [{"index": 0, "text": ch,
                                                       "finish_reason": "length" if k == n_out - 1 else None}]})
            await job
        use = {"prompt_tokens": len(ids), "completion_tokens": n_out, "total_tokens": len(ids) + n_out}
        if not stream:
            await self._json(w, 200, {"id": rid, "object": "text_completion", "created": created, "model": self.name,
                                      "choices": [{"index": 0, "text": "".join(text), "finish_reason": "length"}],
                                      "usage": use})
            return
        if usage:
            await self._event(w, {"id": rid, "object": "text_completion", "created": created, "model": self.name,
                                  "choices": [], "usage": use})
        await self._send(w, "data: [DONE]\n\n")
        w.write(b"0\r\n\r\n")
        await w.drain()

    async def _event(self, w: asyncio.StreamWriter, obj: dict) -> None:
        await self._send(w, "data: " + json.dumps(obj) + "\n\n")

    async def _send(self, w: asyncio.StreamWriter, text: str) -> None:
        data = text.encode()
        w.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await w.drain()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="torchserve.py", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help="JSON of the decoder's shape (profiler.torch_model.Arch fields)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    ap.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    ap.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:0)")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"), help="weight and activation dtype")
    ap.add_argument("--max-positions", type=int, default=8192,
                    help="longest sequence (prompt + output tokens) the model holds; longer prompts are cut to fit")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    ap.add_argument("--name", default=None, help="model id clients send (default: the arch file)")
    a = ap.parse_args(argv)
    model = _Model(a.arch, a.device, a.dtype, a.max_positions, a.seed)
    model.generate([1, 2, 3], 2, lambda t: None)             # warm up before answering /health

    async def serve() -> None:
        srv = Server(model, a.name or a.arch)
        server = await asyncio.start_server(srv.handle, a.host, a.port)
        print(f"torchserve: {model.arch.name} on {a.device} at http://{a.host}:{a.port}", flush=True)
        async with server:
            await server.serve_forever()
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    # run as a stand-alone script (the device machine): the repository is not importable yet, so
    # its root cannot come from profiler.catalog.repo_root; this puts it on the path for profiler.torch_model
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
