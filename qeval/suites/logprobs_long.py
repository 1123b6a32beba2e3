"""Quality by position: prompt log-probabilities of long documents, compared per depth bucket.

Quantization damage concentrates in long inputs (a quantized KV cache, low-bit weights), where a corpus of
short chunks says nothing. Each document (suites/corpora.py) is tokenized by the variant's own engine (its
tokenize route), cut at exactly `document_tokens` ids and sent as a token-id prompt with echo and top-k, so
every position of every document is scored once. A depth bucket [lo, hi) of token positions is one View: per
document, the mean per-token KL against the baseline, the top-1 agreement and the NLL over those positions,
paired by token position (the two sides' tokens must match). Each bucket's KL is a gated metric
(`kl@4k-8k`), so the campaign's multiplicity correction covers it like any other comparison; a bucket too
few documents or tokens reach is INCONCLUSIVE (`View.insufficient`), never PASS.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from .. import aio
from ..engines import Endpoint
from ..errors import ConfigError, EngineError
from ..hashing import key_hash, stable_hash
from ..record.metrics import MetricSpec, continuous
from ..record.store import Record
from .base import InFlight, Looks, Pairing, Part, SuiteRun, View, nothing_to_check, requests_in_flight, run_items
from .http import Client, session, tokenize
from .prompt_logprobs import fetch_logprobs, gather_bounded
from .corpora import Document, candidates, named_key
from .spec import LogprobsSuiteRef

FIRST_BUCKET = 1024  # auto buckets: [0, 1k), [1k, 2k), [2k, 4k), ... doubling up to the document's length
CONCURRENCY = 2  # documents in flight: each is a whole long prompt scored at once


def tokens_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 and n else str(n)


def bucket_edges(document_tokens: int, buckets: "str | list[int]") -> tuple[tuple[int, int, str], ...]:
    """(lo, hi, label) per bucket of token positions. Auto: doubling from 1k; the last ends at the document's
    length but keeps its nominal label where the length falls inside it (2,047 tokens: `1k-2k`)."""
    if buckets == "auto":
        edges, e = [0], FIRST_BUCKET
        while e < document_tokens:
            edges.append(e)
            e *= 2
        nominal = e
    else:
        edges = [0, *(b for b in buckets if b < document_tokens)]
        nominal = document_tokens
    out = []
    for k, lo in enumerate(edges):
        last = k == len(edges) - 1
        hi = document_tokens if last else edges[k + 1]
        out.append((lo, hi, f"{tokens_label(lo)}-{tokens_label(nominal if last else hi)}"))
    return tuple(out)


@dataclass(frozen=True)
class LongLogprobsSuite:
    name: str
    documents_from: tuple[Document, ...]  # candidates in order; the first `documents` long enough are used
    document_tokens: int
    documents: int
    buckets: tuple[tuple[int, int, str], ...]
    min_bucket_documents: int
    min_bucket_tokens: int
    top_k: int
    key: str
    in_flight: InFlight = InFlight(CONCURRENCY)

    @property
    def suite(self) -> str:
        return f"logprobs/{self.name}"

    def metrics(self) -> dict[str, MetricSpec]:
        where = "logprobs suite (by depth)"
        out = {"nll": continuous(False, where)}
        for _, _, b in self.buckets:
            out |= {f"kl@{b}": continuous(False, where, "mean KL"), f"top1@{b}": continuous(True, where, "top-1 disagreement"),
                    f"nll@{b}": continuous(False, where)}
        return out

    # -- the Suite protocol (suites/base.py) -------------------------------------------------------
    @property
    def parts(self) -> tuple[Part, ...]:
        kl = tuple(f"kl@{b}" for _, _, b in self.buckets)
        top1 = tuple(f"top1@{b}" for _, _, b in self.buckets)
        # the deepest bucket leads: where a quantized cache or low-bit weights break first
        return (Part(suite=self.suite, key=self.key, metrics=self.metrics(), primary="nll", gated=kl + top1,
                     gated_primary=kl[-1], planned=kl + top1, needs_prompt_logprobs=True, needs_tokenize=True),)

    @property
    def concurrency(self) -> int:
        return self.in_flight.fixed

    def tally(self) -> dict[str, int]:
        return {"logprobs suites": 1}

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        return []  # gated on KL, which no planning variance of 0/1 results describes

    preflight = staticmethod(nothing_to_check)  # its corpus was read when it was resolved

    def run(self, run: SuiteRun) -> None:
        (part,) = self.parts
        if run.is_complete(part) or run.skip(part):
            return
        chosen = aio.run(self._choose(run.endpoint, run.timeout_s))
        if len(chosen) < 2:
            raise ConfigError(f"{self.suite}: the corpus has {len(chosen)} document(s) of at least "
                              f"{self.document_tokens} tokens on this tokenizer; at least 2 are needed "
                              "(a shorter document_tokens, or another corpus)")
        n = requests_in_flight(run, self.in_flight, [part], self.document_tokens, 1)
        run_items(run, part, [(f"doc-{i:02d}", None) for i in range(len(chosen))],
                  lambda done, put: self._score_all(run.endpoint, chosen, done, put, n, run.timeout_s),
                  note=f" ({len(chosen)} documents x {self.document_tokens} tokens)")

    async def _choose(self, endpoint: Endpoint, timeout_s: float) -> list[tuple[Document, list[int]]]:
        """The first `documents` candidates that reach `document_tokens` on this engine's tokenizer, cut there."""
        route = endpoint.capabilities.tokenize
        if route is None:  # the plan refuses such a suite first; this guards a direct call
            raise ConfigError(f"the {endpoint.engine} engine has no tokenize route: {self.suite} cannot run on it")
        out: list[tuple[Document, list[int]]] = []
        async with session(endpoint, timeout_s, 1) as client:
            for doc in self.documents_from:
                tok = await tokenize(client, endpoint, route, doc.text, f"{self.suite}: tokenizing {doc.name}")
                if tok.max_model_len is not None and self.document_tokens > tok.max_model_len:
                    raise EngineError(f"{self.suite}: document_tokens {self.document_tokens} exceeds the served "
                                      f"context of {tok.max_model_len} tokens")
                if len(tok.ids) >= self.document_tokens:
                    out.append((doc, list(tok.ids[:self.document_tokens])))
                    if len(out) == self.documents:
                        break
        return out

    def _score_all(self, endpoint: Endpoint, chosen: list[tuple[Document, list[int]]], done: set[str],
                   sink: Callable[[list[Record]], None], concurrency: int, timeout_s: float,
                   retries: int = 2, retry_backoff_s: float = 1.0) -> None:
        route, tok = endpoint.capabilities.prompt_logprobs, endpoint.capabilities.tokenize
        assert route is not None and tok is not None  # the plan refuses an engine without them
        todo = [(i, d, ids) for i, (d, ids) in enumerate(chosen) if f"doc-{i:02d}" not in done]

        async def one(client: Client, i: int, doc: Document, ids: list[int]) -> None:
            url, body = route.request(endpoint, "", self.top_k)
            body = {**body, "prompt": tok.prompt(ids)}  # the ids, cut at the length: exact in tokens
            lp = await fetch_logprobs(client, route, url, body, f"{self.suite}: document {i}", retries, retry_backoff_s)
            sink([document_record(i, doc, self.document_tokens, self.top_k, lp)])

        gather_bounded(endpoint, timeout_s, concurrency,
                       [lambda client, i=i, d=d, ids=ids: one(client, i, d, ids) for i, d, ids in todo])

    def views(self, part: Part, base: list[Record], cand: list[Record]) -> tuple[View, ...]:
        """The documents' NLL (reported), then one view per depth bucket: per document, its KL, top-1 agreement
        and NLL over the bucket's positions, where both sides tokenized the document alike."""
        return self._views(part, base, cand)[0]

    def pair(self, part: Part, base: list[Record], cand: list[Record]) -> Pairing:
        from ..record.measurements import Strata, Stratum

        views, cells = self._views(part, base, cand)
        if not cells:
            return Pairing(views)
        return Pairing(views, strata=Strata(axis="depth", cells=[Stratum.model_validate(c) for c in cells]))

    def _views(self, part: Part, base: list[Record], cand: list[Record]) -> tuple[tuple[View, ...], list[dict]]:
        from ..verdict.pairing import Paired, align

        views = [View(align(part.suite, base, cand), None)]
        if not base or not cand:
            return tuple(views), []
        per = by_bucket(base, cand, self.buckets)
        looks_ids = tuple(r.item_id for r in base)
        cells = []
        for (lo, hi, b), rows in zip(self.buckets, per):
            if not rows:
                continue
            ids = [r[0] for r in rows]
            n = len(ids)
            kl, top1, nb, nc, tokens = (np.array([r[k] for r in rows]) for k in range(1, 6))
            m = {f"kl@{b}", f"top1@{b}", f"nll@{b}"}
            paired = Paired(ids=ids, groups=[None] * n, base={f"kl@{b}": np.zeros(n), f"top1@{b}": np.ones(n),
                                                              f"nll@{b}": nb},
                            cand={f"kl@{b}": kl, f"top1@{b}": top1, f"nll@{b}": nc}, unpaired_base=[], unpaired_cand=[])
            why = thin(b, n, int(tokens.sum()), self.min_bucket_documents, self.min_bucket_tokens)
            looks = Looks(looks_ids, (None,) * len(looks_ids),
                          {f"kl@{b}": 0.0, f"top1@{b}": 1.0, f"nll@{b}": float(nb.mean())})
            views.append(View(paired, f"kl@{b}", (f"kl@{b}", f"top1@{b}", f"nll@{b}"), looks,
                              insufficient={k: why for k in m} if why else {}))
            cells.append(dict(lo=lo, hi=hi, documents=n, tokens=int(tokens.sum()), base=float(nb.mean()),
                              variant=float(nc.mean()), delta=float((nc - nb).mean()), kl=float(kl.mean()),
                              top1=float(top1.mean()), insufficient=why))
        return tuple(views), cells

    def rekeyed(self, keys: Mapping[str, str]) -> "LongLogprobsSuite":
        # a named corpus comes from the interpreter's stdlib: on another Python its key differs, while the
        # records a run stored are under the key it had then
        return dataclasses.replace(self, key=keys.get(self.suite, self.key))


def thin(bucket: str, documents: int, tokens: int, min_documents: int, min_tokens: int) -> str | None:
    """Why a bucket's data are too few to judge; None: enough."""
    if documents < min_documents:
        return f"only {documents} documents reach {bucket} (min_bucket_documents: {min_documents})"
    if tokens < min_tokens:
        return f"only {tokens} tokens compared in {bucket} (min_bucket_tokens: {min_tokens})"
    return None


def _rounded(top: Mapping[str, float] | None) -> dict[str, float]:
    return {t: round(x, 4) for t, x in (top or {}).items()}


def document_record(i: int, doc: Document, tokens: int, k: int, lp: dict) -> Record:
    """One document's record: its tokens, their logprobs and the top-k at each position (to 1e-4: the store
    holds thousands of positions per document)."""
    token_lp = [None if x is None else round(x, 4) for x in lp["token_logprobs"]]
    scored = [x for x in token_lp[1:] if x is not None]
    nll = float(-np.mean(scored)) if scored else float("nan")
    extra = {"tokens": lp["tokens"], "lp": token_lp, "top": [_rounded(t) for t in lp["top_logprobs"]],
             "n": len(scored), "source": doc.name}
    return Record(item_id=f"doc-{i:02d}", scores={"nll": nll}, prompt_hash=stable_hash([doc.key, tokens, k]),
                  doc_hash=stable_hash([doc.key, tokens]), response=None, extra=extra)


def by_bucket(base: list[Record], cand: list[Record], buckets: tuple[tuple[int, int, str], ...]
              ) -> list[list[tuple[str, float, float, float, float, int]]]:
    """Per bucket, per document both sides tokenized alike: (id, mean KL, top-1 agreement, base NLL, variant
    NLL, positions compared) over the positions [lo, hi) where both sides predicted a token. Paired by position:
    position p of one side against position p of the other."""
    from ..stats.distribution import kl_topk

    b = {r.item_id: r for r in base}
    c = {r.item_id: r for r in cand}
    out: list[list] = [[] for _ in buckets]
    for i in sorted(b.keys() & c.keys()):
        rb, rc = b[i], c[i]
        if rb.extra["tokens"] != rc.extra["tokens"]:
            continue  # different tokenizers: per-position comparison is meaningless
        tb, tc, lb, lc = rb.extra["top"], rc.extra["top"], rb.extra["lp"], rc.extra["lp"]
        for k, (lo, hi, _) in enumerate(buckets):
            kl, agree, nb, nc = [], [], [], []
            for p in range(lo, min(hi, len(tb), len(tc))):
                if not tb[p] or not tc[p] or lb[p] is None or lc[p] is None:
                    continue  # the first position has no prediction
                kl.append(kl_topk(tb[p], tc[p]))
                agree.append(1.0 if max(tb[p], key=tb[p].get) == max(tc[p], key=tc[p].get) else 0.0)
                nb.append(-lb[p])
                nc.append(-lc[p])
            if kl:
                out[k].append((i, float(np.mean(kl)), float(np.mean(agree)), float(np.mean(nb)), float(np.mean(nc)),
                               len(kl)))
    return out


def resolve_long(ref: LogprobsSuiteRef, config_file: str = "") -> LongLogprobsSuite:
    """A `kind: logprobs` entry with `document_tokens` (a number: the plan sets `auto` from the engines)."""
    n = ref.document_tokens
    if not isinstance(n, int):
        raise ConfigError("document_tokens: auto is set from the served context length by the plan",
                          file=config_file, where="suites: logprobs: document_tokens")
    try:
        docs = candidates(ref.corpus, n)
    except ConfigError as e:
        raise ConfigError(str(e), file=config_file, where="suites: logprobs: corpus") from None
    if len(docs) < 2:
        raise ConfigError(f"corpus {ref.corpus} has {len(docs)} document(s) long enough for {n} tokens",
                          file=config_file, where="suites: logprobs: document_tokens")
    buckets = bucket_edges(n, ref.buckets)
    key = key_hash({"documents": stable_hash([d.key for d in docs]), "document_tokens": n, "n": ref.documents,
                    "top_k": ref.top_k, "name": ref.name, "named": named_key(ref.corpus)})
    return LongLogprobsSuite(name=ref.name, documents_from=tuple(docs), document_tokens=n, documents=ref.documents,
                             buckets=buckets, min_bucket_documents=ref.min_bucket_documents,
                             min_bucket_tokens=ref.min_bucket_tokens, top_k=ref.top_k,
                             key=f"logprobs:{ref.name}:{key}",
                             in_flight=InFlight.of(ref.concurrency, ref.max_concurrency, fallback=CONCURRENCY))

