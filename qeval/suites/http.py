"""The suites' HTTP client: one session to a served variant, shared by every request of a suite run, and one
POST of JSON retried on a transient failure.

It is aiohttp's, not httpx's: with hundreds of requests in flight, httpx's connection pool (httpcore) walks
every connection and every waiting request each time a request starts or ends, so the client's own CPU per
request grows with the concurrency (10-40 ms a request at 64-256 in flight against a local server) and it,
not the server, sets the pace; aiohttp's stays near 0.2 ms (benchmarks/http_client.py, numbers in
docs/evidence/eval-throughput.md). The latency probe streams through the same client (`connect`): at its
highest concurrency it would otherwise time its own pool rather than the engine.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncContextManager, AsyncIterator, Callable, Mapping, TypeVar
from urllib.parse import urlsplit

import aiohttp

from ..engines import Endpoint
from ..engines.base import tls_verify
from ..errors import EngineError

if TYPE_CHECKING:
    from ..engines.capabilities import Tokenized, TokenizeRoute

T = TypeVar("T")

# statuses a server gives when it may answer later: every 5xx, a request timeout, too many requests
RETRIED = frozenset({408, 429})
# a malformed answer: a parse that finds no field where it should (retried; the next answer may be whole)
MALFORMED = (KeyError, IndexError, ValueError, TypeError)


class HttpStatus(Exception):
    """An answer with an error status; its text is the start of the server's body (where it says why)."""

    def __init__(self, status: int, body: bytes):
        self.status = status
        super().__init__(f"HTTP {status}: {body[:300].decode('utf-8', 'replace').strip()}")

    @property
    def transient(self) -> bool:
        return self.status >= 500 or self.status in RETRIED


def encode(payload: Any) -> bytes:
    """A request's body: compact UTF-8 JSON, the bytes httpx sent (no NaN: a server's JSON has none)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class Client:
    """One session to one endpoint: its headers (the API key's bearer) on every request, a url without a
    scheme under `base_url`, through `proxy` where one is set."""

    session: aiohttp.ClientSession
    base_url: str
    proxy: str | None = None

    def url(self, url: str) -> str:
        return url if "://" in url else self.base_url.rstrip("/") + url

    def request(self, url: str, payload: Any) -> AsyncContextManager[aiohttp.ClientResponse]:
        """One POST of `payload` as JSON, its response read by the caller (whole, or as a stream)."""
        return self.session.post(self.url(url), data=encode(payload), proxy=self.proxy,
                                 headers={"Content-Type": "application/json"})

    async def post(self, url: str, payload: Any) -> Any:
        """The parsed JSON answer to one POST, tried once; an error status raises HttpStatus."""
        async with self.request(url, payload) as r:
            body = await r.read()
            if r.status >= 400:
                raise HttpStatus(r.status, body)
        return json.loads(body)

    async def post_json(self, url: str, payload: Any, *, what: str, retries: int, retry_backoff_s: float,
                        parse: Callable[[Any], T] = lambda body: body) -> T:
        """`parse` of the answer to one POST, tried `retries` more times `retry_backoff_s` apart where it
        failed in a way a later try may not: no connection, a timeout, a 5xx (or 408, 429), a malformed
        answer. A status that says the request itself is wrong fails at once. `what` names the request in
        the EngineError raised when it fails for good; `parse` may raise EngineError itself (not retried)."""
        last: Exception | None = None
        for _ in range(retries + 1):
            try:
                return parse(await self.post(url, payload))
            except HttpStatus as e:
                if not e.transient:
                    raise EngineError(f"{what} failed: {e}") from None
                last = e
            except (aiohttp.ClientError, asyncio.TimeoutError, *MALFORMED) as e:
                last = e
            await asyncio.sleep(retry_backoff_s)
        raise EngineError(f"{what} failed after {retries + 1} tries: {describe(last)}")


async def tokenize(client: Client, endpoint: Endpoint, route: "TokenizeRoute", text: str, what: str) -> "Tokenized":
    """The text in the served variant's tokens, by the engine's tokenize route (a path under the server's root,
    not under /v1), tried once: a failure here is the engine's, not a transient one."""
    url, body = route.request(endpoint, text)
    root = endpoint.base_url.rstrip("/").removesuffix("/v1")
    return await client.post_json(url if "://" in url else root + url, body, parse=route.parse, what=what,
                                  retries=0, retry_backoff_s=0)


def describe(e: Exception | None) -> str:
    """An exception in a message: its text, or its kind where it has none (a timeout's is empty)."""
    if isinstance(e, HttpStatus):
        return str(e)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), as httpx took it."""
    parts = urlsplit(url)
    if parts.hostname is None or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def session(endpoint: Endpoint, timeout_s: float, concurrency: int) -> AsyncContextManager[Client]:
    """A client to `endpoint` that holds at most `concurrency` connections, each kept alive between requests
    (see `connect`)."""
    return connect(endpoint.base_url, endpoint.headers, timeout_s, max(1, concurrency))


@asynccontextmanager
async def connect(base_url: str, headers: Mapping[str, str] | None, timeout_s: float,
                  limit: int) -> AsyncIterator[Client]:
    """A client to `base_url` that sends `headers` on every request and holds at most `limit` connections
    (0: no limit), each kept alive between requests. `timeout_s` bounds connecting and each wait for the
    server's next bytes (a whole non-streamed answer, or a streamed answer's next chunk), not the wait for a
    free connection nor a stream's whole length. The proxy is read from the environment once: aiohttp's
    `trust_env` would look it up (and ~/.netrc) on a thread for every request, the most of its CPU per request."""
    connector = aiohttp.TCPConnector(limit=limit, ssl=tls_verify(base_url))
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as s:
        yield Client(s, base_url, env_proxy(base_url))
