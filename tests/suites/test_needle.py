"""The needle suite: its items seeded and stable, laid out exact in tokens, paired across variants, recorded per
(length, depth) cell, and a campaign end to end on the fake engine, whose reach in tokens sets which needles a
variant finds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.errors import ConfigError
from qeval.pipeline import campaign
from qeval.pipeline.plan import plan
from qeval.progress import PlainReporter
from qeval.record.run import RunRecord
from qeval.report import plots
from qeval.settings import Settings
from qeval.suites.needle import needle_record, strata
from qeval.suites.needle_items import assemble, layout, sentences
from tests.conftest import campaign_file, fake_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def _ids(items):
    return [(i.item_id, i.group, i.haystack.needle, i.haystack.distractors, i.haystack.start) for i in items]


def test_items_are_named_by_length_haystack_and_depth_and_drawn_per_haystack():
    items = layout([1024, 4096], [0.0, 0.25, 1.0], 2, seed=0, distractors=2)
    assert [i.item_id for i in items[:4]] == ["L1024-h00-d000", "L1024-h00-d025", "L1024-h00-d100", "L1024-h01-d000"]
    assert items[0].group == "L1024-h00" and items[-1].group == "L4096-h01"
    # the depths of one haystack share its needle, distractors and filler; haystacks differ
    assert len({(i.haystack.needle, i.haystack.start) for i in items[:3]}) == 1
    assert len({i.haystack.needle for i in items}) == 4
    for i in items:
        n = i.haystack.needle
        assert len(n.value) == 7 and n.value.isdigit() and len(n.key.split()) == 2
        assert len(i.haystack.distractors) == 2 and n.key not in {d.key for d, _ in i.haystack.distractors}
    assert _ids(layout([1024, 4096], [0.0, 0.25, 1.0], 2, seed=1, distractors=2)) != _ids(items)


def test_items_are_the_same_in_every_process_whatever_its_hash_seed():
    code = ("from qeval.suites.needle_items import layout; "
            "print([(i.item_id, i.haystack.needle.key, i.haystack.needle.value, i.haystack.start) "
            "for i in layout([1024, 2048], [0.5], 3, 7, 1)])")
    outs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1
    here = [(i.item_id, i.haystack.needle.key, i.haystack.needle.value, i.haystack.start)
            for i in layout([1024, 2048], [0.5], 3, 7, 1)]
    assert outs.pop().strip() == repr(here)


def test_a_prompt_is_exactly_its_length_with_the_needle_at_a_sentence_boundary():
    filler = [list(range(100 + 10 * k, 100 + 10 * k + 3 + k % 4)) for k in range(20)]  # sentences of 3-6 ids
    needle, question, other = [1, 1, 1], [2, 2], [3, 3]
    starts = {sum(len(s) for s in filler[:k]) for k in range(len(filler) + 1)}
    prefixes = []
    for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
        laid = assemble(filler, 0, needle, question, [(other, 0.3)], 64, depth)
        assert len(laid.ids) == 64 and laid.ids[-2:] == (2, 2)
        assert list(laid.ids[laid.needle_at:laid.needle_at + 3]) == needle
        assert laid.filler_tokens == 64 - 3 - 2 - 2
        before = [t for t in laid.ids[:laid.needle_at] if t >= 100]
        assert len(before) in starts or depth == 1.0  # never inside a sentence (depth 1: after the cut)
        assert abs(len(before) - depth * laid.filler_tokens) <= 3  # the nearest boundary: sentences are <= 6 ids
        prefixes.append(laid.ids[:laid.needle_at])
    # the depths of one haystack share the prompt up to the shallower needle: the prefix a server caches
    assert prefixes[0] == () and all(b[:len(a)] == a and len(b) > len(a) for a, b in zip(prefixes, prefixes[1:]))
    with pytest.raises(ValueError, match="cannot hold"):
        assemble(filler, 0, needle, question, [], 4, 0.5)


def test_filler_sentences_keep_their_space_and_drop_blanks():
    assert sentences("One two.  Three!\n\nFour?") == [" One two.", " Three!", " Four?"]
    assert sentences("def f(x):\n    return x\n\nDone. e.g") == [" def f(x):", " return x", " Done.", " e.g"]


def _records(items, answers):
    return [needle_record(i, [1, 2, 3], 1, 2, answers(i), "f") for i in items]


def test_items_pair_across_variants_and_the_strata_are_per_length_and_depth():
    items = layout([128, 512], [0.1, 0.9], 3, seed=0)
    base = _records(items, lambda i: f" {i.haystack.needle.value}.")
    cand = _records(items, lambda i: f" {i.haystack.needle.value}." if i.haystack.length == 128 or i.depth > 0.5
                    else " 0000000.")
    assert [r.item_id for r in base] == [r.item_id for r in cand]
    assert all(b.doc_hash == c.doc_hash and b.prompt_hash == c.prompt_hash for b, c in zip(base, cand))
    assert all(r.group == r.item_id.rsplit("-", 1)[0] for r in base)
    cells = {(c["length"], c["depth"]): c for c in strata(base, cand)}
    assert set(cells) == {(128, 0.1), (128, 0.9), (512, 0.1), (512, 0.9)}
    assert all(c["items"] == 3 and c["base"] == 1.0 for c in cells.values())
    assert cells[(512, 0.1)]["variant"] == 0.0 and cells[(512, 0.1)]["delta"] == -1.0
    assert cells[(512, 0.9)]["variant"] == 1.0 and cells[(128, 0.1)]["delta"] == 0.0


def _campaign(root: Path, *, lengths=(128, 512), max_model_len: int = 2048, max_tokens: int = 12) -> Path:
    fake_checkpoint(root, "base", FakeEngineSpec())
    twin = fake_checkpoint(root, "twin", FakeEngineSpec(model="twin"))
    short = fake_checkpoint(root, "short", FakeEngineSpec(model="short", needle_reach=100))
    return campaign_file(
        root, name="needle",
        variants=[{"name": "twin", "method": "checkpoint", "checkpoint": twin},
                  {"name": "short", "method": "checkpoint", "checkpoint": short}],
        engine={"kind": "fake", "startup_timeout_s": 30, "max_model_len": max_model_len},
        suites=[{"kind": "needle", "lengths": lengths if isinstance(lengths, str) else list(lengths), "depths": [0.1, 0.5, 0.9], "haystacks": 4,
                 "distractors": 1, "max_tokens": max_tokens}],
        gates={"rules": [{"match": "needle/*", "margin": 0.1}, {"match": "needle/needle/acc@512", "margin": 0.1}],
               "interval": "t"},
        mlflow={"enabled": False})


def test_a_campaign_finds_the_needles_a_variant_loses_at_length(tmp_path):
    config = _campaign(tmp_path)
    res = campaign.run(load_config(config), Settings(cache=tmp_path / "cache", share_records=False),
                       reporter=PlainReporter(lambda _: None), config_file=str(config))
    rec = json.loads((res.run_dir / "run.json").read_text())
    RunRecord.model_validate(rec)  # the record reads back
    gates = {(g["variant"], g["metric"]): g for g in rec["gates"]}
    assert gates[("short", "acc")]["verdict"] == "FAIL" and gates[("short", "acc@512")]["verdict"] == "FAIL"
    assert ("short", "acc@128") not in gates  # reported, gated only where a rule names it
    assert gates[("twin", "acc")]["verdict"] != "FAIL"
    short = next(v for v in rec["variants"] if v["name"] == "short")
    st = short["strata"]["needle/needle"]
    assert st["axis"] == "length x depth"
    cells = {(c["length"], c["depth"]): c for c in st["cells"]}
    assert len(cells) == 6 and all(c["items"] == 4 and c["base"] == 1.0 for c in cells.values())
    # a needle 100 tokens or less from the end is found, a farther one is not
    assert [cells[(n, d)]["variant"] for n in (128, 512) for d in (0.1, 0.5, 0.9)] == [0, 1, 1, 0, 0, 1]
    assert abs(cells[(512, 0.5)]["needle_at"] - 0.5 * 512) < 40  # exact in tokens, at a sentence boundary
    comps = [c for c in rec["comparisons"] if c["suite"] == "needle/needle" and c["variant"] == "short"]
    assert {c["metric"] for c in comps} >= {"acc", "acc@128", "acc@512"}
    report = Path(res.report_path).read_text()
    assert "Retrieval at length" in report and "| 512 | 1.000 -> 0.000 (-1.000) | 1.000 -> 0.000 (-1.000) | 1.000 -> 1.000 | 4 |  |" in report
    assert plots.depth(RunRecord.model_validate(rec)) is None  # KL by depth is for long documents alone
    assert plots.needle(RunRecord.model_validate(rec)).startswith(b"\x89PNG")
    html = (res.run_dir / "report.html").read_text()
    assert 'id="figure-needle"' in html


def test_the_plan_refuses_lengths_beyond_the_context_and_sets_auto(tmp_path):
    config = _campaign(tmp_path, lengths=(128, 2048), max_model_len=2048)
    with pytest.raises(ConfigError, match=r"2048 tokens and its answer of max_tokens 12 exceed .*max_model_len 2048") as e:
        plan(load_config(config), Settings(cache=tmp_path / "cache"), str(config))
    assert e.value.where == "suites[0].lengths"
    config = _campaign(tmp_path, lengths="auto", max_model_len=4096)
    (suite,) = plan(load_config(config), Settings(cache=tmp_path / "cache"), str(config)).suites
    assert suite.lengths == (1024, 2048) and len(suite.items) == 2 * 4 * 3
    (size,) = suite.sizes(tmp_path)
    assert size[:3] == ("needle/needle", "acc", 24) and len(set(size[3])) == 8


def test_the_report_table_marks_a_length_the_baseline_cannot_retrieve_at():
    from qeval.record.measurements import Strata, Stratum
    from qeval.report.markdown import needle_table

    cells = [Stratum(length=n, depth=d, items=4, needle_at=0, base=b, variant=v, delta=v - b)
             for n, b, v in ((1024, 1.0, 0.75), (8192, 0.25, 0.0)) for d in (0.0, 1.0)]
    table = needle_table(Strata(axis="length x depth", cells=cells)).splitlines()
    assert table[0] == "| length (tokens) | depth 0 | depth 1 | items per cell | note |"
    assert table[2] == "| 1,024 | 1.000 -> 0.750 (-0.250) | 1.000 -> 0.750 (-0.250) | 4 |  |"
    assert table[3].endswith("| 4 | baseline finds fewer than half: not informative |")


def test_qeval_plan_sizes_the_needles_in_clusters_with_the_planning_icc(tmp_path):
    from qeval.pipeline.power import plan_power

    config = _campaign(tmp_path)
    cfg = load_config(config)
    p = plan(cfg, Settings(cache=tmp_path / "cache"), str(config))
    (flat,) = [s for s in plan_power(cfg, p, tmp_path) if s.metric == "acc"]
    clustered_cfg = cfg.model_copy(update={"gates": cfg.gates.model_copy(update={"rules": [
        r.model_copy(update={"planning_icc": 0.5}) for r in cfg.gates.rules]})})
    (grouped,) = [s for s in plan_power(clustered_cfg, p, tmp_path) if s.metric == "acc"]
    assert flat.n == grouped.n == 24
    assert grouped.mde_worst > flat.mde_worst  # 8 haystacks of 3 needles hold less than 24 independent items
