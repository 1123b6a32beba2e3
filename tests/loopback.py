"""A loopback HTTP server for tests that need a real socket but no engine: fixed answers per route."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# an answer: (status, content type, body), or a function of the request body that returns one
Answer = tuple[int, str, bytes]
Route = Answer | Callable[[bytes], Answer] | list[Answer]  # a list: one answer per call, the last repeats


def text(body: str, status: int = 200) -> Answer:
    return status, "text/plain; version=0.0.4", body.encode()


def js(body: object, status: int = 200) -> Answer:
    return status, "application/json", json.dumps(body).encode()


class Loopback:
    """`with Loopback({"GET /metrics": text(...)}) as root:` serves on 127.0.0.1; any other route is 404.
    Every request body is kept in `.seen` as (method and path, body), its headers in `.headers`."""

    def __init__(self, routes: dict[str, Route]):
        self.seen: list[tuple[str, bytes]] = []
        self.headers: list[dict[str, str]] = []
        routes = {k: (list(v) if isinstance(v, list) else v) for k, v in routes.items()}
        seen, heads = self.seen, self.headers

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                key = f"{method} {self.path}"
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((key, body))
                heads.append({k.lower(): v for k, v in self.headers.items()})
                route = routes.get(key)
                if isinstance(route, list):
                    route = route.pop(0) if len(route) > 1 else route[0]
                status, ctype, out = route(body) if callable(route) else (route or (404, "text/plain", b"not found"))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a test of its timeout): nothing to answer

            def do_GET(self):  # noqa: N802 (http.server's names)
                self._answer("GET")

            def do_POST(self):  # noqa: N802
                self._answer("POST")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return self.root

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
