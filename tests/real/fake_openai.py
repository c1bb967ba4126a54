"""A scripted fake OpenAI-compatible server for the client's fault tests: a raw asyncio HTTP/1.1
server on a background thread whose answers come from a queue of steps, one per request, so a
test says exactly what each attempt gets (a stream cut mid-way, an error event, no [DONE],
keep-alive pings forever, a 429 with Retry-After, a malformed 200...)."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field


def chunk(i: int, text: str, finish: str | None = None) -> dict:
    return {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def usage(p: int, n: int) -> dict:
    return {"id": "c", "object": "text_completion", "choices": [],
            "usage": {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}}


def stream_events(pieces: list[str], prompt_tokens: int = 5) -> list[dict]:
    """A vLLM-like stream: one chunk per piece (the last with finish_reason), then usage."""
    ev = [chunk(i, t, "length" if i == len(pieces) - 1 else None) for i, t in enumerate(pieces)]
    return ev + [usage(prompt_tokens, len(pieces))]


@dataclass
class Step:
    """What one request gets. ``kind``: ``sse`` (``events``, then ``[DONE]`` if ``done``; ``cut_after``
    events then the socket closes mid-body; ``ping_s``: a ``: keep-alive`` comment this often,
    for 8 s after the events), ``json`` (``status``, ``body`` text, ``headers``)."""
    kind: str = "sse"
    events: list = field(default_factory=list)
    done: bool = True
    cut_after: int | None = None
    ping_s: float | None = None
    delay_s: float = 0.0
    status: int = 200
    body: str = ""
    headers: dict = field(default_factory=dict)


class FakeServer:
    def __init__(self) -> None:
        self.steps: deque[Step] = deque()
        self.requests: list[dict] = []
        self.times: list[float] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *steps: Step) -> "FakeServer":
        self.steps.extend(steps)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._conn, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _shutdown(self) -> None:
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                hdr = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                body = await reader.readexactly(int(hdr.get("content-length", 0)))
                path = lines[0].split()[1]
                self.requests.append({"path": path, "headers": hdr, "body": json.loads(body) if body else None})
                self.times.append(time.monotonic())
                if path in ("/health", "/v1/models"):
                    await self._json(writer, 200, json.dumps({"data": [{"id": "fake"}]}), {})
                    continue
                step = self.steps.popleft() if self.steps else Step()
                if step.delay_s:
                    await asyncio.sleep(step.delay_s)
                if step.kind == "json":
                    await self._json(writer, step.status, step.body, step.headers)
                    continue
                if not await self._sse(writer, step):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _json(self, w: asyncio.StreamWriter, status: int, body: str, headers: dict) -> None:
        data = body.encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        w.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n{extra}\r\n"
                .encode() + data)
        await w.drain()

    async def _sse(self, w: asyncio.StreamWriter, step: Step) -> bool:
        """Returns False when the connection was cut on purpose."""
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")

        async def send(text: str) -> None:
            data = text.encode()
            w.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await w.drain()
        for k, ev in enumerate(step.events):
            if step.cut_after is not None and k == step.cut_after:
                w.transport.abort()            # mid-body: the chunked message never ends
                return False
            await send("data: " + (ev if isinstance(ev, str) else json.dumps(ev)) + "\n\n")
            await asyncio.sleep(0.005)
        if step.ping_s is not None:      # pings for 8 s (a client without a deadline waits that long)
            for _ in range(int(8 / step.ping_s)):
                await asyncio.sleep(step.ping_s)
                await send(": keep-alive\n\n")
        if step.done:
            await send("data: [DONE]\n\n")
        w.write(b"0\r\n\r\n")
        await w.drain()
        return True
