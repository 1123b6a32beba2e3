"""Malformed input, collected: each case gives one ConfigError naming the file and the place.

A subset goes through the CLI as well (exit 2, one line, nothing written); the rest call the same
loaders in-process to keep the suite fast. Then bounded fuzzing of the parsers with hypothesis.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qeval.pipeline.plan import plan
from qeval.config import load_config
from qeval.errors import ConfigError, MissingEnvError
from qeval.settings import Settings
from qeval.suites.custom import load_items
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parent.parent
ITEM = {"id": "a", "prompt": "What is 2 + 2?", "reference": "4"}


def workspace(tmp_path: Path) -> dict[str, Path]:
    """A valid campaign (c.yaml) with its own suite (s.yaml + items.jsonl) and policy (p.yaml)."""
    (tmp_path / "items.jsonl").write_text(json.dumps(ITEM) + "\n" + json.dumps({**ITEM, "id": "b"}) + "\n")
    (tmp_path / "s.yaml").write_text("name: s\nitems: items.jsonl\nscorers: [{kind: exact}]\n")
    (tmp_path / "p.yaml").write_text("rules: [{match: '*', margin: 0.05}]\n")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    campaign_file(tmp_path, model={"path": "ck"}, variants=[{"name": "q", "method": "gptq"}],
                  suites=[{"kind": "custom", "path": "s.yaml"}], gates="p.yaml")
    return {"config": tmp_path / "c.yaml", "suite": tmp_path / "s.yaml", "items": tmp_path / "items.jsonl",
            "policy": tmp_path / "p.yaml"}


def edit_yaml(path: Path, fn) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))


def cfg(fn):
    return lambda w: edit_yaml(w["config"], fn)


def suite(fn):
    return lambda w: edit_yaml(w["suite"], fn)


def policy(fn):
    return lambda w: edit_yaml(w["policy"], fn)


def items(lines: list[bytes]):
    return lambda w: w["items"].write_bytes(b"\n".join(lines) + b"\n")


def text(key: str, content: bytes):
    return lambda w: w[key].write_bytes(content)


OK = json.dumps(ITEM).encode()

# (case, mutation, the file it must name, what the message must say)
CASES = [
    ("unknown top-level key", cfg(lambda d: d.update(extra=1)), "config", "extra: unknown key"),
    ("misspelled variant key", cfg(lambda d: d["variants"][0].update(methd="x")), "config", "variants.0.methd"),
    ("name not a string", cfg(lambda d: d.update(name=123)), "config", "name"),
    ("name with spaces", cfg(lambda d: d.update(name="bad name!")), "config", "name"),
    ("unknown method", cfg(lambda d: d["variants"][0].update(method="gptq8")), "config", "variants.0.method"),
    ("quantized baseline", cfg(lambda d: d["baseline"].update(method="awq")), "config", "baseline"),
    ("duplicate variant names", cfg(lambda d: d["variants"].append({"name": "q", "method": "awq"})), "config", "unique"),
    ("no variants", cfg(lambda d: d.update(variants=[])), "config", "variants"),
    ("no suites", cfg(lambda d: d.update(suites=[])), "config", "suites"),
    ("suite without kind", cfg(lambda d: d["suites"][0].pop("kind")), "config", "suites.0"),
    ("unknown suite kind", cfg(lambda d: d["suites"][0].update(kind="bogus")), "config", "suites.0"),
    ("custom suite file missing", cfg(lambda d: d["suites"][0].update(path="nope.yaml")), "config", "does not exist"),
    ("lm-eval without tasks", cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": []})), "config", "tasks"),
    ("lm-eval limit 0", cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["x"], "limit": 0})), "config",
     "limit"),
    ("lm-eval include path missing",
     cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["x"], "include_path": "nowhere"})), "config",
     "does not exist"),
    ("lm-eval task not in include path",
     cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["oe_nope"], "include_path": str(ROOT / "suites/lmeval")})),
     "config", "oe_nope"),
    ("lm-eval scoring unknown",
     cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["x"], "scoring": ["next_tokens"]})), "config",
     "suites.1.scoring.0"),
    ("lm-eval scoring named twice",
     cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["x"], "scoring": ["next_token", "next_token"]})),
     "config", "names one twice"),
    ("lm-eval next-token scoring of a generate task",
     cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["oe_addition"], "scoring": ["next_token"],
                                       "include_path": str(ROOT / "suites/lmeval")})), "config",
     "suites: lm_eval.scoring: scoring next_token scores multiple-choice answers, and task 'oe_addition' has "
     "output_type generate_until"),
    ("lm-eval next-token scoring of a task without a local YAML",
     cfg(lambda d: d["suites"].append({"kind": "lm_eval", "tasks": ["arc_easy"], "scoring": ["next_token"]})),
     "config", "task 'arc_easy' has no local task YAML that says its output_type"),
    ("KV cache not whole GiB", cfg(lambda d: d.update(engine={"kv_cache_gib": 1.5})), "config", "engine.kv_cache_gib"),
    ("negative timeout", cfg(lambda d: d.update(engine={"startup_timeout_s": -1})), "config", "engine.startup_timeout_s"),
    ("engine unknown key", cfg(lambda d: d.update(engine={"gpu": True})), "config", "engine.gpu"),
    ("engine tgi for a checkpoint", cfg(lambda d: d["variants"][0].update(engine={"kind": "tgi"})), "config",
     "variant q: engine.kind: qeval starts no TGI server"),
    ("engine tgi with lm-eval", cfg(lambda d: (d["variants"][0].update(method="external", endpoint="http://h:8080",
                                                                      engine={"kind": "tgi"}),
                                               d["suites"].append({"kind": "lm_eval", "tasks": ["x"]}))), "config",
     "variant q: engine.kind: lm-eval's local-completions sends token ids"),
    ("engine tgi with a long-document logprobs suite",
     cfg(lambda d: (d["variants"][0].update(method="external", endpoint="http://h:8080", engine={"kind": "tgi"}),
                    d["suites"].append({"kind": "logprobs", "corpus": "stdlib", "document_tokens": 1024}))), "config",
     "variant q: engine.kind: TGI has no tokenize route"),
    ("long documents above the served context",
     cfg(lambda d: d["suites"].append({"kind": "logprobs", "corpus": "stdlib", "document_tokens": 4096})), "config",
     "suites[1].document_tokens: document_tokens 4096 exceeds the context a variant is served with"),
    ("needle prompts above the served context",
     cfg(lambda d: d["suites"].append({"kind": "needle", "lengths": [1024, 4096]})), "config",
     "suites[1].lengths: a needle prompt of 4096 tokens and its answer of max_tokens 12 exceed the context"),
    ("needle depths out of order", cfg(lambda d: d["suites"].append({"kind": "needle", "depths": [0.5, 0.1]})),
     "config", "depths: [0.5, 0.1] must rise"),
    ("more chunks than the corpus holds",
     cfg(lambda d: d["suites"].append({"kind": "logprobs", "corpus": "pydoc", "chunks": 5000})), "config",
     "suites: logprobs: chunks: corpus pydoc holds"),
    ("model path and builtin", cfg(lambda d: d["model"].update(builtin="smollm2-135m-instruct")), "config", "model"),
    ("model without source", cfg(lambda d: d.update(model={})), "config", "model"),
    ("model path missing", cfg(lambda d: d.update(model={"path": "nope"})), "config", "model.path"),
    ("checkpoint variant without path", cfg(lambda d: d["variants"][0].update(method="checkpoint")), "config",
     "needs `checkpoint`"),
    ("checkpoint path missing",
     cfg(lambda d: d["variants"][0].update(method="checkpoint", checkpoint="nope")), "config", "does not exist"),
    ("checkpoint without config.json",
     cfg(lambda d: d["variants"][0].update(method="checkpoint", checkpoint=".")), "config", "has no config.json"),
    ("external without endpoint", cfg(lambda d: d["variants"][0].update(method="external")), "config", "endpoint"),
    ("endpoint on a served variant", cfg(lambda d: d["variants"][0].update(endpoint="http://x")), "config", "endpoint"),
    ("recipe group size 0", cfg(lambda d: d["variants"][0].update(recipe={"group_size": 0})), "config",
     "variants.0.recipe.group_size"),
    ("probe SLO unknown", cfg(lambda d: d.update(probe={"slo": {"ttft_p42": 1}})), "config", "probe.slo"),
    ("probe without levels", cfg(lambda d: d.update(probe={"concurrency": []})), "config", "probe.concurrency"),
    ("grid on an unknown variant", cfg(lambda d: d.update(grid={"variants": ["qq"], "engine": {"max_num_seqs": [2]},
                                                                "concurrency": [1]})), "config",
     "grid: grid.variants lists 'qq', which is not a variant of this campaign (did you mean 'q'?)"),
    ("mlflow unknown key", cfg(lambda d: d.update(mlflow={"uri": "x"})), "config", "mlflow.uri"),
    ("logprobs corpus missing", cfg(lambda d: d["suites"].append({"kind": "logprobs", "corpus": "nope.txt"})), "config",
     "corpus"),
    ("logprobs top_k too large", cfg(lambda d: d["suites"].append({"kind": "logprobs", "top_k": 50})), "config",
     "top_k"),
    ("config is a list", text("config", b"- a\n- b\n"), "config", "expected a mapping"),
    ("config is empty", text("config", b""), "config", "expected a mapping"),
    ("config not YAML", text("config", b"name: [unclosed\n"), "config", "not valid YAML"),
    ("config not UTF-8", text("config", b"name: \xff\xfe\n"), "config", "not UTF-8"),
    ("unset environment variable", text("config", b"name: ${QEVAL_SURELY_UNSET}\n"), "config", "QEVAL_SURELY_UNSET"),
    ("policy file missing", cfg(lambda d: d.update(gates="nope.yaml")), "config", "gates: gate policy"),
    ("policy unknown key", policy(lambda d: d.update(rulez=[])), "policy", "rulez: unknown key"),
    ("policy alpha out of range", policy(lambda d: d["rules"][0].update(alpha=0.7)), "policy", "rules.0.alpha"),
    ("policy unknown mode", policy(lambda d: d["rules"][0].update(mode="better")), "policy", "rules.0.mode"),
    ("performance rule with two bounds",
     policy(lambda d: d.update(performance=[{"metric": "weights_bytes", "min_ratio": 1, "max_ratio": 2}])), "policy",
     "performance.0"),
    ("performance metric unknown", policy(lambda d: d.update(performance=[{"metric": "speed", "min_ratio": 1}])),
     "policy", "performance.0.metric"),
    ("descriptor unknown key", suite(lambda d: d.update(scorer=[])), "suite", "scorer: unknown key"),
    ("unknown scorer", suite(lambda d: d.update(scorers=[{"kind": "exakt"}])), "suite", "Did you mean 'exact'"),
    ("regex scorer without pattern", suite(lambda d: d.update(scorers=[{"kind": "regex"}])), "suite", "pattern"),
    ("regex scorer bad pattern", suite(lambda d: d.update(scorers=[{"kind": "regex", "pattern": "("}])), "suite",
     "bad pattern"),
    ("primary not a scorer", suite(lambda d: d.update(primary="f1")), "suite", "primary"),
    ("json_schema with an invalid schema",
     suite(lambda d: d.update(scorers=[{"kind": "json_schema", "schema": {"type": "integr"}}])), "suite",
     "scorer 'json_schema': not a valid JSON Schema at $.type"),
    ("json_schema without a schema", suite(lambda d: d.update(scorers=[{"kind": "json_schema"}])), "suite",
     "exactly one of `schema` or `schema_file`"),
    ("json_schema schema file missing",
     suite(lambda d: d.update(scorers=[{"kind": "json_schema", "schema_file": "nope.json"}])), "suite",
     "scorers.0.schema_file"),
    ("python scorer module missing",
     suite(lambda d: d.update(scorers=[{"kind": "python", "callable": "qeval_no_such_module:score"}])), "suite",
     "cannot import 'qeval_no_such_module'"),
    ("python scorer not callable",
     suite(lambda d: d.update(scorers=[{"kind": "python", "callable": "qeval.errors:EXIT_USAGE"}])), "suite",
     "is not callable"),
    ("python scorer without callable", suite(lambda d: d.update(scorers=[{"kind": "python"}])), "suite",
     "needs `callable"),
    ("samples at temperature 0", suite(lambda d: d.update(generation={"samples": 3})), "suite",
     "generation: samples: 3 needs temperature > 0"),
    ("two scorers of one name", suite(lambda d: d.update(scorers=[{"kind": "exact"}, {"kind": "exact"}])), "suite",
     "give `name:`"),
    ("descriptor items missing", suite(lambda d: d.update(items="nope.jsonl")), "suite", "items: items file"),
    ("descriptor is a string", text("suite", b"just text\n"), "suite", "expected a mapping"),
    ("item line not JSON", items([OK, b"{not json"]), "items", "line 2: not valid JSON"),
    ("duplicate item id", items([OK, OK]), "items", "line 2: duplicate id 'a'"),
    ("empty items file", items([b""]), "items", "no items"),
    ("item line not UTF-8", items([OK, b'{"id": "\xff"}']), "items", "line 2: not UTF-8"),
    ("huge item line", items([OK, b'{"id": "h", "prompt": "' + b"x" * (1 << 20) + b'", "reference": "r"}']), "items",
     "line 2: line is"),
    ("NaN in an item", items([OK, b'{"id": "n", "prompt": "p", "reference": NaN}']), "items", "NaN is not allowed"),
    ("item without reference", items([OK, b'{"id": "b", "prompt": "p"}']), "items", "line 2: reference"),
    ("item with prompt and messages",
     items([OK, b'{"id": "b", "prompt": "p", "messages": [{"role": "user", "content": "x"}], "reference": "r"}']),
     "items", "exactly one of"),
    ("item is an array", items([OK, b"[1, 2]"]), "items", "expected a JSON object"),
    ("item id empty", items([OK, b'{"id": "", "prompt": "p", "reference": "r"}']), "items", "line 2: id"),
    ("message content not text",
     items([OK, b'{"id": "b", "messages": [{"role": "user", "content": 5}], "reference": "r"}']), "items",
     "line 2: messages.0.content"),
    ("item unknown key", items([OK, b'{"id": "b", "prompt": "p", "reference": "r", "answer": 1}']), "items",
     "line 2: answer: unknown key"),
    # an unknown key names the closest one its spec takes, wherever it is
    ("recipe key misspelled", cfg(lambda d: d["variants"][0].update(recipe={"group_sise": 32})), "config",
     "variants.0.recipe.group_sise: unknown key (did you mean 'group_size'?)"),
    ("engine key misspelled", cfg(lambda d: d.update(engine={"max_num_seq": 4})), "config",
     "engine.max_num_seq: unknown key (did you mean 'max_num_seqs'?)"),
    ("probe key misspelled", cfg(lambda d: d.update(probe={"concurency": [1]})), "config",
     "probe.concurency: unknown key (did you mean 'concurrency'?)"),
    ("suite ref key misspelled", cfg(lambda d: d["suites"][0].update(concurency=4)), "config",
     "suites.0.concurency: unknown key (did you mean 'concurrency'?)"),
    ("policy rule key misspelled", policy(lambda d: d["rules"][0].update(marign=0.1)), "policy",
     "rules.0.marign: unknown key (did you mean 'margin'?)"),
    ("generation key misspelled", suite(lambda d: d.update(generation={"max_token": 8})), "suite",
     "generation.max_token: unknown key (did you mean 'max_tokens'?)"),
    # each kind takes its own settings only
    ("engine kind unknown", cfg(lambda d: d.update(engine={"kind": "vlm"})), "config",
     "engine.kind: unknown engine 'vlm'. Did you mean 'vllm'?"),
    ("engine kind of another's key", cfg(lambda d: d.update(engine={"kind": "tgi", "kv_cache_gib": 4})), "config",
     "engine.kv_cache_gib: unknown key"),
    ("engine kind external for a checkpoint", cfg(lambda d: d["variants"][0].update(engine={"kind": "external"})),
     "config", "variant q: engine kind external is an endpoint someone else runs"),
    ("quantizer unknown", cfg(lambda d: d["variants"][0].update(quantizer="llmcompresor")), "config",
     "variants.0.quantizer: unknown quantizer 'llmcompresor'. Did you mean 'llmcompressor'?"),
    ("quantizer for another method", cfg(lambda d: d["variants"][0].update(quantizer="modelopt")), "config",
     "variants.0: quantizer modelopt makes method fp8 only"),
    ("numeric scorer with a pattern", suite(lambda d: d.update(scorers=[{"kind": "numeric", "pattern": "x"}])),
     "suite", "scorers.0.pattern: unknown key"),
    ("exact scorer with a tolerance", suite(lambda d: d.update(scorers=[{"kind": "exact", "tolerance": 0.1}])),
     "suite", "scorers.0.tolerance: unknown key"),
    ("scorer without kind", suite(lambda d: d.update(scorers=[{"name": "x"}])), "suite",
     "scorers.0.kind: required key is missing"),
    # a per-variant engine override is checked where it is written
    ("engine override of a wrong type", cfg(lambda d: d["variants"][0].update(engine={"max_model_len": "x"})),
     "config", "variants.0.engine.max_model_len: Input should be a valid integer"),
    ("engine override key misspelled", cfg(lambda d: d["variants"][0].update(engine={"kv_cache_gb": 4})), "config",
     "variants.0.engine.kv_cache_gb: unknown key (did you mean 'kv_cache_gib'?)"),
    ("engine override of another kind's key",
     cfg(lambda d: d["variants"][0].update(engine={"kind": "trtllm", "device": "gpu", "kv_cache_gib": 4})), "config",
     "variants.0.engine.kv_cache_gib: unknown key"),
    ("engine override kind unknown", cfg(lambda d: d["variants"][0].update(engine={"kind": "trt"})), "config",
     "variants.0.engine.kind: unknown engine 'trt'. Did you mean"),
]


@pytest.mark.parametrize("case, mutate, names, says", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_gives_one_clear_error(tmp_path, case, mutate, names, says):
    w = workspace(tmp_path)
    mutate(w)
    with pytest.raises(ConfigError) as e:
        c = load_config(w["config"])
        plan(c, Settings(cache=tmp_path / "cache"), str(w["config"]))
    msg = str(e.value)
    file = w[names]
    assert str(file) in msg or str(file.name) in msg, msg
    assert says in msg, msg
    assert "\n" not in msg.strip()
    assert "Value error" not in msg and "Assertion failed" not in msg  # pydantic's prefixes are not the user's
    assert not (tmp_path / "runs").exists()


def test_there_are_at_least_fifty_cases():
    assert len(CASES) >= 50


@pytest.mark.parametrize("case", ["misspelled variant key", "item line not JSON", "policy alpha out of range",
                                  "lm-eval next-token scoring of a generate task"])
def test_through_the_cli_exit_2(tmp_path, case):
    _, mutate, _, says = next(c for c in CASES if c[0] == case)
    w = workspace(tmp_path)
    mutate(w)
    r = subprocess.run([sys.executable, "-m", "qeval.cli", "run", str(w["config"])], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=5),
                    max_leaves=30))
def test_fuzz_config_parser_only_raises_config_errors(tmp_path, data):
    p = tmp_path / "fuzz.yaml"
    p.write_text(yaml.safe_dump({"name": "t", **data} if isinstance(data, dict) else data))
    try:
        load_config(p)
    except ConfigError as e:
        assert "fuzz.yaml" in str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=80) | st.builds(lambda d: json.dumps(d).encode(),
                                                     st.dictionaries(st.sampled_from(["id", "prompt", "reference",
                                                                                      "messages", "group", "x"]),
                                                                     st.text(max_size=8) | st.integers(), max_size=5)),
                max_size=6))
def test_fuzz_items_parser_only_raises_config_errors(tmp_path, lines):
    p = tmp_path / "fuzz.jsonl"
    p.write_bytes(b"\n".join(lines))
    try:
        got = load_items(p)
        assert len({i.id for i in got}) == len(got)
    except ConfigError as e:
        assert "fuzz.jsonl" in str(e)


def test_a_bad_suite_is_bad_input_even_where_make_setup_never_ran(tmp_path):
    # the embedded model is missing from this cache (exit 3), but the suite is wrong whatever the machine (exit 2)
    w = workspace(tmp_path)
    cfg(lambda d: d.update(model={"builtin": "smollm2-135m-instruct"}))(w)
    suite(lambda d: d.update(scorers=[{"kind": "exact", "pattern": "x"}]))(w)
    with pytest.raises(ConfigError, match="s.yaml"):
        plan(load_config(w["config"]), Settings(cache=tmp_path / "empty"), str(w["config"]))
    suite(lambda d: d.update(scorers=[{"kind": "exact"}]))(w)
    with pytest.raises(MissingEnvError, match="smollm2-135m-instruct"):
        plan(load_config(w["config"]), Settings(cache=tmp_path / "empty"), str(w["config"]))
