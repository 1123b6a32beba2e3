"""A stand-in for an OpenAI-compatible completions server that answers at once, so that what an lm-eval run through
it takes is the client's own time (benchmarks/lmeval_overhead.py --standin). Standard library only: it runs under
any Python.

It answers `POST /v1/completions` with well-formed logprobs in vLLM's shape, computed from the request alone so
that the same request always gets the same answer and two scorings of one question agree:

- `echo` (lm-eval's loglikelihood): per prompt, every position's token, its log-probability and a top-1 dict
  (`token_logprobs[0]` and `top_logprobs[0]` are None, as vLLM gives them);
- otherwise (max_tokens 1, qeval's next-token scoring): per prompt, the next token's top `logprobs` entries, keyed
  `token_id:N` where the request asks `return_tokens_as_token_ids`.

The log-probability of token t after a context is a hash of (the context's length, its last token, t), so the
echo path's number for a one-token continuation is the number the next-token path lists for it. The ids `LISTED`
(given on the command line: the tokenizer's ids of the answer letters) are listed first in every next-token
answer, so no answer falls outside the top-k.

It counts the requests in flight as they come and go and writes, on `GET /stats`, their most, the time with at
least one in flight and the time idle between the first request and the last answer (`POST /reset` starts the count
again).

Run: python lmeval_standin.py PORT [--delay S] [--listed ID ...]   (prints "ready" once it listens on 127.0.0.1)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import zlib

from standin import Requests, listen


def logprob(ctx_len: int, last: int, tok: int) -> float:
    """A log-probability in (-10, -0.01], the same for the same (context, token) in either scoring."""
    return -0.01 - (zlib.crc32(f"{ctx_len}:{last}:{tok}".encode()) % 999) / 100.0


class Counter:
    """Requests in flight over time: the most at once, seconds busy (>= 1 in flight) and idle, batch sizes."""

    def __init__(self) -> None:
        self.now = self.most = self.requests = self.prompts = 0
        self.first = self.last = self.since = None
        self.busy_s = 0.0
        self.area = 0.0  # in-flight x seconds: its mean over the busy time is the concurrency reached

    def _tick(self) -> float:
        t = time.monotonic()
        if self.since is not None:
            dt = t - self.since
            self.area += self.now * dt
            if self.now:
                self.busy_s += dt
        self.since = t
        return t

    def start(self, prompts: int) -> None:
        t = self._tick()
        self.first = self.first or t
        self.now += 1
        self.most = max(self.most, self.now)
        self.requests += 1
        self.prompts += prompts

    def done(self) -> None:
        self.last = self._tick()
        self.now -= 1

    def stats(self) -> dict:
        span = (self.last - self.first) if self.first and self.last else 0.0
        return {"requests": self.requests, "prompts": self.prompts, "most_in_flight": self.most,
                "mean_in_flight_when_busy": self.area / self.busy_s if self.busy_s else 0.0,
                "first_to_last_s": span, "busy_s": self.busy_s, "idle_s": max(0.0, span - self.busy_s)}


def completion(req: dict, listed: list[int]) -> dict:
    prompts = req["prompt"]
    if not prompts or not isinstance(prompts[0], list):
        prompts = [prompts]
    as_ids = req.get("return_tokens_as_token_ids", False)
    key = (lambda t: f"token_id:{t}") if as_ids else (lambda t: f"<{t}>")
    choices = []
    for i, p in enumerate(prompts):
        if req.get("echo"):
            # the prompt's positions, then the one generated token (as vLLM answers echo with max_tokens 1)
            lps = [None] + [logprob(j, p[j - 1], p[j]) for j in range(1, len(p))] + [-0.01]
            # the greedy token's entry beside the token's own: greedy where the token scores above -0.5
            tops = [None] + [{key(t): lp, key(0): max(lp, -0.5)} for t, lp in zip([*p[1:], 0], lps[1:])]
            logprobs = {"tokens": [key(t) for t in [*p, 0]], "token_logprobs": lps, "top_logprobs": tops,
                        "text_offset": list(range(len(p) + 1))}
        else:
            k = max(1, int(req.get("logprobs") or 1))
            ids = (listed + [t for t in range(1000, 1000 + k) if t not in listed])[:k]
            top = {key(t): logprob(len(p), p[-1], t) for t in ids}
            best = max(top, key=top.get)
            logprobs = {"tokens": [best], "token_logprobs": [top[best]], "top_logprobs": [top], "text_offset": [0]}
        choices.append({"index": i, "text": "", "logprobs": logprobs, "finish_reason": "length"})
    return {"id": "cmpl-standin", "object": "text_completion", "model": req.get("model", ""), "choices": choices,
            "usage": {"prompt_tokens": sum(map(len, prompts)), "completion_tokens": len(prompts),
                      "total_tokens": sum(map(len, prompts)) + len(prompts)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--listed", type=int, nargs="*", default=[])
    args = ap.parse_args()
    counter = Counter()

    def reply(transport, status: bytes, body: bytes) -> None:
        if not transport.is_closing():
            transport.write(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                            % (status, len(body)) + body)

    class Http(Requests):
        def request(self, method: bytes, path: bytes, body: bytes) -> None:
            if path == b"/stats":
                reply(self.t, b"200 OK", json.dumps(counter.stats()).encode())
            elif path == b"/reset":
                counter.__init__()
                reply(self.t, b"200 OK", b"{}")
            elif method == b"POST" and path.endswith(b"/completions"):
                req = json.loads(body)
                counter.start(len(req["prompt"]) if req["prompt"] and isinstance(req["prompt"][0], list) else 1)
                out = json.dumps(completion(req, args.listed)).encode()
                asyncio.get_running_loop().call_later(args.delay, self.answer, out)
            else:
                reply(self.t, b"404 Not Found", b"{}")

        def answer(self, out: bytes) -> None:
            counter.done()
            reply(self.t, b"200 OK", out)

    asyncio.run(listen(args.port, Http))


if __name__ == "__main__":
    main()
