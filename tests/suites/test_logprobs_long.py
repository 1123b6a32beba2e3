"""Quality by position (`kind: logprobs` with `document_tokens`): depth buckets, pairing by token position, a
thin bucket never passing, the plan's length checks, and a campaign end to end on the fake engine (its
/tokenize and token-id prompts)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.errors import ConfigError
from qeval.pipeline import campaign
from qeval.pipeline.plan import plan
from qeval.progress import PlainReporter
from qeval.record.store import Record
from qeval.settings import Settings
from qeval.suites.corpora import candidates
from qeval.suites.logprobs_long import bucket_edges, by_bucket, thin
from tests.conftest import campaign_file, fake_checkpoint

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river north city number model "
         "token answer red blue green").split()


def test_auto_buckets_double_from_1k_and_the_last_ends_at_the_document():
    assert bucket_edges(8192, "auto") == ((0, 1024, "0-1k"), (1024, 2048, "1k-2k"), (2048, 4096, "2k-4k"),
                                          (4096, 8192, "4k-8k"))
    # auto's length (max_model_len - 1) keeps the nominal label of the bucket it ends in
    assert bucket_edges(2047, "auto") == ((0, 1024, "0-1k"), (1024, 2047, "1k-2k"))
    assert bucket_edges(300, [100, 200]) == ((0, 100, "0-100"), (100, 200, "100-200"), (200, 300, "200-300"))


def _record(i: str, tokens: list[str], tops: list[dict | None]) -> Record:
    lp = [None if t is None else t[tok] for t, tok in zip(tops, tokens)]
    return Record(item_id=i, scores={"nll": 1.0}, prompt_hash="p" + i, doc_hash="d" + i, response=None,
                  extra={"tokens": tokens, "lp": lp, "top": [t or {} for t in tops], "n": len(tokens) - 1})


def test_buckets_pair_by_token_position():
    """The variant differs from the baseline at positions 4-7 only: the first bucket's KL is 0 and its top-1
    agreement 1, the second's positive; a document whose tokens differ is left out of every bucket."""
    toks = [f" w{p}" for p in range(8)]
    same = {" a": -0.2, " b": -2.0}
    moved = {" a": -2.0, " b": -0.2}
    base = [None] + [{**same, tok: -0.2} for tok in toks[1:]]
    cand = [None] + [{**(same if p < 4 else moved), tok: -0.2} for p, tok in enumerate(toks[1:], 1)]
    buckets = ((0, 4, "0-4"), (4, 8, "4-8"))
    other = [" x"] + toks[1:]
    rows = by_bucket([_record("0", toks, base), _record("1", toks, base)],
                     [_record("0", toks, cand), _record("1", other, cand)], buckets)
    (first,), (second,) = rows
    assert first[0] == "0" and first[1] == 0.0 and first[2] == 1.0 and first[5] == 3  # position 0 predicts nothing
    assert second[1] > 0.5 and second[2] == 0.0 and second[5] == 4


def test_a_thin_bucket_says_why():
    assert thin("4k-8k", 6, 30000, 8, 2000) == "only 6 documents reach 4k-8k (min_bucket_documents: 8)"
    assert thin("0-1k", 8, 1500, 8, 2000) == "only 1500 tokens compared in 0-1k (min_bucket_tokens: 2000)"
    assert thin("0-1k", 8, 8000, 8, 2000) is None


def test_the_named_corpora_come_in_the_order_of_their_text():
    docs = candidates("stdlib", 2048)
    assert len(docs) >= 8 and docs == candidates("stdlib", 2048)
    assert [d.key for d in docs] == sorted(d.key for d in docs)
    assert all(len(d.text) >= 2 * 2048 for d in docs)
    assert candidates("pydoc", 2048) and candidates("docstrings", 2048)


def _corpus(root: Path, n: int = 6, words: int = 500) -> Path:
    folder = root / "docs"
    folder.mkdir(exist_ok=True)
    for k in range(n):
        rng = random.Random(k)
        (folder / f"d{k}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(words)))
    return folder


def _campaign(root: Path, *, min_docs: int = 4, document_tokens: int | str = 300, max_model_len: int = 2048) -> Path:
    _corpus(root)
    fake_checkpoint(root, "base", FakeEngineSpec())
    twin = fake_checkpoint(root, "twin", FakeEngineSpec(model="twin", logprob_noise=0.05))
    noisy = fake_checkpoint(root, "noisy", FakeEngineSpec(model="noisy", logprob_noise=1.5))
    return campaign_file(
        root, name="long",
        variants=[{"name": "twin", "method": "checkpoint", "checkpoint": twin},
                  {"name": "noisy", "method": "checkpoint", "checkpoint": noisy}],
        engine={"kind": "fake", "startup_timeout_s": 30, "max_model_len": max_model_len},
        suites=[{"kind": "logprobs", "name": "long", "corpus": "docs", "document_tokens": document_tokens,
                 "documents": 6, "buckets": [100, 200], "min_bucket_documents": min_docs, "min_bucket_tokens": 100,
                 "top_k": 5}],
        # t: six documents are too few for interval auto to vouch for any interval on a skewed KL
        gates={"rules": [{"match": "logprobs/long/kl@*", "margin": 0.05, "direction": "lower"}], "interval": "t"},
        mlflow={"enabled": False})


def _run(root: Path, **kw):
    config = _campaign(root, **kw)
    res = campaign.run(load_config(config), Settings(cache=root / "cache", share_records=False),
                       reporter=PlainReporter(lambda _: None), config_file=str(config))
    return json.loads((res.run_dir / "run.json").read_text()), res


def test_a_campaign_compares_each_depth_bucket_and_records_the_strata(tmp_path):
    rec, res = _run(tmp_path)
    gates = {(g["variant"], g["metric"]): g for g in rec["gates"]}
    for v in ("twin", "noisy"):
        assert {m for (x, m) in gates if x == v} >= {"kl@0-100", "kl@100-200", "kl@200-300"}
    assert all(gates[("twin", f"kl@{b}")]["verdict"] == "PASS" for b in ("0-100", "100-200", "200-300"))
    assert all(gates[("noisy", f"kl@{b}")]["verdict"] == "FAIL" for b in ("0-100", "100-200", "200-300"))
    # the buckets' comparisons are corrected with the campaign's others
    kl = [c for c in rec["comparisons"] if c["metric"].startswith("kl@")]
    assert len(kl) == 6 and all(c["p_adjusted"] is not None for c in kl)
    noisy = next(v for v in rec["variants"] if v["name"] == "noisy")
    cells = noisy["strata"]["logprobs/long"]["cells"]
    assert [(c["lo"], c["hi"], c["documents"]) for c in cells] == [(0, 100, 6), (100, 200, 6), (200, 300, 6)]
    assert cells[0]["tokens"] == 6 * 99 and cells[1]["tokens"] == 6 * 100  # position 0 predicts nothing
    assert all(c["kl"] > 0.05 and c["delta"] > 0 and c["insufficient"] is None for c in cells)
    report = Path(res.report_path).read_text()
    assert "KL by depth" in report and "200-300" in report
    assert 'id="figure-depth"' in (res.run_dir / "report.html").read_text()


def test_a_bucket_too_few_documents_reach_is_inconclusive_never_pass(tmp_path):
    rec, _ = _run(tmp_path, min_docs=8)
    kl = [g for g in rec["gates"] if g["metric"].startswith("kl@")]
    assert len(kl) == 6
    assert all(g["verdict"] == "INCONCLUSIVE" and g["finding"] == "insufficient_data" for g in kl)
    assert "only 6 documents reach" in kl[0]["reason"]
    assert rec["verdicts"]["twin"] != "PASS"


def test_the_plan_refuses_documents_longer_than_the_context_and_sets_auto(tmp_path):
    config = _campaign(tmp_path, document_tokens=300, max_model_len=256)
    with pytest.raises(ConfigError, match=r"document_tokens 300 exceeds .*max_model_len 256") as e:
        plan(load_config(config), Settings(cache=tmp_path / "cache"), str(config))
    assert e.value.where == "suites[0].document_tokens"
    config = _campaign(tmp_path, document_tokens="auto", max_model_len=301)
    (suite,) = plan(load_config(config), Settings(cache=tmp_path / "cache"), str(config)).suites
    assert suite.document_tokens == 300 and suite.buckets[-1][:2] == (200, 300)
