"""The streaming client's timing against a scripted SSE stream: what counts as a token, where TPOT ends, how
the stream's lines are read however the network splits them, and what a failed request records."""

import asyncio
import time

import pytest

from qeval.probe.client import DRAIN_S, run_concurrency, stream_one
from qeval.suites.http import connect
from tests.sse import paced, sse


def _run(parts: list[tuple[float, bytes]], status: int = 200, headers: dict | None = None,
         seen: list | None = None):
    async def go():
        async with paced(parts, status, seen) as url, connect(url, headers, 5, 1) as c:
            return await stream_one(c, "m", [1, 2, 3], 4)

    return asyncio.run(go())


def tok(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "text": text}]})


USAGE = sse({"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 3}})


def test_an_empty_text_chunk_is_a_token_and_tpot_ends_at_the_last_token():
    # 4 tokens 50 ms apart, the second with empty text (a partial UTF-8 character held back), then the
    # usage chunk 300 ms later: it is no token and stays out of TPOT
    res = _run([(0.05, tok("a")), (0.05, tok("")), (0.05, tok("b")), (0.05, tok("c")), (0.3, USAGE),
                (0, sse("[DONE]"))])
    assert res.ok and res.output_tokens == 4 and res.prompt_tokens == 3 and len(res.itls) == 3
    assert res.last_token == pytest.approx(0.2, abs=0.04)
    assert res.e2e >= res.last_token + 0.25
    assert res.tpot == pytest.approx(0.05, abs=0.015)  # (last token - first) / 3, not (end of stream - first) / 3


def test_a_line_split_across_writes_is_one_chunk_timed_when_it_is_whole():
    # the second token's line arrives in two writes 100 ms apart, the first ending mid-JSON; CRLF line ends;
    # the usage chunk is the body's last line, unended (no [DONE])
    second = tok("b").replace(b"\n", b"\r\n")
    res = _run([(0.02, tok("a")), (0.05, second[:12]), (0.1, second[12:]), (0.02, tok("c")), (0, USAGE[:-2])])
    assert res.ok and res.error is None and res.output_tokens == 4 and res.prompt_tokens == 3
    assert len(res.itls) == 2
    assert res.itls[0] == pytest.approx(0.15, abs=0.04)  # from the first token to the second line's end


def test_the_request_carries_the_headers_and_fixes_the_output_length():
    seen: list = []
    res = _run([(0, tok("a")), (0, sse("[DONE]"))], headers={"Authorization": "Bearer k"}, seen=seen)
    assert res.ok and res.output_tokens == 1  # no usage chunk: the chunks count the tokens
    (head, body, _), = seen
    assert head["Authorization"] == "Bearer k" and head["Content-Type"] == "application/json"
    assert body == {"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0.0, "stream": True,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}


def test_an_error_status_a_bad_chunk_and_an_empty_stream_are_failed_requests():
    res = _run([], status=404)
    assert not res.ok and res.error == "HTTP 404: b'the model is not served here'" and res.ttft is None
    bad = _run([(0, tok("a")), (0, b"data: {not json\n\n")])
    assert not bad.ok and bad.error.startswith("JSONDecodeError: ") and bad.ttft is not None
    empty = _run([(0, USAGE), (0, sse("[DONE]"))])
    assert not empty.ok and empty.error == "no token streamed"


def test_a_server_gone_is_a_failed_request_not_a_crash():
    async def go():
        async with paced([]) as url:
            pass  # closed before the step starts
        return await run_concurrency(url, "m", [[1], [2]], 4, 2, 5, timeout_s=2)

    step = asyncio.run(go())
    assert len(step.results) == 2 and not any(r.ok for r in step.results)
    assert all(r.error.startswith("ClientConnectorError") for r in step.results)


def test_a_step_reuses_its_connections():
    # 8 requests, 2 in flight, the body's end 20 ms after [DONE]: it is read, so each connection goes back to
    # the pool rather than being closed with bytes unread
    seen: list = []

    async def go():
        parts = [(0, tok("a")), (0.005, tok("b")), (0, USAGE), (0, sse("[DONE]")), (0.02, b"")]
        async with paced(parts, seen=seen) as url:
            return await run_concurrency(url, "m", [[1]] * 8, 4, 2, 10)

    step = asyncio.run(go())
    assert [r.ok for r in step.results] == [True] * 8 and step.client_cpu > 0
    assert len(seen) == 8 and len({peer for _, _, peer in seen}) == 2


def test_a_stream_held_open_after_done_does_not_hold_the_request():
    # [DONE], then the body's end 5 s later: the request is done at [DONE], its connection given up after DRAIN_S
    async def go():
        async with paced([(0, tok("a")), (0, USAGE), (0, sse("[DONE]")), (5, b"")]) as url, \
                connect(url, None, 30, 1) as c:
            t0 = time.perf_counter()
            res = await stream_one(c, "m", [1], 4)
            return res, time.perf_counter() - t0

    res, took = asyncio.run(go())
    assert res.ok and res.e2e < 1 and took < DRAIN_S + 1
