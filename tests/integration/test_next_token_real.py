"""qeval's next-token scoring beside lm-eval's loglikelihood on a real vLLM server of the embedded model: the
same answer on every question whose letters are all in the top-k, one prompt per question, and no request for
prompt logprobs (the requests are counted on their way to the server)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import urllib.error
import urllib.request

import pytest

from qeval.config import LmEvalSuiteRef
from qeval.suites.lmeval import run_lmeval
from qeval.suites.lmeval_tasks import resolve_tasks

from ..loopback import Loopback
from .conftest import ROOT

pytestmark = pytest.mark.slow

N = 60


def _forward(url: str):
    def answer(body: bytes):
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, "application/json", r.read()
        except urllib.error.HTTPError as e:
            return e.code, "application/json", e.read()
    return answer


def _logprobs(response: str) -> list[float]:
    return [float(lp) for lp, _ in json.loads(response)]


def _argmax(xs: list[float]) -> int:
    return max(range(len(xs)), key=lambda i: (xs[i], -i))  # the first of equals, as lm-eval's np.argmax


def test_next_token_scoring_agrees_with_loglikelihood_and_asks_no_prompt_logprobs(server, settings, tmp_path):
    _, endpoint = server
    proxy = Loopback({"POST /v1/completions": _forward(f"{endpoint.base_url}/completions")})
    # three examples teach the embedded model the format (measured: zero-shot, a letter of 27 of 60 questions
    # is outside its top 20, where it would rather end its turn; three-shot, none of 60)
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["oe_arc_easy_mc"], include_path=ROOT / "suites" / "lmeval", limit=N,
                         num_fewshot=3, scoring=["loglikelihood", "next_token"])
    base = resolve_tasks(ref, settings.data)[0]
    ll, nt = base, base.next_token(ref.next_token_top_k)
    out = {}
    with proxy as root:
        run_lmeval(ref, [ll, nt], dataclasses.replace(endpoint, base_url=f"{root}/v1"), settings.vllm, settings.data,
                   tmp_path, lambda t, recs: out.__setitem__(t.suite, {r.item_id: r for r in recs}),
                   tmp_path / "lmeval.log")
    bodies = [json.loads(b) for route, b in proxy.seen if route == "POST /v1/completions"]
    echo = [b for b in bodies if b.get("echo")]
    ours = [b for b in bodies if not b.get("echo")]
    # lm-eval's path: a prompt per choice, each echoed for its prompt logprobs
    assert sum(len(b["prompt"]) for b in echo) == sum(len(json.loads(r.response)) for r in out[ll.suite].values())
    # the next-token path: one prompt per question, one token generated, no echo, no prompt logprobs
    assert sum(len(b["prompt"]) for b in ours) == N
    assert all(b["max_tokens"] == 1 and b["logprobs"] == ref.next_token_top_k and "prompt_logprobs" not in b
               for b in ours)

    lls, nts = out[ll.suite], out[nt.suite]
    assert set(lls) == set(nts) == {str(i) for i in range(N)}
    assert all(set(r.scores) == {"acc_next_token"} for r in nts.values())
    assert all(r.extra["scoring"] == "next_token" for r in nts.values())  # every answer is one token
    listed = [i for i, r in nts.items() if r.extra["outside_top_k"] == 0]
    assert len(listed) >= 0.9 * N, f"only {len(listed)} of {N} questions had every letter in the top-k"
    # where every choice is listed, the same numbers, so the same answer on every question
    diffs = [abs(a - b) for i in listed for a, b in zip(_logprobs(lls[i].response), _logprobs(nts[i].response))]
    assert statistics.median(diffs) < 1e-2, statistics.median(diffs)
    answers = [(_argmax(_logprobs(lls[i].response)), _argmax(_logprobs(nts[i].response))) for i in listed]
    assert all(a == b for a, b in answers), answers
    assert [lls[i].scores["acc"] for i in listed] == [nts[i].scores["acc_next_token"] for i in listed]
