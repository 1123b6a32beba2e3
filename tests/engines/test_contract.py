"""Every registered engine keeps the lifecycle contract (engines/base.py: Engine) and declares what it can
serve (engines/capabilities.py); suites and the probe ask the endpoint's capabilities, never its name."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from qeval.config import EngineSpec, ProbeSpec, VariantSpec
from qeval.engines import Endpoint, EngineMemory
from qeval.engines.base import Engine, build_engine, known_metric_names
from qeval.engines.capabilities import Capabilities, EchoLogprobs, MetricNames
from qeval.engines.fake import write_checkpoint
from qeval.engines.registry import ENGINES
from qeval.engines.tgi import METRICS as TGI
from qeval.engines.tgi import TgiEngine
from qeval.engines.vllm import METRICS as VLLM
from qeval.errors import ConfigError
from qeval.probe.latency import _prompts
from qeval.probe.server_metrics import server_view
from qeval.settings import Settings
from qeval.suites.logprobs import LogprobsSuite, run_logprobs
from tests.loopback import Loopback, js

QEVAL = Path(__file__).resolve().parents[2] / "qeval"
BUILT_BY = ("variant", "checkpoint", "spec", "settings", "log_dir")  # what build_engine passes, by keyword


def _built(kind: str, tmp_path: Path):
    """An instance of the registered class, as build_engine makes it (nothing started)."""
    cls = ENGINES.get(kind)
    ck = write_checkpoint(tmp_path / "ck")
    if cls.capabilities.starts_server:
        variant = VariantSpec(name="v", method="checkpoint", checkpoint=ck)
    else:  # an endpoint someone else runs (nothing listens on port 9)
        variant = VariantSpec(name="v", method="external", endpoint="http://127.0.0.1:9/v1")
    spec = EngineSpec.model_construct(kind=kind)  # the common settings at their defaults, for a plugin's kind too
    return build_engine(kind, variant, ck, spec, Settings(cache=tmp_path), tmp_path / "logs")


@pytest.mark.parametrize("kind", ENGINES.names())
def test_every_registered_engine_keeps_the_lifecycle_contract(kind, tmp_path):
    cls = ENGINES.get(kind)
    assert cls.kind == kind
    params = inspect.signature(cls).parameters
    assert all(params[p].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for p in BUILT_BY)
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    assert required <= set(BUILT_BY), f"{kind} needs {required - set(BUILT_BY)}, which build_engine never passes"
    engine = _built(kind, tmp_path)
    assert isinstance(engine, Engine)
    assert engine.name == "v" and engine.hung is None and engine.startup_seconds is None
    assert engine.log_path is None or isinstance(engine.log_path, Path)
    assert isinstance(engine.memory(), EngineMemory)  # before any start: what it can tell, no error
    engine.stop()  # before any start: harmless
    assert engine.health() is False


@pytest.mark.parametrize("kind", ENGINES.names())
def test_every_registered_engine_declares_its_capabilities(kind):
    caps = ENGINES.get(kind).capabilities
    assert isinstance(caps, Capabilities)
    assert caps.prompt_logprobs is None or isinstance(caps.prompt_logprobs.alternatives, bool)
    assert caps.metrics is None or all(isinstance(t, MetricNames) for t in caps.metrics)
    assert set(caps.memory) <= {f.name for f in dataclasses.fields(EngineMemory)}


def test_a_hand_built_endpoint_gets_its_engine_kinds_capabilities():
    assert Endpoint(base_url="http://h/v1", model="m", tokenizer=None, engine="tgi").capabilities \
        is TgiEngine.capabilities
    own = Capabilities(token_prompts=False)
    assert Endpoint(base_url="http://h/v1", model="m", tokenizer=None, engine="vllm", capabilities=own).capabilities \
        is own


@dataclass(frozen=True)
class ScoreRoute:
    """A made-up engine's route to prompt logprobs: its own path and body."""

    alternatives: bool = True

    def request(self, endpoint, text, k):
        return "/score", {"text": text, "k": k}

    def parse(self, body):
        return body["lp"]


def test_the_logprobs_suite_takes_the_route_the_endpoint_declares():
    lp = {"tokens": ["a", " b"], "token_logprobs": [None, -1.0], "top_logprobs": [None, {" b": -1.0, " c": -2.0}]}
    server = Loopback({"POST /v1/score": js({"lp": lp})})
    with server as root:
        ep = Endpoint(base_url=root + "/v1", model="m", tokenizer=None, engine="vllm",
                      capabilities=Capabilities(prompt_logprobs=ScoreRoute()))
        got = []
        run_logprobs(LogprobsSuite(name="c", chunks=["a b"], top_k=2, key="k"), ep, set(), got.extend)
    assert [route for route, _ in server.seen] == ["POST /v1/score"]
    assert json.loads(server.seen[0][1]) == {"text": "a b", "k": 2}
    assert got[0].extra["tokens"] == ["a", " b"] and "alternatives" not in got[0].extra


def test_an_engine_without_prompt_logprobs_is_refused_not_asked():
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", tokenizer=None, engine="trtllm")
    assert ep.prompt_logprobs is False
    with pytest.raises(ConfigError, match="serves no prompt logprobs"):
        run_logprobs(LogprobsSuite(name="c", chunks=["a b"], top_k=2, key="k"), ep, set(), lambda r: None)


def test_the_vllm_route_sends_the_request_it_always_sent():
    ep = Endpoint(base_url="http://h/v1", model="m", tokenizer=None, engine="vllm")
    assert ep.capabilities.prompt_logprobs == EchoLogprobs()
    assert ep.capabilities.prompt_logprobs.request(ep, "text", 10) == (
        "/completions", {"model": "m", "prompt": "text", "max_tokens": 0, "echo": True, "logprobs": 10,
                         "temperature": 0.0})


def test_the_server_view_reads_the_names_the_engine_declares():
    mine = MetricNames(engine="mine", label="Mine", means={"e2e": ("mine_request_seconds",)}, gauges={}, counters={})

    def text(total: float, count: int) -> str:
        return (f"# TYPE mine_request_seconds histogram\nmine_request_seconds_bucket{{le=\"+Inf\"}} {count}\n"
                f"mine_request_seconds_sum {total}\nmine_request_seconds_count {count}\n")

    v = server_view(text(1.0, 2), text(3.0, 6), tables=(mine,))
    assert v.engine == "mine" and v.figures == {"e2e_mean_ms": 500.0, "requests": 4.0}
    assert server_view(text(1.0, 2), text(3.0, 6), tables=(VLLM,)).figures == {}  # not a name vLLM serves
    assert "none of the vLLM metrics" in server_view(text(1.0, 2), text(3.0, 6), tables=(VLLM,)).note
    assert VLLM in known_metric_names() and TGI in known_metric_names()  # a server of unknown kind: any of them


def test_probe_prompts_are_text_where_the_engine_takes_text_only(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1000}))
    spec = ProbeSpec(prompt_tokens=4)
    ids = Endpoint(base_url="http://h/v1", model="m", tokenizer=tmp_path, engine="vllm")
    text = dataclasses.replace(ids, capabilities=Capabilities(token_prompts=False))
    assert all(isinstance(p, list) for p in _prompts(spec, ids, 3, 0))
    assert all(isinstance(p, str) for p in _prompts(spec, text, 3, 0))


def test_no_suite_or_probe_module_branches_on_an_engine_name():
    kinds = "|".join(map(re.escape, ENGINES.names()))
    branch = re.compile(rf"""[!=]=\s*["']({kinds})["']|["']({kinds})["']\s*[!=]=""")
    found = [f"{p.relative_to(QEVAL)}:{n}: {line.strip()}" for folder in ("suites", "probe")
             for p in sorted((QEVAL / folder).rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if branch.search(line)]
    assert found == []
