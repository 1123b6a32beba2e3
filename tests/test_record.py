"""Run records of older schemas, as committed under results/, still load and render."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.record import SCHEMA_VERSION, RunRecord
from qeval.report import markdown

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "results").glob("*/*/run.json"))


def test_there_are_committed_records_to_read():
    assert len(COMMITTED) >= 4


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_a_committed_record_loads_and_renders(path):
    rec = RunRecord.load(path)
    assert rec.schema_version <= SCHEMA_VERSION and rec.variants
    assert all(v.reused == {} for v in rec.variants)  # a field it predates: its default
    md = markdown.render(rec)
    assert rec.campaign in md and rec.verdict in md
    assert RunRecord.model_validate_json(rec.model_dump_json()) == rec  # and round-trips
