"""The fake engine itself: a real local server, up in well under a second, deterministic, answering the
way qeval's own clients read (custom suites, prompt logprobs, the probe's stream), with its faults."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from qeval.config import EngineSpec, ProbeSpec, VariantSpec
from qeval.engines import build_engine
from qeval.engines.registry import ENGINES
from qeval.engines.fake import FakeEngine, FakeEngineSpec, write_checkpoint
from qeval.errors import ConfigError, EngineError
from qeval.probe.client import stream_one
from qeval.probe.latency import run_probe
from qeval.settings import Settings
from qeval.suites.custom import load_suite, run_custom
from qeval.suites.http import connect
from qeval.suites.logprobs import LogprobsSuite, compare_chunks, perplexity, run_logprobs
from tests.conftest import MARK, Seen, marked, sees_marked, wait_gone

SUITES = Path(__file__).resolve().parents[2] / "suites" / "custom"
ANSWERS = [SUITES / "capitals.jsonl", SUITES / "arithmetic.jsonl"]
TEXT = ("The standard library contains built-in modules that provide access to system functionality such as "
        "file input and output")


@pytest.fixture
def serve(tmp_path, monkeypatch):
    """`serve(name, spec, **engine) -> FakeEngine` (not started). Every server it starts carries a token in its
    environment, and the search for that token sees it once started: at teardown every engine is stopped and
    no process with that token may be left."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(MARK, token)
    engines: list[FakeEngine] = []
    seen: list[Seen] = []

    def seeing(engine: FakeEngine) -> FakeEngine:
        start = engine.start

        def start_and_see(*args, **kwargs):
            out = start(*args, **kwargs)
            seen.append(sees_marked(token, "fake_server.py"))
            return out

        engine.start = start_and_see  # `with engine` and a restart after a fault start through it too
        return engine

    def _serve(name: str = "m", spec: FakeEngineSpec | None = None, **engine) -> FakeEngine:
        ck = write_checkpoint(tmp_path / "ck" / name, spec)
        v = VariantSpec(name=name, method="checkpoint", checkpoint=ck)
        e = build_engine("fake", v, ck, EngineSpec(kind="fake", **engine), Settings(cache=tmp_path), tmp_path / "logs")
        engines.append(e)
        return seeing(e)

    yield _serve
    for e in engines:
        e.stop(grace_s=2)
    for live in seen:
        live.assert_gone()
    assert wait_gone(marked(token), timeout=5) == []  # also what a start that failed began


@pytest.fixture
def http():
    """The test's one HTTP client: a client per request would read the CA bundle each time (~40 ms)."""
    with httpx.Client(timeout=5) as client:
        yield client


def _chat(http, ep, content: str, **kw) -> dict:
    body = {"model": ep.model, "messages": [{"role": "user", "content": content}], "max_tokens": 12, **kw}
    return http.post(ep.base_url + "/chat/completions", json=body, timeout=5).json()


def _scores(suite, ep) -> dict[str, float]:
    got = []
    run_custom(suite, ep, set(), got.extend)
    return {r.item_id: r.scores[suite.primary] for r in got}


def test_registered_like_any_engine_and_up_in_well_under_a_second(serve, http):
    assert ENGINES.get("fake") is FakeEngine and EngineSpec(kind="fake").kind == "fake"
    engine = serve("base")
    t0 = time.monotonic()
    with engine as ep:
        assert time.monotonic() - t0 < 1.0 and engine.startup_seconds < 1.0
        assert ep.engine == "fake" and ep.capabilities is FakeEngine.capabilities and ep.tokenizer is None
        models = http.get(ep.base_url + "/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["base"] and engine.health()
        assert engine.memory().rss_bytes > 0
    assert not engine.health()


def test_suite_items_answered_right_unless_the_spec_says_wrong(serve):
    capitals, arithmetic = load_suite(SUITES / "capitals.yaml"), load_suite(SUITES / "arithmetic.yaml")
    with serve("base", FakeEngineSpec(answers=ANSWERS)) as ep:
        base = _scores(capitals, ep)
        assert set(base.values()) == {1.0} and len(base) == len(capitals.items)
        assert set(_scores(arithmetic, ep).values()) == {1.0}
    wrong = FakeEngineSpec(answers=ANSWERS, wrong=["france", "germany", "12m6"])
    with serve("q", wrong) as ep:
        q = _scores(capitals, ep)
        assert {i for i, s in q.items() if s == 0.0} == {"france", "germany"}
        assert {i for i, s in _scores(arithmetic, ep).items() if s == 0.0} == {"12m6"}  # 7, not 6


def test_a_wrong_fraction_is_the_same_items_every_time(serve):
    capitals = load_suite(SUITES / "capitals.yaml")
    spec = FakeEngineSpec(answers=ANSWERS, wrong_fraction=0.3)
    runs = []
    for name in ("a", "b"):
        with serve(name, spec) as ep:
            runs.append({i for i, s in _scores(capitals, ep).items() if s == 0.0})
    assert runs[0] == runs[1] and 0 < len(runs[0]) < len(capitals.items)


def test_other_prompts_get_text_that_is_a_function_of_model_prompt_and_settings(serve, http):
    with serve("a") as ep:
        first = _chat(http, ep, "Tell me a story.")
        again = _chat(http, ep, "Tell me a story.")
        assert again["choices"] == first["choices"] and again["usage"] == first["usage"]
        assert first["usage"]["completion_tokens"] <= 12
        sampled = {_chat(http, ep, "Tell me a story.", temperature=1.0, seed=s)["choices"][0]["message"]["content"]
                   for s in range(6)}
        assert len(sampled) > 1  # a seed is a setting
    with serve("b") as ep:  # another variant of the same fake model answers the same
        assert _chat(http, ep, "Tell me a story.")["choices"] == first["choices"]


def test_prompt_logprobs_in_the_shape_the_logprobs_suite_reads(serve):
    suite = LogprobsSuite(name="c", chunks=[TEXT[:60], TEXT[60:]], top_k=5, key="k")
    runs = {}
    for name, spec in (("base", None), ("base2", None), ("q", FakeEngineSpec(model="q", logprob_noise=0.8))):
        with serve(name, spec) as ep:
            got = []
            run_logprobs(suite, ep, set(), got.extend)
            runs[name] = sorted(got, key=lambda r: r.item_id)
    for r, chunk in zip(runs["base"], suite.chunks):
        tokens, lp, top = r.extra["tokens"], r.extra["lp"], r.extra["top"]
        assert "".join(tokens) == chunk and lp[0] is None and top[0] == {}
        assert all(x < 0 for x in lp[1:]) and all(len(t) >= 5 for t in top[1:])
        assert all(tok in t and t[tok] == x for tok, t, x in zip(tokens[1:], top[1:], lp[1:]))
        assert "alternatives" not in r.extra  # top-k alternatives: vLLM's shape
    assert math.isfinite(perplexity(runs["base"]))
    same = compare_chunks(runs["base"], runs["base2"])
    assert same.alternatives and same.kl.max() == 0.0 and same.top1.min() == 1.0
    shifted = compare_chunks(runs["base"], runs["q"])
    assert shifted.ids == ["0000", "0001"] and shifted.kl.min() > 0


def test_streaming_works_with_the_probe_client(serve):
    with serve("s", FakeEngineSpec(answers=ANSWERS, token_delay_s=0.001)) as ep:
        async def go(prompt, ignore_eos):
            async with connect(ep.base_url, ep.headers, 5, 1) as c:
                return await stream_one(c, ep.model, prompt, 8, ignore_eos=ignore_eos)

        res = asyncio.run(go("a prompt of some words", True))
        assert res.ok and res.output_tokens == 8 and len(res.itls) == 7 and res.tpot is not None
        assert res.prompt_tokens == 5
        known = json.loads((SUITES / "capitals.jsonl").read_text().splitlines()[0])["prompt"]
        assert asyncio.run(go(known, False)).output_tokens == 1  # "Paris", then it stops
        spec = ProbeSpec(enabled=True, concurrency=[1, 2], requests_per_step=4, output_tokens=4, warmup_requests=0)
        probe = run_probe(spec, ep, scrape_interval_s=0.05)
    assert [s.errors for s in probe.steps] == [0, 0]
    # the server's own view, read with the names the fake declares
    assert probe.steps[0].server["requests"] == 4 and probe.steps[0].server_note == ""


def test_token_id_prompts_are_refused_as_its_capabilities_say(serve, http):
    assert FakeEngine.capabilities.token_prompts is False
    with serve() as ep:
        r = http.post(ep.base_url + "/completions", json={"model": ep.model, "prompt": [101, 102], "max_tokens": 2})
    assert r.status_code == 400


def test_its_tokenize_route_gives_ids_its_completions_take_back(serve, http):
    """vLLM's /tokenize shape at the server's root; a prompt of those ids is the text's prompt."""
    text = "The river runs north of the city"
    with serve() as ep:
        root = ep.base_url.removesuffix("/v1")
        tok = http.post(root + "/tokenize", json={"model": ep.model, "prompt": text}).json()
        assert tok["count"] == len(tok["tokens"]) == 7 and tok["max_model_len"] == 2048
        asked = [http.post(ep.base_url + "/completions", json={"model": ep.model, "prompt": p, "max_tokens": 0,
                                                               "echo": True, "logprobs": 3}).json()
                 for p in (tok["tokens"][:4], " ".join(text.split()[:4]))]
    assert asked[0]["choices"][0]["logprobs"] == asked[1]["choices"][0]["logprobs"]
    assert asked[0]["choices"][0]["logprobs"]["tokens"] == ["The", " river", " runs", " north"]


def test_dies_after_k_requests_on_the_starts_it_is_told(serve, http):
    engine = serve("d", FakeEngineSpec(dies_after=3))
    body = {"model": "d", "prompt": "hello", "max_tokens": 2}
    with engine as ep:
        for _ in range(3):
            assert http.post(ep.base_url + "/completions", json=body, timeout=5).status_code == 200
        with pytest.raises(httpx.HTTPError):
            http.post(ep.base_url + "/completions", json=body, timeout=5)
        engine.server.proc.wait(timeout=5)
        assert engine.server.proc.returncode == 17 and not engine.health()
    with engine as ep:  # the second start plays no fault (fault_starts: [1])
        for _ in range(5):
            assert http.post(ep.base_url + "/completions", json=body, timeout=5).status_code == 200
    assert "die after 3 requests" in engine.log_path.read_text()


def test_hangs_after_k_requests_and_the_watchdog_finds_it(serve, http):
    engine = serve("h", FakeEngineSpec(hangs_after=2, watchdog_timeout_s=0.3))
    body = {"model": "h", "prompt": "hello", "max_tokens": 2}
    with engine as ep:
        root = ep.base_url.removesuffix("/v1")
        for _ in range(2):
            assert http.post(ep.base_url + "/completions", json=body, timeout=5).status_code == 200
        with pytest.raises(httpx.TimeoutException):
            http.post(ep.base_url + "/completions", json=body, timeout=0.5)
        with pytest.raises(httpx.TimeoutException):
            http.get(root + "/health", timeout=0.3)  # /health too: a stopped process answers nothing
        t0 = time.monotonic()
        while engine.hung is None:
            assert time.monotonic() - t0 < engine.watchdog.detects_within_s + 2
            time.sleep(0.05)
        assert "stopped answering" in engine.hung and not engine.health()


def test_a_slow_start_within_the_bound_and_beyond_it(serve):
    engine = serve("slow", FakeEngineSpec(start_delay_s=0.3), startup_timeout_s=5)
    with engine:
        assert 0.3 <= engine.startup_seconds < 1.3
    late = serve("late", FakeEngineSpec(start_delay_s=3), startup_timeout_s=0.3)
    with pytest.raises(EngineError, match="not healthy after"):
        late.start()
    assert late.server is None  # a failed start stops what it began


def test_stop_leaves_no_process(serve):
    engine = serve()
    engine.start()
    procs = [psutil.Process(p) for p in engine.server.pids()]
    engine.stop()
    engine.stop()  # twice is harmless
    assert procs and wait_gone(procs, timeout=5) == []


def test_a_bad_spec_names_its_file_and_key(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text(json.dumps({"qeval_fake": {"wrongg": ["a"]}}))
    v = VariantSpec(name="x", method="checkpoint", checkpoint=ck)
    with pytest.raises(ConfigError, match=r"config\.json:qeval_fake\.wrongg"):
        build_engine("fake", v, ck, EngineSpec(kind="fake"), Settings(cache=tmp_path), tmp_path)


def test_a_steady_warm_up_keeps_a_warming_server_out_of_the_figures(serve):
    """A server that starts 4x slower and warms over 40 requests: four fixed warm-up requests leave the first
    step slow; rounds until two agree within 10% wait it out (each round of 8 is >20% faster than the one
    before until it is warm), and the record says how long that took."""
    warming = FakeEngineSpec(token_delay_s=0.05, cold_requests=40, cold_factor=4.0)
    base = dict(enabled=True, concurrency=[2], requests_per_step=8, output_tokens=4, min_rounds_per_step=1)
    with serve("cold", warming) as ep:
        fixed = run_probe(ProbeSpec(**base, warmup_requests=4), ep, scrape_interval_s=0)
    with serve("warm", warming) as ep:
        settled = run_probe(ProbeSpec(**base, warmup_requests=4, warmup_until_steady=0.1, warmup_max_seconds=60),
                            ep, scrape_interval_s=0)
    assert fixed.warmup.steady is None and fixed.warmup.requests == 4
    w = settled.warmup
    assert w.steady is True and w.concurrency == 2 and w.requests >= 40 and len(w.rounds_tok_s) >= 3
    assert w.rounds_tok_s[-1] > 2 * w.rounds_tok_s[0]  # it was warming while it ran
    # warm TPOT is the 20 ms token delay; the fixed warm-up measured the server still warming
    cold_tpot, warm_tpot = fixed.steps[0].tpot_ms["mean"], settled.steps[0].tpot_ms["mean"]
    assert warm_tpot < 0.75 * cold_tpot, (cold_tpot, warm_tpot)
    assert settled.to_json()["warmup"]["rounds_tok_s"] == w.rounds_tok_s


def test_a_warm_up_that_never_settles_stops_at_its_time_and_says_so(serve):
    """Warming over 100 requests from 8x slower: each round of 8 is ~8% faster than the last, never within 1%
    in the ~3 rounds that 2 s allow."""
    with serve("slow", FakeEngineSpec(token_delay_s=0.01, cold_requests=100, cold_factor=8.0)) as ep:
        res = run_probe(ProbeSpec(enabled=True, concurrency=[2], requests_per_step=4, output_tokens=4,
                                  warmup_requests=0, warmup_until_steady=0.01, warmup_max_seconds=2), ep,
                        scrape_interval_s=0)
    assert res.warmup.steady is False and res.warmup.seconds >= 2 and len(res.warmup.rounds_tok_s) >= 1
