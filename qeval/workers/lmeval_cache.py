"""lm-eval's request cache, written in batches, and its prompt templates compiled once (runs in the engine venv, never
imports qeval).

lm-eval's `--use_cache` keeps every answer in a sqlitedict opened with autocommit: each answer is a write that
waits, on the thread that runs the event loop of its HTTP client, for its own SQLite commit (a journal file made,
synced and removed), and every answer is written twice (as it arrives, then again once the call is over). The
reads that check the cache first go through sqlitedict's thread one by one, each recording its caller's stack.
With hundreds of requests in flight that is what paces the client: while a commit waits on the disk no answer
is read. `RequestCache` keeps the same file (sqlitedict's table `unnamed`: the key lm-eval hashes, the answer
pickled), so a cache either wrote is read by the other, but gathers the writes and commits them together, every
`FLUSH_EVERY` answers or `FLUSH_S` seconds and when the call ends: a process killed mid-call loses at most that
last batch, which the next run asks the server again.

lm-eval also compiles a task's Jinja template again for every document and every field it renders (its
`utils.apply_template`); `compile_templates_once` keeps each template compiled, so the prompts are the same
strings, made once per template instead of once per use.
"""

from __future__ import annotations

import functools
import os
import pickle
import sqlite3
import time

TABLE = "unnamed"  # sqlitedict's default table, the one lm-eval's cache uses
FLUSH_EVERY = 512  # answers gathered before a commit
FLUSH_S = 1.0  # at most this long between an answer and its commit


class RequestCache:
    """The dict lm-eval's CachingLM and CacheHook use (`in`, `[]`, `[]=`, `commit`, `close`), on sqlitedict's file."""

    def __init__(self, path: str, flush_every: int = FLUSH_EVERY, flush_s: float = FLUSH_S):
        self.path, self.flush_every, self.flush_s = path, flush_every, flush_s
        self.conn = sqlite3.connect(path)
        self.conn.execute(f'CREATE TABLE IF NOT EXISTS "{TABLE}" (key TEXT PRIMARY KEY, value BLOB)')
        self.conn.commit()
        self.pending: dict[str, bytes] = {}
        self.since = time.monotonic()

    def __contains__(self, key: str) -> bool:
        return key in self.pending or self.conn.execute(
            f'SELECT 1 FROM "{TABLE}" WHERE key = ?', (key,)).fetchone() is not None

    def __getitem__(self, key: str):
        if key in self.pending:
            return pickle.loads(self.pending[key])
        row = self.conn.execute(f'SELECT value FROM "{TABLE}" WHERE key = ?', (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return pickle.loads(bytes(row[0]))

    def __setitem__(self, key: str, value) -> None:
        if not self.pending:
            self.since = time.monotonic()
        self.pending[key] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        if len(self.pending) >= self.flush_every or time.monotonic() - self.since >= self.flush_s:
            self.commit()

    def commit(self, blocking: bool = True) -> None:  # sqlitedict's signature: lm-eval calls commit()
        if self.pending:
            self.conn.executemany(f'REPLACE INTO "{TABLE}" (key, value) VALUES (?, ?)', self.pending.items())
            self.conn.commit()
            self.pending.clear()

    def close(self) -> None:
        if self.conn is not None:
            self.commit()
            self.conn.close()
            self.conn = None


def batch_cache_writes() -> None:
    """lm-eval's CachingLM (which `simple_evaluate` makes for `use_cache`) on a RequestCache instead of a
    sqlitedict that commits every write."""
    import lm_eval.api.model as model

    if getattr(model.CachingLM, "batched", False):
        return

    class BatchedCachingLM(model.CachingLM):
        batched = True

        def __init__(self, lm, cache_db: str):
            # CachingLM's own construction, the store aside
            self.lm, self.cache_db = lm, cache_db
            if os.path.dirname(cache_db):
                os.makedirs(os.path.dirname(cache_db), exist_ok=True)
            self.dbdict = RequestCache(cache_db)
            lm.set_cache_hook(self.get_cache_hook())

    model.CachingLM = BatchedCachingLM  # simple_evaluate looks it up on the module at each call


def compile_templates_once() -> None:
    """lm-eval's apply_template with each template string compiled once (its Jinja environment is fixed)."""
    import lm_eval.utils as utils

    if getattr(utils.apply_template, "compiled_once", False):
        return
    compiled = functools.lru_cache(maxsize=None)(utils.env.from_string)

    def apply_template(template: str, doc: dict) -> str:
        return compiled(template).render(**doc)

    apply_template.compiled_once = True
    utils.apply_template = apply_template  # tasks call it as utils.apply_template
