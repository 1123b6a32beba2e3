"""Per-item results store: SQLite in WAL mode, one row per (variant, suite, item, sample).

Rows are keyed by content hashes (checkpoint, suite, generation settings), so a rerun skips what is
done; a whole suite is also copied to the machine's shared store (Settings.records), so a baseline
evaluated by one campaign is reused by the next (copy_suite). INSERT OR IGNORE makes a replayed write
harmless: a record is never duplicated.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
  variant_key TEXT NOT NULL,
  suite_key   TEXT NOT NULL,
  item_id     TEXT NOT NULL,
  sample      INTEGER NOT NULL DEFAULT 0,
  variant     TEXT NOT NULL,
  suite       TEXT NOT NULL,
  prompt_hash TEXT,
  doc_hash    TEXT,
  grp         TEXT,
  response    TEXT,
  scores      TEXT NOT NULL,
  extra       TEXT,
  created_at  REAL NOT NULL,
  PRIMARY KEY (variant_key, suite_key, item_id, sample)
);
CREATE TABLE IF NOT EXISTS completions (
  variant_key TEXT NOT NULL,
  suite_key   TEXT NOT NULL,
  n_items     INTEGER NOT NULL,
  finished_at REAL NOT NULL,
  PRIMARY KEY (variant_key, suite_key)
);
"""


@dataclass(frozen=True)
class Record:
    item_id: str
    scores: dict[str, float]
    prompt_hash: str | None = None
    doc_hash: str | None = None
    group: str | None = None
    response: str | None = None
    sample: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class ResultsStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # autocommit mode; transactions are explicit where several rows go together
        self._db = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ResultsStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def put(self, variant_key: str, suite_key: str, variant: str, suite: str, records: Iterable[Record]) -> int:
        now = time.time()
        rows = [(variant_key, suite_key, r.item_id, r.sample, variant, suite, r.prompt_hash, r.doc_hash, r.group,
                 r.response, json.dumps(r.scores, allow_nan=False), json.dumps(r.extra), now) for r in records]
        with self._tx() as db:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            return db.total_changes - before

    def done_ids(self, variant_key: str, suite_key: str) -> set[str]:
        cur = self._db.execute("SELECT item_id FROM records WHERE variant_key=? AND suite_key=?",
                               (variant_key, suite_key))
        return {r[0] for r in cur}

    def records(self, variant_key: str, suite_key: str) -> list[Record]:
        cur = self._db.execute(
            "SELECT item_id, scores, prompt_hash, doc_hash, grp, response, sample, extra FROM records "
            "WHERE variant_key=? AND suite_key=? ORDER BY item_id, sample", (variant_key, suite_key))
        return [Record(item_id=i, scores=json.loads(s), prompt_hash=p, doc_hash=d, group=g, response=r, sample=n,
                       extra=json.loads(e or "{}")) for i, s, p, d, g, r, n, e in cur]

    def mark_complete(self, variant_key: str, suite_key: str, n_items: int) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO completions VALUES (?,?,?,?)", (variant_key, suite_key, n_items, time.time()))

    def is_complete(self, variant_key: str, suite_key: str) -> bool:
        n = self.n_items(variant_key, suite_key)
        return n is not None and len(self.done_ids(variant_key, suite_key)) >= n

    def n_items(self, variant_key: str, suite_key: str) -> int | None:
        row = self._db.execute("SELECT n_items FROM completions WHERE variant_key=? AND suite_key=?",
                               (variant_key, suite_key)).fetchone()
        return row[0] if row else None

    def progress(self, variant: str) -> tuple[dict[tuple[str, str], set[str]], set[tuple[str, str]]]:
        """What is stored under a variant name: per (variant key, suite key) its item ids, and the keys whose
        suite is complete (as is_complete judges it)."""
        done: dict[tuple[str, str], set[str]] = {}
        for vk, sk, item in self._db.execute("SELECT variant_key, suite_key, item_id FROM records WHERE variant=?",
                                             (variant,)):
            done.setdefault((vk, sk), set()).add(item)
        complete = {k for k, ids in done.items() if (n := self.n_items(*k)) is not None and len(ids) >= n}
        return done, complete

    def keys_written_since(self, variant: str, since: float) -> list[str]:
        """The variant keys that records under this variant name were written to since `since` (epoch
        seconds), newest first: how `qeval finish` finds a variant that was cut before its record was."""
        cur = self._db.execute("SELECT variant_key FROM records WHERE variant=? GROUP BY variant_key "
                               "HAVING MAX(created_at) >= ? ORDER BY MAX(created_at) DESC", (variant, since))
        return [r[0] for r in cur]

    def copy_suite(self, dst: "ResultsStore", variant_key: str, suite_key: str, variant: str | None = None,
                   suite: str | None = None) -> int:
        """A complete suite's rows and its completion into another store, named there as given (a reused
        record belongs to the campaign that reads it) and dated now; the rows copied (0: not complete here)."""
        if not self.is_complete(variant_key, suite_key):
            return 0
        n_items = self.n_items(variant_key, suite_key)
        now = time.time()
        rows = [(*r[:4], variant or r[4], suite or r[5], *r[6:12], now) for r in self._db.execute(
            "SELECT * FROM records WHERE variant_key=? AND suite_key=?", (variant_key, suite_key))]
        with dst._tx() as db:
            db.executemany("INSERT OR IGNORE INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute("INSERT OR REPLACE INTO completions VALUES (?,?,?,?)", (variant_key, suite_key, n_items, now))
        return len(rows)

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
