"""Several samples per item: seeds, the per-item mean, the stored evidence, and resuming without double counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qeval.config import GenerationSpec
from qeval.engines import Endpoint
from qeval.errors import ConfigError, EngineError, QevalError
from qeval.record.store import ResultsStore
from qeval.suites.custom import load_suite, run_custom, sample_seeds
from qeval.verdict.comparison import compare_metric
from qeval.verdict.pairing import align
from qeval.verdict.policy import GatePolicy, GateRule

from ..loopback import Loopback, js

ITEMS = [{"id": "a", "prompt": "Capital of France?", "reference": "Paris"},
         {"id": "b", "prompt": "Capital of Italy?", "reference": "Rome"},
         {"id": "c", "prompt": "Capital of Spain?", "reference": "Madrid"}]


def test_seeds_come_from_the_item_and_the_sample():
    assert sample_seeds("a", 1) == [0]  # one greedy sample: the request as it always was
    three = sample_seeds("a", 3)
    assert three == sample_seeds("a", 3) and len(set(three)) == 3
    assert sample_seeds("a", 2) == three[:2]  # a sample's seed does not depend on how many there are
    assert set(sample_seeds("b", 3)).isdisjoint(three)
    assert all(0 <= s < 2**31 for s in three)


def test_samples_need_temperature():
    with pytest.raises(ValueError, match="samples: 2 needs temperature > 0"):
        GenerationSpec(samples=2)
    assert GenerationSpec(samples=2, temperature=0.7).samples == 2


def write_suite(tmp_path: Path, generation: dict) -> Path:
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    d = tmp_path / "s.yaml"
    d.write_text(json.dumps({"name": "s", "items": "items.jsonl", "generation": generation,
                             "scorers": [{"kind": "contains"}, {"kind": "exact"}]}))
    return d


def test_samples_change_the_key_only_when_set(tmp_path):
    base = load_suite(write_suite(tmp_path, {"temperature": 0.8})).key
    assert load_suite(write_suite(tmp_path, {"temperature": 0.8, "samples": 1})).key == base
    assert load_suite(write_suite(tmp_path, {"temperature": 0.8, "samples": 2})).key != base


class FakeChat:
    """Answers the reference for the seeds in `right`, a wrong city for the others; 500 for those in `broken`."""

    def __init__(self, right: set[int], broken: set[int] = frozenset()):
        self.right, self.broken = right, set(broken)

    def __call__(self, body: bytes):
        req = json.loads(body)
        if req["seed"] in self.broken:
            return js({"error": "boom"}, status=500)
        ref = next(i["reference"] for i in ITEMS if i["prompt"] == req["messages"][0]["content"])
        text = ref if req["seed"] in self.right else "London"
        return js({"choices": [{"message": {"role": "assistant", "content": text}}]})


def endpoint(root: str) -> Endpoint:
    return Endpoint(base_url=root + "/v1", model="m", tokenizer=None, engine="vllm")


def test_each_sample_is_scored_and_the_item_gets_the_mean(tmp_path):
    suite = load_suite(write_suite(tmp_path, {"temperature": 0.8, "samples": 2}))
    a, b, c = (sample_seeds(i["id"], 2) for i in ITEMS)
    server = Loopback({"POST /v1/chat/completions": FakeChat(right={*a, b[1]})})
    got = []
    with server as root:
        assert run_custom(suite, endpoint(root), set(), got.extend, concurrency=4) == 3
    recs = {r.item_id: r for r in got}
    assert {i: r.scores for i, r in recs.items()} == {"a": {"contains": 1.0, "exact": 1.0},
                                                      "b": {"contains": 0.5, "exact": 0.5},
                                                      "c": {"contains": 0.0, "exact": 0.0}}
    assert recs["b"].extra["samples"] == [
        {"seed": b[0], "response": "London", "scores": {"contains": 0.0, "exact": 0.0}},
        {"seed": b[1], "response": "Rome", "scores": {"contains": 1.0, "exact": 1.0}}]
    assert recs["b"].response == "London" and all(r.sample == 0 for r in got)
    sent = sorted(json.loads(body)["seed"] for _, body in server.seen)
    assert sent == sorted(a + b + c)
    assert all(json.loads(body)["temperature"] == 0.8 for _, body in server.seen)
    # the seeds are part of what was asked: the prompt hash differs from a one-sample run's
    (tmp_path / "one").mkdir()
    one = load_suite(write_suite(tmp_path / "one", {"temperature": 0.8}))
    with Loopback({"POST /v1/chat/completions": FakeChat(right=set())}) as root:
        single = []
        run_custom(one, endpoint(root), set(), single.extend)
    assert {r.prompt_hash for r in single}.isdisjoint(r.prompt_hash for r in got)
    assert all(r.extra == {} for r in single)


def test_a_resumed_run_stores_each_item_once_with_all_its_samples(tmp_path):
    suite = load_suite(write_suite(tmp_path, {"temperature": 0.8, "samples": 2}))
    b = sample_seeds("b", 2)
    fake = FakeChat(right=set(), broken={b[1]})  # item b's second sample fails, its first succeeds
    store = ResultsStore(tmp_path / "r.sqlite")
    sink = lambda recs: store.put("v", suite.key, "v", "custom/s", recs)  # noqa: E731
    with Loopback({"POST /v1/chat/completions": fake}) as root:
        with pytest.raises(EngineError, match="item 'b' failed after 1 tries"):
            run_custom(suite, endpoint(root), set(), sink, retries=0)
        assert store.done_ids("v", suite.key) == {"a", "c"}  # nothing of b: not half an item
        fake.broken.clear()
        assert run_custom(suite, endpoint(root), store.done_ids("v", suite.key), sink) == 1
    recs = store.records("v", suite.key)
    assert [r.item_id for r in recs] == ["a", "b", "c"] and store.count() == 3
    assert [s["seed"] for s in recs[1].extra["samples"]] == b


def test_a_scorer_error_in_a_run_names_the_descriptor_and_item(tmp_path):
    d = write_suite(tmp_path, {"temperature": 0.8, "samples": 2})
    d.write_text(d.read_text().replace('{"kind": "exact"}', '{"kind": "python", "callable": "math:log"}'))
    suite = load_suite(d)
    with Loopback({"POST /v1/chat/completions": FakeChat(right=set())}) as root:
        with pytest.raises(ConfigError, match=rf"^{d}:scorer 'python': failed on item '[abc]': TypeError"):
            run_custom(suite, endpoint(root), set(), lambda recs: None)


def test_sample_means_are_compared_as_continuous_scores(tmp_path):
    """A suite declares its metrics: a scorer's 0/1 score, averaged over two samples, is continuous."""
    from qeval.record.store import Record

    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir()
    one = load_suite(write_suite(tmp_path / "one", {"max_tokens": 4}))
    two = load_suite(write_suite(tmp_path / "two", {"samples": 2, "temperature": 0.7, "max_tokens": 4}))
    assert one.metrics()["contains"].binary and not two.metrics()["contains"].binary
    assert two.metrics()["contains"].higher_is_better
    base = [Record(item_id=str(i), scores={"contains": s}) for i, s in enumerate([1, 0.5, 1, 0, 0.5, 1, 1, 0.5] * 4)]
    cand = [Record(item_id=str(i), scores={"contains": s}) for i, s in enumerate([1, 0.5, 0.5, 0, 0.5, 1, 0.5, 0] * 4)]
    c = compare_metric("q", "custom/s", "contains", True, align("s", base, cand), GateRule(), GatePolicy(),
                       spec=two.metrics()["contains"])
    assert not c.binary and c.p_method and "wilcoxon" in c.p_method.lower() and c.flips_base_only is None
    assert c.delta == pytest.approx(-0.1875)
    with pytest.raises(QevalError, match="declared 0/1"):  # a declaration the scores contradict is an error
        compare_metric("q", "custom/s", "contains", True, align("s", base, cand), GateRule(), GatePolicy(),
                       spec=one.metrics()["contains"])


def test_an_item_hashes_by_what_it_says():
    from qeval.suites.custom import Item, _doc_hash

    class Later(Item):  # as if a newer qeval added a field to items
        weight: float = 1.0

    plain = Item(id="1", prompt="p", reference="r")
    assert _doc_hash(Later(id="1", prompt="p", reference="r")) == _doc_hash(plain)  # unset: the same item
    assert _doc_hash(Later(id="1", prompt="p", reference="r", weight=2.0)) != _doc_hash(plain)
    tagged = Item(id="1", prompt="p", reference="r", metadata={"difficulty": "hard", "source": "atlas"})
    assert _doc_hash(tagged) != _doc_hash(plain)  # a changed item is a different item
