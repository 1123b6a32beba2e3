"""The fake engine's server: OpenAI-compatible enough for qeval's own clients, deterministic, with faults.

Started by engines/fake.py as `python fake_server.py --config JSON` (by path, standard library only,
so it is up in tens of milliseconds). Routes: /health, /version, /metrics (vLLM's names), /v1/models,
/v1/completions (echo + logprobs with max_tokens 0 for prompt logprobs, top-k alternatives, streaming)
/v1/chat/completions (streaming too) and /tokenize (vLLM's shape: a token's id is a hash of its text, and
/v1/completions takes back the ids this server gave out). Every answer is a function of the config's `model`, the
prompt and the request's settings. A needle prompt (suites/needle.py) is answered with its needle's value where the
needle lies within `needle_reach` tokens of the prompt's end (a model whose retrieval fades with distance), else
with a near miss. Faults, when the config has them: `dies_after` k (the process exits
once k generation requests are answered), `hangs_after` k (it SIGSTOPs itself then: /health goes silent
too), `start_delay_s` (it sleeps before it listens).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = re.compile(r"\s*\S+|\s+$")  # a "token": a word with the whitespace before it (the tokens make the text)
VOCAB = [" the", " of", " and", " to", " a", " in", " is", " that", " it", " for", " on", " with", " as",
         " was", " at", " by", " model", " token", " answer", " city", " number", " river", " north", " red"]
TAIL_LOGIT = 1.0  # the rest of the vocabulary, as one bucket: listed probabilities sum to less than 1
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")
# a needle suite's question, at the prompt's end, and the needle it asks for (suites/needle_items.py)
_QUESTION = re.compile(r"What is the special code for (.+?)\? The special code for \1 is$")


def _hash(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).digest()[:8], "big")


def _unit(*parts: Any) -> float:
    return _hash(*parts) / 2**64


def tokens_of(text: str) -> list[str]:
    return TOKEN.findall(text)


def token_id(tok: str) -> int:
    """A token's id: a function of its text alone, so every fake server gives one text the same ids."""
    return _hash("id", tok) % 2**31


def prompt_key(messages: list[dict[str, Any]]) -> str:
    """A chat request's text as the fake looks it up: its messages' contents in order (suites/custom.py)."""
    return "\n".join(str(m.get("content") or "") for m in messages)


def load_answers(paths: list[str]) -> dict[str, tuple[str, str]]:
    """Items files (custom suites' JSONL) -> {prompt text: (item id, reference)}."""
    out: dict[str, tuple[str, str]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                item = json.loads(line)
                text = item["prompt"] if item.get("prompt") is not None else prompt_key(item["messages"])
                ref = item["reference"]
                out[text] = (str(item["id"]), str(ref[0] if isinstance(ref, list) else ref))
    return out


class Model:
    """What the fake "knows": its answers and its next-token distributions."""

    def __init__(self, cfg: dict[str, Any], served: str = "fake"):
        self.name, self.served = cfg.get("model", "fake"), served
        self.answers = load_answers(cfg.get("answers", []))
        self.wrong = set(cfg.get("wrong", []))
        self.wrong_fraction = float(cfg.get("wrong_fraction", 0.0))
        self.server_noise = float(cfg.get("server_noise", 0.0))
        self.noise = float(cfg.get("logprob_noise", 0.0))
        self.needle_reach = cfg.get("needle_reach")

    def _wrong(self, item_id: str) -> bool:
        return (item_id in self.wrong or _unit(self.name, "wrong", item_id) < self.wrong_fraction
                or _unit(self.served, "noise", item_id) < self.server_noise)

    def answer(self, text: str, max_tokens: int, temperature: float, seed: int, ignore_eos: bool,
               stop: list[str]) -> tuple[list[str], str]:
        """(generated tokens, finish reason). A known item's reference (or a wrong answer where the config
        says so); any other prompt gets words chosen by a hash of (model, prompt, settings)."""
        found = self.needle(text) if not ignore_eos else None
        if found is not None:
            out = found
        elif text in self.answers and not ignore_eos:
            item_id, ref = self.answers[text]
            if self._wrong(item_id):
                ref = str(int(float(ref)) + 1) if _NUMBER.match(ref.strip()) else "I do not know"
            out = ref
        else:
            salt = [self.name, text, temperature, seed if temperature > 0 else 0]
            n = max_tokens if ignore_eos else 1 + _hash(*salt, "n") % max(1, max_tokens)
            out = "".join(VOCAB[_hash(*salt, i) % len(VOCAB)] for i in range(n))
        for s in stop:
            if s and s in out:
                out = out[:out.index(s)]
        toks = tokens_of(out)
        if ignore_eos:  # the probe's fixed output length
            toks += [VOCAB[_hash(self.name, text, "pad", i) % len(VOCAB)] for i in range(max_tokens - len(toks))]
        finish = "length" if len(toks) >= max_tokens else "stop"
        return toks[:max_tokens], finish

    def needle(self, text: str) -> str | None:
        """A needle prompt's answer: its needle's value where it lies within `needle_reach` tokens of the end,
        else a wrong value; None: not a needle prompt."""
        q = _QUESTION.search(text)
        if q is None:
            return None
        lead = f"The special code for {q.group(1)} is "
        at = text.rfind(lead, 0, q.start())
        value = re.match(r"\d+", text[at + len(lead):]) if at >= 0 else None
        if value is None:
            return " 0000000."
        reach = self.needle_reach
        if reach is not None and len(tokens_of(text[at:])) > reach:
            return f" {(int(value.group(0)) + 1) % 10**7:07d}."  # a near miss: found, but the digits lost
        return f" {value.group(0)}."

    def _candidates(self, context: str, actual: str, k: int) -> dict[str, float]:
        """Logprobs of the actual token and k alternatives after `context`; the rest is one tail bucket.
        The reference distribution depends on the context only; `logprob_noise` shifts it per model."""
        alts = sorted((w for w in VOCAB if w != actual), key=lambda w: _hash("alt", context, w))[:k]
        logits = {}
        for c in [actual, *alts]:
            z = 3.0 * _unit("w", context, c) + (1.5 if c == actual else 0.0)
            if self.noise:
                z += self.noise * (2.0 * _unit(self.name, context, c) - 1.0)
            if self.server_noise:  # this server's own (see server_noise)
                z += self.server_noise * (2.0 * _unit(self.served, context, c) - 1.0)
            logits[c] = z
        norm = math.log(sum(math.exp(z) for z in logits.values()) + math.exp(TAIL_LOGIT))
        return {c: z - norm for c, z in logits.items()}

    def logprobs(self, toks: list[str], k: int, first_context: str | None) -> dict[str, list]:
        """OpenAI's completion logprobs over `toks`: the first has none unless a context precedes it."""
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        offset = 0
        for i, tok in enumerate(toks):
            context = toks[i - 1] if i > 0 else first_context
            out["tokens"].append(tok)
            out["text_offset"].append(offset)
            offset += len(tok)
            if context is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            lps = self._candidates(context, tok, k)
            top = dict(sorted(lps.items(), key=lambda kv: -kv[1])[:k])
            top[tok] = lps[tok]  # the actual token is always listed, as vLLM does
            out["token_logprobs"].append(lps[tok])
            out["top_logprobs"].append(top)
        return out


class Faults:
    """Counts generation requests; past `dies_after` the process exits, past `hangs_after` it stops."""

    def __init__(self, cfg: dict[str, Any]):
        self.dies_after, self.hangs_after = cfg.get("dies_after"), cfg.get("hangs_after")
        self.arrived = self.answered = 0
        self.cond = threading.Condition()

    def arrive(self) -> None:
        with self.cond:
            self.arrived += 1
            n = self.arrived
            for limit, what in ((self.dies_after, "die"), (self.hangs_after, "hang")):
                if limit is not None and n > limit:
                    # the first `limit` requests are answered whole, then the fault: exactly k items stored
                    self.cond.wait_for(lambda: self.answered >= limit, timeout=10)
                    print(f"fake: {what} after {limit} requests", flush=True)
                    if what == "die":
                        os._exit(17)
                    # as a stopped server: connections open, no answer. Sent to this thread: a process-wide
                    # SIGSTOP may be taken by another thread, and until it is this one would answer its request
                    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    def done(self) -> None:
        with self.cond:
            self.answered += 1
            self.cond.notify_all()


class Stats:
    """What /metrics reports, under vLLM's names."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prompt_tokens = self.generation_tokens = 0
        self.running = self.most_running = 0  # most: requests in flight at once, said when it stops
        self.requests = 0
        self.e2e_sum = self.ttft_sum = 0.0

    def text(self) -> str:
        with self.lock:
            lines = [
                "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total {self.prompt_tokens}",
                "# TYPE vllm:generation_tokens_total counter",
                f"vllm:generation_tokens_total {self.generation_tokens}",
                "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running {self.running}",
                "# TYPE vllm:num_requests_waiting gauge", "vllm:num_requests_waiting 0",
                "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc {min(1.0, self.running / 16)}"]
            for name, total in (("vllm:e2e_request_latency_seconds", self.e2e_sum),
                                ("vllm:time_to_first_token_seconds", self.ttft_sum),
                                ("vllm:request_queue_time_seconds", 0.0)):
                lines += [f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf"}} {self.requests}',
                          f"{name}_sum {total}", f"{name}_count {self.requests}"]
            return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    server: "FakeServer"
    protocol_version = "HTTP/1.1"  # keep-alive, as clients pool connections; a stream closes its own
    disable_nagle_algorithm = True  # headers and body are two writes: without this, each answer waits ~40 ms for an ACK

    def log_message(self, *args: Any) -> None:
        pass  # one line per request would be most of the log

    def _send(self, status: int, body: Any, ctype: str = "application/json") -> None:
        out = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        s = self.server
        if self.path == "/health":
            self._send(200, "", "text/plain")
        elif self.path == "/version":
            self._send(200, {"version": "qeval-fake-1"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": s.served, "object": "model", "owned_by": "qeval"}]})
        elif self.path == "/metrics":
            self._send(200, s.stats.text(), "text/plain; version=0.0.4")
        else:
            self._send(404, {"object": "error", "message": f"no route {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))  # read whole: the connection is kept
        if self.path not in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
            return self._send(404, {"object": "error", "message": f"no route {self.path}"})
        try:
            req = json.loads(raw)
        except ValueError as e:
            return self._send(400, {"object": "error", "message": f"not JSON: {e}"})
        s = self.server
        if self.path == "/tokenize":
            return self._send(200, s.tokenize(str(req.get("prompt") or "")))
        s.faults.arrive()
        with s.stats.lock:
            s.stats.running += 1
            s.stats.most_running = max(s.stats.most_running, s.stats.running)
        try:
            self._generate(req, chat=self.path.endswith("chat/completions"))
        finally:
            with s.stats.lock:
                s.stats.running -= 1
            s.faults.done()

    def _generate(self, req: dict[str, Any], chat: bool) -> None:
        s, t0 = self.server, time.perf_counter()
        if chat:
            text = prompt_key(req.get("messages") or [])
        else:
            text = req.get("prompt")
            if isinstance(text, list) and len(text) == 1 and isinstance(text[0], str):
                text = text[0]
            if isinstance(text, list) and all(isinstance(t, int) for t in text):
                text = s.detokenize(text)  # ids it gave out on /tokenize; None: ids no tokenizer of its made
            if not isinstance(text, str):
                return self._send(400, {"object": "error", "message": "the fake engine takes text prompts, or the "
                                                                      "ids its /tokenize gave out"})
        max_tokens = int(req.get("max_tokens") if req.get("max_tokens") is not None else 16)
        stop = req.get("stop") or []
        toks, finish = ([], "length") if max_tokens == 0 else s.model.answer(
            text, max_tokens, float(req.get("temperature") or 0.0), int(req.get("seed") or 0),
            bool(req.get("ignore_eos")), [stop] if isinstance(stop, str) else list(stop))
        prompt_toks = tokens_of(text)
        usage = {"prompt_tokens": len(prompt_toks), "completion_tokens": len(toks),
                 "total_tokens": len(prompt_toks) + len(toks)}
        head = {"id": f"fake-{_hash(text, max_tokens) % 10**8}", "created": int(time.time()), "model": s.served}
        n = next(s.generations)
        cold = max(0.0, 1.0 - (n - 1) / s.cold_requests) if s.cold_requests else 0.0
        delay = s.token_delay_s * (1.0 + (s.cold_factor - 1.0) * cold)
        if req.get("stream"):
            self._stream(head, toks, finish, chat, usage, bool((req.get("stream_options") or {}).get("include_usage")),
                         delay)
        else:
            if delay:
                time.sleep(delay * len(toks))
            out = "".join(toks)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": out}, "finish_reason": finish}
            else:
                k = req.get("logprobs")
                lp = None
                if k is not None:
                    seq = (prompt_toks if req.get("echo") else []) + toks
                    first = None if req.get("echo") or not prompt_toks else prompt_toks[-1]
                    lp = s.model.logprobs(seq, int(k), first)
                choice = {"index": 0, "text": (text if req.get("echo") else "") + out, "logprobs": lp,
                          "finish_reason": finish}
            self._send(200, {**head, "object": "chat.completion" if chat else "text_completion",
                             "choices": [choice], "usage": usage})
        with s.stats.lock:
            s.stats.prompt_tokens += len(prompt_toks)
            s.stats.generation_tokens += len(toks)
            s.stats.requests += 1
            s.stats.e2e_sum += time.perf_counter() - t0
            if not req.get("stream"):  # the first token left with the whole answer
                s.stats.ttft_sum += time.perf_counter() - t0

    def _stream(self, head: dict, toks: list[str], finish: str, chat: bool, usage: dict, with_usage: bool,
                delay: float) -> None:
        """Server-sent events, one chunk per token, as vLLM streams them (then usage, then [DONE])."""
        s, t0 = self.server, time.perf_counter()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")  # the body ends when the connection closes
        self.end_headers()
        self.close_connection = True
        obj = "chat.completion.chunk" if chat else "text_completion"

        def event(data: Any) -> None:
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        for i, tok in enumerate(toks):
            if i and delay:
                time.sleep(delay)
            last = i == len(toks) - 1
            part = ({"delta": {"role": "assistant", "content": tok} if i == 0 else {"content": tok}} if chat
                    else {"text": tok, "logprobs": None})
            event({**head, "object": obj, "choices": [{"index": 0, **part, "finish_reason": finish if last else None}]})
            if i == 0:
                with s.stats.lock:
                    s.stats.ttft_sum += time.perf_counter() - t0
        if with_usage:
            event({**head, "object": obj, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a suite's concurrency plus the watchdog and the scraper, never refused

    def __init__(self, host: str, port: int, served: str, cfg: dict[str, Any]):
        self.served, self.model, self.faults, self.stats = served, Model(cfg, served), Faults(cfg), Stats()
        self.token_delay_s = float(cfg.get("token_delay_s", 0.0))
        self.cold_requests, self.cold_factor = int(cfg.get("cold_requests", 0)), float(cfg.get("cold_factor", 1.0))
        self.generations = itertools.count(1)  # next() is atomic under the GIL: one number per request
        self.max_model_len = int(cfg.get("max_model_len") or 2048)
        self.vocab: dict[int, str] = {}  # the ids /tokenize gave out, to read a token-id prompt back
        self.vocab_lock = threading.Lock()
        super().__init__((host, port), Handler)

    def tokenize(self, text: str) -> dict[str, Any]:
        toks = tokens_of(text)
        ids = [token_id(t) for t in toks]
        with self.vocab_lock:
            self.vocab.update(zip(ids, toks))
        return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}

    def detokenize(self, ids: list[int]) -> str | None:
        with self.vocab_lock:
            toks = [self.vocab.get(i) for i in ids]
        return None if any(t is None for t in toks) else "".join(toks)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--served-model-name", default="fake")
    ap.add_argument("--config", default="{}", help="the fake's spec, as JSON (engines/fake.py: FakeEngineSpec)")
    args = ap.parse_args(argv)
    cfg = json.loads(args.config)
    if cfg.get("start_delay_s"):
        time.sleep(float(cfg["start_delay_s"]))  # a slow start: nothing listens meanwhile
    server = FakeServer(args.host, args.port, args.served_model_name, cfg)
    print(f"fake: serving {args.served_model_name} on {args.host}:{args.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a clean exit on stop()
    try:
        server.serve_forever(poll_interval=0.05)
    except SystemExit:
        pass
    finally:
        print(f"fake: stopped after answering {server.faults.answered} requests, at most "
              f"{server.stats.most_running} at once", flush=True)
        server.server_close()


if __name__ == "__main__":
    main()
