"""The streaming client's timing against a scripted SSE stream: what counts as a token, where TPOT ends."""

import asyncio
import json

import httpx
import pytest

from qeval.probe.client import stream_one


def _sse(obj) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


class _Paced(httpx.AsyncByteStream):
    """Chunks sent after given pauses, as a server streams tokens."""

    def __init__(self, parts: list[tuple[float, bytes]]):
        self.parts = parts

    async def __aiter__(self):
        for pause, part in self.parts:
            await asyncio.sleep(pause)
            yield part


def _run(parts: list[tuple[float, bytes]]):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Paced(parts))

    async def go():
        async with httpx.AsyncClient(base_url="http://x/v1", transport=httpx.MockTransport(handler)) as c:
            return await stream_one(c, "m", [1, 2, 3], 4)

    return asyncio.run(go())


def test_an_empty_text_chunk_is_a_token_and_tpot_ends_at_the_last_token():
    tok = lambda text: _sse({"choices": [{"index": 0, "text": text}]})  # noqa: E731
    # 4 tokens 50 ms apart, the second with empty text (a partial UTF-8 character held back), then the
    # usage chunk 300 ms later: it is no token and stays out of TPOT
    res = _run([(0.05, tok("a")), (0.05, tok("")), (0.05, tok("b")), (0.05, tok("c")),
                (0.3, _sse({"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 3}})),
                (0, _sse("[DONE]"))])
    assert res.ok and res.output_tokens == 4 and len(res.itls) == 3
    assert res.last_token == pytest.approx(0.2, abs=0.04)
    assert res.e2e >= res.last_token + 0.25
    assert res.tpot == pytest.approx(0.05, abs=0.015)  # (last token - first) / 3, not (end of stream - first) / 3
