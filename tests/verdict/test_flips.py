"""Flipped items: both directions against a brute-force count, the record's digest against the comparisons'
McNemar counts of a real (fake-engine) campaign, and flips.parquet holding every row."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from qeval.verdict.flips import FLIP_TEXT, chunk_flips, item_flips
from qeval.record.store import Record


def _recs(scores: list[int], prefix: str = "", long: bool = False) -> list[Record]:
    return [Record(item_id=f"i{i:03d}", scores={"acc": float(s)}, response=(prefix + str(i)) * (400 if long else 1),
                   extra={"target": f"t{i}"}) for i, s in enumerate(scores)]


def test_both_directions_match_a_brute_force_count():
    rng = random.Random(0)
    b = [rng.randint(0, 1) for _ in range(300)]
    c = [rng.randint(0, 1) for _ in range(300)]
    digest, rows = item_flips("acc", _recs(b, "b"), _recs(c, "c")[::-1])  # order of the records does not matter
    lost = [i for i in range(300) if b[i] == 1 and c[i] == 0]
    gained = [i for i in range(300) if b[i] == 0 and c[i] == 1]
    assert (digest.n, digest.lost, digest.gained) == (300, len(lost), len(gained))
    assert [r.item_id for r in rows if r.direction == "lost"] == [f"i{i:03d}" for i in lost]
    assert [r.item_id for r in rows if r.direction == "gained"] == [f"i{i:03d}" for i in gained]
    first = rows[0]
    assert (first.base_response, first.variant_response, first.target) == (f"b{lost[0]}", f"c{lost[0]}", f"t{lost[0]}")
    assert [r.direction for r in digest.rows] == ["lost"] * 10 + ["gained"] * 10  # the first 10 of each


def test_unpaired_items_are_left_out_and_long_responses_cut_in_the_record_only():
    b, c = _recs([1, 1, 0], long=True), _recs([0, 1], long=True)
    digest, rows = item_flips("acc", b, c)
    assert digest.n == 2 and digest.lost == 1 and digest.gained == 0
    assert len(digest.rows[0].base_response) == FLIP_TEXT + 1 and len(rows[0].base_response) > FLIP_TEXT + 1


def test_chunks_largest_kl_first():
    digest, rows = chunk_flips(["c1", "c2", "c3"], [0.1, 0.5, 0.1], [0.9, 0.7, 0.95], keep=2)
    assert [r.item_id for r in rows] == ["c2", "c1", "c3"] and [r.item_id for r in digest.rows] == ["c2", "c1"]
    assert digest.kind == "chunks" and rows[0].kl == 0.5 and rows[0].top1 == 0.7


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    from tests.pipeline.test_sequential_pipeline import _run

    root = tmp_path_factory.mktemp("flips")
    return _run(root, "{rules: [{match: '*', margin: 0.05}]}")


def test_a_campaign_records_its_flips_and_writes_them_all(campaign):
    rec = campaign.record
    bad = next(v for v in rec.variants if v.name == "bad")
    assert set(bad.flips) == {s.suite for s in bad.suites}
    for suite, f in bad.flips.items():
        c = next(c for c in rec.comparisons if c.variant == "bad" and c.suite == suite and c.metric == f.metric)
        assert (f.lost, f.gained) == (c.flips_base_only, c.flips_variant_only)  # McNemar's b and c
        assert f.lost > 0
    table = pd.read_parquet(campaign.run_dir / "flips.parquet")
    for suite, f in bad.flips.items():
        rows = table[(table.variant == "bad") & (table.suite == suite)]
        assert (rows.direction == "lost").sum() == f.lost and (rows.direction == "gained").sum() == f.gained
    same = next(v for v in rec.variants if v.name == "same")
    assert all(f.lost == f.gained == 0 for f in same.flips.values())  # same answers: nothing flipped


def test_the_reports_show_the_first_flips_of_each_direction(campaign):
    from qeval.report import html, markdown

    rec = campaign.record
    f = next(v for v in rec.variants if v.name == "bad").flips
    suite, fl = next(iter(f.items()))
    md = markdown.render(rec)
    assert "## Flipped items" in md and f"bad, {suite} ({fl.metric}): {fl.lost} lost, {fl.gained} gained" in md
    page = html.render(rec)
    assert f'data-suite="{suite}" data-direction="lost"' in page and 'href="flips.parquet"' in page
    lost_ids = [r.item_id for r in fl.rows if r.direction == "lost"]
    assert lost_ids and all(f"<td>{i}</td>" in page for i in lost_ids)


def test_each_variants_mlflow_run_has_its_flips_as_a_table_once(campaign, tmp_path):
    """log_table appends to an existing file: a second sync must not double the rows."""
    from mlflow.tracking import MlflowClient

    from qeval.tracking.mlflow import default_tracking_uri, log_record

    uri = default_tracking_uri(tmp_path)
    log_record(campaign.record, campaign.run_dir, uri)
    out = log_record(campaign.record, campaign.run_dir, uri)  # `qeval sync` again
    client = MlflowClient(tracking_uri=uri)
    kids = {r.info.run_name: r.info.run_id for r in client.search_runs(
        [out["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{out['parent_run_id']}'")}
    import json

    import mlflow

    run = client.get_run(kids["bad"])
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [{"path": "flips.json", "type": "table"}]
    got = json.loads(Path(mlflow.artifacts.download_artifacts(run_id=kids["bad"], artifact_path="flips.json",
                                                             tracking_uri=uri)).read_text())
    table = pd.DataFrame(got["data"], columns=got["columns"])
    bad = next(v for v in campaign.record.variants if v.name == "bad")
    assert len(table) == sum(f.lost + f.gained for f in bad.flips.values())
    assert set(table.direction) == {"lost"} | ({"gained"} if any(f.gained for f in bad.flips.values()) else set())
