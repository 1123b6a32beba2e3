"""A scripted streaming server on 127.0.0.1, in the test's own event loop: each request to /v1/completions is
answered with the given parts, each written after its pause, as a server streams tokens (and as the network may
split them: a part need not end at a line's end)."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from typing import AsyncIterator

from aiohttp import web


def sse(obj) -> bytes:
    """One server-sent event: `data: <json>` (or the text as is, `[DONE]`) and the blank line that ends it."""
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


@asynccontextmanager
async def paced(parts: list[tuple[float, bytes]], status: int = 200,
                seen: list[tuple[dict, dict, tuple]] | None = None) -> AsyncIterator[str]:
    """The server's /v1 url; every request's headers, JSON body and client address (which connection it came
    on) go to `seen`. A part of no bytes is a pause alone (the last one delays the body's end)."""

    async def completions(request: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen.append((dict(request.headers), await request.json(), request.transport.get_extra_info("peername")))
        if status != 200:
            return web.Response(status=status, text="the model is not served here")
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        for pause, part in parts:
            await asyncio.sleep(pause)
            if part:
                await r.write(part)
        await r.write_eof()
        return r

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)  # a held stream is cut, not awaited
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()
