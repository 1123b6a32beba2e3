"""What a running engine can hold at once, and the requests in flight a suite sizes from it. Pure: no I/O.

A server holds as many sequences as its KV cache has room for (its tokens over a request's prompt and output)
and at most its `max_num_seqs`; more requests than that only queue, fewer leave its batch part empty. Requests
in flight change no result (greedy decoding, seeded sampling), so the number is recorded, never keyed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capacity:
    """What an engine said it holds once it was up (None: it cannot say)."""

    kv_tokens: int | None = None  # its KV cache, in tokens
    max_num_seqs: int | None = None  # sequences it schedules at once

    @property
    def known(self) -> bool:
        return self.kv_tokens is not None or self.max_num_seqs is not None


def size(capacity: Capacity | None, prompt_tokens: int, output_tokens: int, cap: int) -> int | None:
    """Requests in flight that fill the engine without queueing: the KV cache's tokens over one request's
    (prompt + output), at most max_num_seqs, at most `cap`, at least 1. None where the engine cannot say
    (the caller keeps its own number)."""
    if capacity is None or not capacity.known:
        return None
    bounds = [cap]
    if capacity.kv_tokens is not None:
        bounds.append(capacity.kv_tokens // max(1, prompt_tokens + output_tokens))
    if capacity.max_num_seqs is not None:
        bounds.append(capacity.max_num_seqs)
    return max(1, min(bounds))
