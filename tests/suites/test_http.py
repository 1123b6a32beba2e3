"""The suites' shared HTTP client against a real local server: what it retries, what it fails at once, the
error that names the request, the headers and body it sends, its timeouts and its connection bound."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from qeval.engines import Endpoint
from qeval.errors import EngineError
from qeval.suites.http import env_proxy, session
from tests.loopback import Loopback, js

OK = js({"choices": [{"text": "Paris"}]})


def endpoint(root: str, api_key: str | None = None) -> Endpoint:
    return Endpoint(base_url=root + "/v1", model="m", tokenizer=None, engine="vllm", api_key=api_key)


def post(ep: Endpoint, retries: int = 2, timeout_s: float = 10, backoff: float = 0.01, url: str = "/completions",
         parse=lambda body: body["choices"][0]["text"]):
    async def main():
        async with session(ep, timeout_s, 4) as client:
            return await client.post_json(url, {"prompt": "é", "n": 1}, what="suite s: item 'x'", retries=retries,
                                          retry_backoff_s=backoff, parse=parse)

    return asyncio.run(main())


@pytest.mark.parametrize("status", [500, 503, 429, 408])
def test_a_transient_status_is_tried_again(status):
    server = Loopback({"POST /v1/completions": [js({"error": "busy"}, status=status)] * 2 + [OK]})
    with server as root:
        assert post(endpoint(root)) == "Paris"
    assert len(server.seen) == 3


def test_the_error_after_every_try_names_the_request_and_the_servers_reason():
    server = Loopback({"POST /v1/completions": js({"error": "out of memory"}, status=500)})
    with server as root:
        with pytest.raises(EngineError, match=r"^suite s: item 'x' failed after 2 tries: HTTP 500: .*out of memory"):
            post(endpoint(root), retries=1)
    assert len(server.seen) == 2


def test_a_request_the_server_refuses_fails_at_once():
    server = Loopback({"POST /v1/completions": js({"error": "prompt too long"}, status=400)})
    with server as root:
        with pytest.raises(EngineError, match=r"^suite s: item 'x' failed: HTTP 400: .*prompt too long"):
            post(endpoint(root))
    assert len(server.seen) == 1


def test_a_malformed_answer_is_tried_again_and_a_parse_that_gives_up_is_not():
    server = Loopback({"POST /v1/completions": [js({"choices": []}), js({"oops": 1}), OK]})
    with server as root:
        assert post(endpoint(root)) == "Paris"
    assert len(server.seen) == 3

    def refuse(body):
        raise EngineError("the engine serves no such thing")

    server = Loopback({"POST /v1/completions": OK})
    with server as root:
        with pytest.raises(EngineError, match="no such thing"):
            post(endpoint(root), parse=refuse)
    assert len(server.seen) == 1


def test_the_backoff_is_waited_between_tries():
    server = Loopback({"POST /v1/completions": [js({}, status=500)] * 2 + [OK]})
    with server as root:
        t0 = time.monotonic()
        post(endpoint(root), backoff=0.3)
        assert time.monotonic() - t0 >= 0.6


def test_headers_and_body_that_reach_the_server():
    server = Loopback({"POST /v1/completions": OK, "POST /tokenize": js({"tokens": [1]})})
    with server as root:
        post(endpoint(root, api_key="sk-secret"))
        post(endpoint(root), url=root + "/tokenize", parse=lambda body: body)  # a url with a scheme is taken whole
    (route, body), (other, _) = server.seen
    assert route == "POST /v1/completions" and other == "POST /tokenize"
    assert body == '{"prompt":"é","n":1}'.encode()  # compact UTF-8 JSON, as httpx sent it
    first, second = server.headers
    assert first["authorization"] == "Bearer sk-secret" and first["content-type"] == "application/json"
    assert "authorization" not in second


def test_an_answer_slower_than_the_timeout_is_a_failed_try():
    def slow(body):
        time.sleep(1.0)
        return OK

    server = Loopback({"POST /v1/completions": slow})
    with server as root:
        t0 = time.monotonic()
        with pytest.raises(EngineError, match=r"^suite s: item 'x' failed after 2 tries: \w*Timeout"):
            post(endpoint(root), retries=1, timeout_s=0.2)
        assert time.monotonic() - t0 < 1.5  # two tries of 0.2 s, not two of the server's 1 s
    assert len(server.seen) == 2


def test_no_server_is_a_failed_try():
    with Loopback({}) as root:
        pass  # its port is closed now
    with pytest.raises(EngineError, match=r"failed after 2 tries: Client\w*Error"):
        post(endpoint(root), retries=1)


def test_at_most_concurrency_requests_reach_the_server_at_once():
    lock, now, most = threading.Lock(), [0], [0]

    def counted(body):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        return OK

    async def main(ep):
        async with session(ep, 10, 2) as client:
            return await asyncio.gather(*(client.post_json("/completions", {"i": i}, what=f"item {i}", retries=0,
                                                           retry_backoff_s=0) for i in range(8)))

    server = Loopback({"POST /v1/completions": counted})
    with server as root:
        got = asyncio.run(main(endpoint(root)))
    assert len(got) == 8 and len(server.seen) == 8 and most[0] == 2


def test_the_proxy_the_environment_names_is_used(monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    proxy = Loopback({"POST http://engine.invalid/v1/completions": OK})
    with proxy as root:
        monkeypatch.setenv("HTTP_PROXY", root)
        monkeypatch.setenv("http_proxy", root)
        assert env_proxy("http://engine.invalid/v1") == root
        assert post(Endpoint(base_url="http://engine.invalid/v1", model="m", tokenizer=None, engine="vllm")) == "Paris"
        monkeypatch.setenv("NO_PROXY", "engine.invalid")
        monkeypatch.setenv("no_proxy", "engine.invalid")
        assert env_proxy("http://engine.invalid/v1") is None
    assert [route for route, _ in proxy.seen] == ["POST http://engine.invalid/v1/completions"]
