"""lm-eval kept in one process across a sequential gate's batches: a batch's records are the ones a fresh
`lm_eval` process with the same `--samples` writes (doc ids, prompts with their few-shot examples, scores), a
failing call is an EngineError naming the log, and closing leaves nothing running. Real lm-eval in the engine's
environment, with its `dummy` model (whose scores are drawn from Python's seeded `random`, so they match only
where the seeds are set again at every call): no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qeval.engines import Endpoint
from qeval.engines.process import pid_alive
from qeval.errors import EngineError
from qeval.settings import Settings
from qeval.suites.lmeval import _env, lmeval_argv, parse_samples
from qeval.suites.lmeval_session import Call, LmEvalSession
from qeval.suites.lmeval_tasks import materialize_tasks
from qeval.suites.spec import LmEvalSuiteRef

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["oe_addition", "oe_arc_easy_mc"]  # a generate task with 3 few-shot examples, a multiple-choice one
BATCHES = [{"oe_addition": [7, 3, 40], "oe_arc_easy_mc": [5, 1]}, {"oe_addition": [11, 2], "oe_arc_easy_mc": [9]}]


def _records(out: Path, task: str) -> list[tuple]:
    [f] = out.rglob(f"samples_{task}_*.jsonl")
    return sorted((r.item_id, r.prompt_hash, r.doc_hash, tuple(sorted(r.scores.items()))) for r in parse_samples(f))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    s = Settings.from_env()
    if not s.vllm.exists():  # a failure, not a skip: `make setup` builds it
        pytest.fail(f"the engine's environment is not built ({s.vllm.location}); run `make setup`")
    tmp = tmp_path_factory.mktemp("session")
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=TASKS, include_path=ROOT / "suites" / "lmeval", limit=60)
    include = materialize_tasks(ref, s.data, tmp)
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", tokenizer=Path("unused"), engine="vllm")
    argv = lmeval_argv(s.vllm.python, ref, ep, TASKS, include, tmp / "o", tmp / "c")
    # lm-eval's own arguments, the model swapped for its dummy (no server, no tokenizer)
    args = argv[3:]
    args[args.index("--model") + 1], args[args.index("--model_args") + 1] = "dummy", ""
    args = [a for i, a in enumerate(args) if a != "--limit" and args[i - 1] != "--limit"]
    return s, tmp, args, _env(s.vllm, tmp, ep)


def test_a_kept_session_answers_each_batch_as_a_fresh_lm_eval_process(setup):
    s, tmp, args, env = setup
    # the second batch is the one a kept process could answer otherwise (its seeds and few-shot stream used once)
    fresh = tmp / "fresh"
    subprocess.run([str(s.vllm.python), "-m", "lm_eval", *args, "--output_path", str(fresh), "--use_cache",
                    str(tmp / "fresh-cache"), "--samples", json.dumps({t: sorted(v) for t, v in BATCHES[1].items()})],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    with LmEvalSession(s.vllm.python, args, env, tmp / "session.log", "m") as session:
        for k, samples in enumerate(BATCHES):
            session.evaluate(Call(tasks=tuple(TASKS), out=tmp / f"kept-{k}", cache=tmp / f"kept-cache-{k}",
                                  samples=samples))
            for t in TASKS:  # each batch's docs, lm-eval's doc ids
                assert [r[0] for r in _records(tmp / f"kept-{k}", t)] == sorted(str(i) for i in samples[t])
        assert {t: _records(tmp / "kept-1", t) for t in TASKS} == {t: _records(fresh, t) for t in TASKS}
        pid = session.proc.pid
        # a batch of one task only: the other is not evaluated again
        session.evaluate(Call(tasks=("oe_arc_easy_mc",), out=tmp / "one", cache=tmp / "one-cache",
                              samples={"oe_arc_easy_mc": [2]}))
        assert not list((tmp / "one").rglob("samples_oe_addition_*.jsonl"))
        assert [r[0] for r in _records(tmp / "one", "oe_arc_easy_mc")] == ["2"]
        # a call lm-eval refuses: an EngineError naming the log, with its tail
        with pytest.raises(EngineError, match="lm-eval failed: .*session.log") as e:
            session.evaluate(Call(tasks=("no_such_task",), out=tmp / "bad", cache=tmp / "bad-cache",
                                  samples={"no_such_task": [0]}))
        assert e.value.log_tail
        assert session.proc.pid == pid  # one process answered every call
    assert not pid_alive(pid)  # closing ended it


def test_a_worker_that_dies_before_it_connects_is_an_engine_error_with_its_log(tmp_path):
    # this interpreter has no lm-eval: the worker dies at its import, before it connects back
    session = LmEvalSession(Path(sys.executable), ["--model", "dummy", "--tasks", "t"], {**os.environ},
                            tmp_path / "dead.log", "m", connect_timeout_s=60)
    with pytest.raises(EngineError, match=r"lm-eval exited with code 1 while it built its tasks .*dead.log") as e:
        session.evaluate(Call(tasks=("t",), out=tmp_path / "o", cache=tmp_path / "c"))
    assert "lm_eval" in e.value.log_tail
    session.close()
    assert session.proc is None


def test_the_next_token_scoring_keeps_its_client_and_writes_each_calls_flags(tmp_path):
    """Two batches of the next-token scoring through one kept process, against a loopback completions server:
    one request per question, no echo, each call's flags file its own, the records `acc_next_token`."""
    from qeval.suites.lmeval import LmEvalSessions, resolve, run_lmeval
    from qeval.verdict.policy import GatePolicy
    from tests.loopback import Loopback
    from tests.suites.test_next_token import _completion

    s = Settings.from_env()
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["oe_arc_easy_mc"], include_path=ROOT / "suites" / "lmeval",
                         scoring=["next_token"], next_token_top_k=5, limit=10)
    [task] = resolve(ref, s, GatePolicy()).tasks
    got: dict[str, dict] = {}
    with (server := Loopback({"POST /v1/completions": _completion})) as root:
        ep = Endpoint(base_url=f"{root}/v1", model="m", tokenizer=s.models / "smollm2-135m-instruct", engine="vllm")
        with LmEvalSessions(ref, ep, s.vllm, s.data, tmp_path, tmp_path / "lmeval.log") as sessions:
            for k, docs in enumerate(([4, 0], [7])):
                run_lmeval(ref, [task], ep, s.vllm, s.data, tmp_path / f"batch-{k + 1}",
                           lambda t, recs: got.update({r.item_id: r for r in recs}), tmp_path / "unused.log",
                           samples={task.suite: docs}, sessions=sessions)
            [session] = sessions.open.values()
            pid = session.proc.pid
    assert not pid_alive(pid)
    assert sorted(got) == ["0", "4", "7"]
    assert all(r.scores == {"acc_next_token": 0.0} or r.scores == {"acc_next_token": 1.0} for r in got.values())
    assert {r.extra["scoring"] for r in got.values()} == {"next_token"}
    for k, n in ((1, 2), (2, 1)):  # each call's questions flagged in its own file
        assert len((tmp_path / f"batch-{k}" / "lmeval-cache-next_token.flags.jsonl").read_text().splitlines()) == n
    assert not (tmp_path / "unused.log").exists()
    bodies = [json.loads(b) for _, b in server.seen]  # one prompt per question, none echoed
    assert sum(len(b["prompt"]) for b in bodies) == 3 and not any(b.get("echo") for b in bodies)
