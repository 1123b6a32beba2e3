"""What the benchmarks' stand-in servers share (standard library only, so a server runs under any Python): HTTP/1.1
requests framed out of a connection's bytes, a listening socket on 127.0.0.1, a free port, and the machine line
their tables start with. Hand-written because a stand-in must add nothing of its own to what a client is timed
against: a plain asyncio protocol with keep-alive, one request at a time per connection (none of the clients
measured pipelines), a body framed by content-length."""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import subprocess
from typing import Callable


def take_request(buf: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """(method, path, body, the bytes after it) of the first request in `buf`; None until it has arrived whole."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].split(b"\r\n")
    n = 0
    for line in head[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            n = int(value)
    if len(buf) < end + 4 + n:
        return None
    method, path = head[0].split(b" ")[:2]
    return method, path, buf[end + 4:end + 4 + n], buf[end + 4 + n:]


class Requests(asyncio.Protocol):
    """A connection's requests, each handed whole to `request` in the order they came; `self.t` is the transport."""

    def connection_made(self, transport) -> None:
        self.t, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (req := take_request(self.buf)) is not None:
            method, path, body, self.buf = req
            self.request(method, path, body)

    def request(self, method: bytes, path: bytes, body: bytes) -> None:
        raise NotImplementedError


async def listen(port: int, protocol: Callable[[], asyncio.Protocol], reuse_port: bool = False) -> None:
    """Serve `protocol` on 127.0.0.1:`port` (a deep backlog: hundreds of clients connect at once), saying "ready"
    on stdout once it listens; `reuse_port`: several processes share the port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    server = await asyncio.get_running_loop().create_server(protocol, sock=s, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_name() -> str:
    """lscpu's model name and the cores: the line a benchmark's table starts with."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    return f"{name}, {os.cpu_count()} cores"
