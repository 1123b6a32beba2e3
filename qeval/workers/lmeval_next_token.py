"""lm-eval with single-token answers scored from one next-token prompt per question (runs in the engine venv,
never imports qeval).

Usage: python lmeval_next_token.py FLAGS.jsonl TOP_K LM_EVAL_ARGUMENTS...

Registers the lm-eval model `qeval-next-token` (lm-eval's `local-completions` client, whose loglikelihood is
replaced for the requests it can answer faster), then runs lm-eval's command line with the arguments that follow.

lm-eval scores a multiple-choice question by sending one request per choice with `echo` and prompt logprobs; an
engine that is asked for prompt logprobs skips its prefix cache (vLLM does), so the question is prefilled once
per choice. Here the requests are grouped by context: where every continuation of a context is one token (a
letter), one completion prompt (max_tokens 1, temperature 0, no echo, `logprobs` = TOP_K) gives the next
token's top-k log-probabilities, and each choice's log-probability is read from them: the same number the echo
path computes, for every choice in the top k. Prompts go lm-eval's batch size to a request, lm-eval's
concurrency of requests in flight, as its own path sends them. A choice outside the top k gets -inf (below every
listed one; the likeliest choice is listed whenever any is, so the answer stays the same) and its context is
flagged. Any other group (a continuation of
several tokens, an empty context) goes through lm-eval's own path.

A call's distinct contexts and continuations are tokenized in one call of the tokenizer (`pair_strings`), not one
string at a time as lm-eval does: the same ids, in a fraction of the time.

Each context's scoring is appended to FLAGS.jsonl as {"prompt_hash", "scoring", "outside_top_k"}: prompt_hash is
lm-eval's own hash of the context (the samples log's `prompt_hash`), scoring "next_token" or "loglikelihood" (the
fallback), outside_top_k the number of its choices that were not listed. The file lives beside lm-eval's request
cache, so a resumed run, answered from the cache, still finds its flags.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

TOKEN_ID = "token_id:"  # vLLM's key for a listed token when asked `return_tokens_as_token_ids`


@dataclass(frozen=True)
class Group:
    """The requests that share one context: their indices in lm-eval's list, and each continuation's tokens."""

    context: tuple[int, ...]
    indices: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    text: str | None  # the context as lm-eval logs it (None: a rolling request, which has no cache key)

    @property
    def single_token(self) -> bool:
        return bool(self.context) and self.text is not None and all(len(c) == 1 for c in self.continuations)


def group_by_context(requests: Sequence[tuple]) -> list[Group]:
    """lm-eval's (cache_key, context tokens, continuation tokens) requests, grouped by context, in first-seen order."""
    order: dict[tuple[int, ...], list[int]] = {}
    for i, (_, ctx, _) in enumerate(requests):
        order.setdefault(tuple(ctx), []).append(i)
    out = []
    for ctx, ix in order.items():
        key = requests[ix[0]][0]
        out.append(Group(ctx, tuple(ix), tuple(tuple(requests[i][2]) for i in ix),
                         key[0] if isinstance(key, tuple) and key else None))
    return out


def listed_logprobs(top: dict[str, float], decode: Callable[[int], str],
                    token_ids: Sequence[int]) -> list[float | None]:
    """Each token's log-probability among the listed top-k (None: not listed). The keys are `token_id:N` where
    the engine honours `return_tokens_as_token_ids`, else the tokens' text, matched by decoding each id."""
    by_id = {int(k[len(TOKEN_ID):]): v for k, v in top.items() if k.startswith(TOKEN_ID)}
    if by_id:
        return [by_id.get(t) for t in token_ids]
    return [top.get(decode(t)) for t in token_ids]


def score_group(top: dict[str, float], decode: Callable[[int], str],
                group: Group) -> tuple[list[tuple[float, bool]], int]:
    """(logprob, is_greedy) per continuation, and how many were outside the top-k (given -inf)."""
    ids = [c[0] for c in group.continuations]
    got = listed_logprobs(top, decode, ids)
    best = max(top.values()) if top else None
    out = [(v, v == best) if v is not None else (-math.inf, False) for v in got]
    return out, sum(v is None for v in got)


def payload(model: str, contexts: Sequence[Sequence[int]], top_k: int, seed: int) -> dict:
    # no echo and no prompt_logprobs: an engine keeps its prefix cache for such a request
    return {"model": model, "prompt": [list(c) for c in contexts], "max_tokens": 1, "temperature": 0,
            "logprobs": top_k, "seed": seed, "return_tokens_as_token_ids": True}


def top_logprobs(body: dict, n: int = 1) -> list[dict[str, float]]:
    """Per prompt of the request (n of them), the first generated position's top-k, from a completions response."""
    try:
        choices = sorted(body["choices"], key=lambda c: c["index"])
        tops = [c["logprobs"]["top_logprobs"][0] for c in choices]
    except (KeyError, IndexError, TypeError) as e:
        raise RuntimeError(f"the completions response has no top_logprobs ({e!r}): {json.dumps(body)[:500]}") from None
    if len(tops) != n or not all(isinstance(t, dict) and t for t in tops):
        raise RuntimeError(f"the completions response has not one non-empty top_logprobs for each of its {n} "
                           f"prompts: {json.dumps(body)[:500]}")
    return [{str(k): float(v) for k, v in t.items()} for t in tops]


def post_all(url: str, payloads: Sequence[dict], headers: dict, concurrency: int, timeout: float,
             retries: int) -> list[dict]:
    """POST each payload (at most `concurrency` in flight, each retried up to `retries` times), bodies in order."""
    import requests

    local = threading.local()

    def one(p: dict) -> dict:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        for attempt in range(max(1, retries)):
            try:
                r = session.post(url, json=p, headers=headers, timeout=timeout)
                if r.ok:
                    return r.json()
                problem = f"HTTP {r.status_code}: {r.text[:500]}"
                if r.status_code < 500 and r.status_code != 429:  # the request is wrong: asking again will not help
                    break
            except requests.RequestException as e:
                problem = repr(e)
            time.sleep(min(10.0, 0.5 * 2 ** attempt))
        raise RuntimeError(f"next-token request to {url} failed: {problem}")

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, payloads))


def pair_strings(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The strings lm-eval's TemplateLM.loglikelihood tokenizes for these (context, continuation) pairs, each once:
    a context's trailing spaces moved to its continuation, then the whole and the context (an empty context: the
    continuation alone)."""
    out: dict[str, None] = {}
    for context, continuation in pairs:
        if context == "":
            out[continuation] = None
            continue
        n = len(context) - len(context.rstrip())
        if n:
            context, continuation = context[:-n], context[-n:] + continuation
        out[context + continuation] = None
        out[context] = None
    return list(out)


def prompt_hash(context: str) -> str:
    return hashlib.sha256(context.encode("utf-8")).hexdigest()  # lm-eval's hash_string


def register(flags_path: str, top_k: int) -> None:
    from lm_eval.api.registry import register_model
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    @register_model("qeval-next-token")
    class NextTokenCompletions(LocalCompletionsAPI):
        flags_file = flags_path  # a kept session (lmeval_session.py) sets each call's on the instance
        encoded: dict[str, list[int]] = {}

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            # lm-eval tokenizes two strings a request, one call each (a question's context once per choice):
            # here every distinct one in a single call of the fast tokenizer, the same ids for each string
            if self.tokenizer_backend == "huggingface":
                strings = pair_strings([r.args for r in requests])
                ids = self.tokenizer(strings, add_special_tokens=bool(self.add_bos_token), truncation=False,
                                     return_attention_mask=False).input_ids
                self.encoded = dict(zip(strings, ids))
            try:
                return super().loglikelihood(requests, disable_tqdm=disable_tqdm)
            finally:
                self.encoded = {}

        def tok_encode(self, string, left_truncate_len=None, add_special_tokens=False, truncation=False, **kwargs):
            # the encoded strings are those lm-eval asks for with its defaults (add_special_tokens from add_bos_token)
            hit = self.encoded.get(string) if isinstance(string, str) and not (
                left_truncate_len or add_special_tokens or truncation or kwargs) else None
            if hit is not None:
                return list(hit)
            return super().tok_encode(string, left_truncate_len=left_truncate_len,
                                      add_special_tokens=add_special_tokens, truncation=truncation, **kwargs)

        def _loglikelihood_tokens(self, requests, **kwargs):
            groups = group_by_context(requests)
            fast = [g for g in groups if g.single_token]
            slow = [i for g in groups if not g.single_token for i in g.indices]
            results: list = [None] * len(requests)
            # (the context a one-token continuation leaves within lm-eval's max_length, as its own path cuts it)
            size = max(1, self._batch_size)
            batches = [fast[i:i + size] for i in range(0, len(fast), size)]
            bodies = post_all(self.base_url, [payload(self.model, [g.context[1 - self.max_length:] for g in b], top_k,
                                                      self._seed) for b in batches],
                              self.header, self._concurrent, self.timeout, self.max_retries)
            tops = [t for b, body in zip(batches, bodies) for t in top_logprobs(body, len(b))]
            flags = []
            for g, top in zip(fast, tops):
                scored, outside = score_group(top, lambda t: self.tokenizer.decode([t]), g)
                for i, r in zip(g.indices, scored):
                    results[i] = r
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], r)
                flags.append({"prompt_hash": prompt_hash(g.text), "scoring": "next_token", "outside_top_k": outside})
            if slow:
                for i, r in zip(slow, super()._loglikelihood_tokens([requests[i] for i in slow], **kwargs)):
                    results[i] = r
                flags += [{"prompt_hash": prompt_hash(g.text), "scoring": "loglikelihood", "outside_top_k": 0}
                          for g in groups if not g.single_token and g.text is not None]
            with open(self.flags_file, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(x) + "\n" for x in flags)
            return results


def main(argv: list[str]) -> None:
    flags_path, top_k, rest = argv[0], int(argv[1]), argv[2:]
    register(flags_path, top_k)
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *rest]
    cli_evaluate()


if __name__ == "__main__":
    main(sys.argv[1:])
