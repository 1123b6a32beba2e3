"""Distribution probe: prompt log-probabilities of a held-out corpus from each variant's endpoint.

Each chunk of text is sent once with `echo` and `logprobs=k` (vLLM returns the prompt's tokens, the
log-probability of each, and the top-k alternatives at each position). Per chunk a record keeps the
tokens, their log-probabilities and the top-k; comparisons against the baseline (KL divergence,
top-1 agreement, delta-p) are computed from the records, after every variant has run. Each engine
declares its route to them (`Capabilities.prompt_logprobs`): TGI's is its native /generate
(engines/tgi.py), which lists no alternatives for prompt tokens, so its records carry the actual token
at each position and say so (`alternatives: False`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from ..engines import Endpoint
from ..engines.capabilities import PromptLogprobsRoute
from ..errors import ConfigError
from ..hashing import key_hash, stable_hash
from ..record.metrics import MetricSpec, continuous
from ..quantize.calibration import calibration_texts
from ..record.store import Record
from .http import Client
from .prompt_logprobs import fetch_logprobs, gather_bounded
from .base import InFlight, Looks, Pairing, Part, SuiteRun, View, nothing_to_check, requests_in_flight, run_items
from .spec import LogprobsSuiteRef

if TYPE_CHECKING:
    from .logprobs_long import LongLogprobsSuite
    from ..stats.distribution import PositionStats


@dataclass(frozen=True)
class LogprobsSuite:
    name: str
    chunks: list[str]
    top_k: int
    key: str
    in_flight: InFlight = InFlight(4)  # chunks in flight, as the campaign's entry sets them

    @property
    def suite(self) -> str:
        return f"logprobs/{self.name}"

    def metrics(self) -> dict[str, MetricSpec]:
        """Per chunk: its mean NLL, and against the baseline the mean KL and the top-1 agreement rate."""
        where = "logprobs suite"
        return {"nll": continuous(False, where), "kl": continuous(False, where, "mean KL"),
                "top1": continuous(True, where, "top-1 disagreement")}

    # -- the Suite protocol (suites/base.py) -------------------------------------------------------
    @property
    def parts(self) -> tuple[Part, ...]:
        # its records carry NLL (reported); its gates read KL and top-1 agreement against the baseline's
        return (Part(suite=self.suite, key=self.key, metrics=self.metrics(), primary="nll", gated=("kl", "top1"),
                     gated_primary="kl", planned=("kl", "top1"), needs_prompt_logprobs=True),)

    @property
    def concurrency(self) -> int:
        return self.in_flight.fixed

    def tally(self) -> dict[str, int]:
        return {"logprobs suites": 1}

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        return []  # its chunks are gated on KL, which no planning variance of 0/1 results describes

    preflight = staticmethod(nothing_to_check)  # its corpus was read when it was resolved

    def run(self, run: SuiteRun) -> None:
        (part,) = self.parts
        # one request: the longest chunk at 2 characters a token (text runs 3-4), and the one token generated
        longest = max((len(c) for c in self.chunks), default=0)
        run_items(run, part, [(f"{i:04d}", None) for i in range(len(self.chunks))],
                  lambda done, put: run_logprobs(self, run.endpoint, done, put, timeout_s=run.timeout_s,
                                                 retry_backoff_s=run.retry_backoff_s,
                                                 concurrency=requests_in_flight(run, self.in_flight, [part],
                                                                                longest // 2 + 1, 1)),
                  note=" (prompt logprobs)")

    def views(self, part: Part, base: list[Record], cand: list[Record]) -> tuple[View, ...]:
        """NLL item by item (reported, not gated); KL and top-1 agreement by chunk, where both sides tokenized
        a chunk alike (the baseline's own KL is 0 and its agreement 1)."""
        return self._views(part, base, cand)[0]

    def pair(self, part: Part, base: list[Record], cand: list[Record]) -> Pairing:
        """The views, the chunks that flipped, the per-token figures."""
        from ..verdict.flips import chunk_flips
        from ..record.measurements import BaselineDistribution, Distribution
        from ..stats.distribution import summarize as summarize_positions

        views, cc = self._views(part, base, cand)
        if cc is None:
            return Pairing(views)
        flips = chunk_flips(cc.ids, cc.kl, cc.top1 if cc.alternatives else None) if cc.ids else None
        summ = summarize_positions(cc.positions)
        figures = {**summ.__dict__, "perplexity": perplexity(cand), "mismatched_chunks": len(cc.mismatched),
                   "chunks": len(cc.ids), "method": f"top-{self.top_k} + tail bucket (approximation, a near lower bound)"}
        if not cc.alternatives:  # a TGI side: no alternatives per prompt token, so no top-1 figures
            figures.update(
                top1_agreement=None, **{k: None for k in figures if k.startswith("delta_p_")},
                method="actual token + tail bucket (TGI lists no alternatives for prompt tokens: a looser "
                       "lower bound; no top-1 agreement)")
        distribution = (Distribution.model_validate(figures),
                        BaselineDistribution(perplexity=perplexity(base), chunks=len(base)))
        return Pairing(views, flips=flips, distribution=distribution)

    def _views(self, part: Part, base: list[Record], cand: list[Record]
               ) -> "tuple[tuple[View, ...], ChunkComparison | None]":
        """The views, and the chunk comparison they were read from (None: a side has no records)."""
        from ..verdict.pairing import Paired, align

        views = [View(align(part.suite, base, cand), None)]
        if not base or not cand:
            return tuple(views), None
        cc = compare_chunks(base, cand)
        if cc.ids:
            n = len(cc.ids)
            paired = Paired(ids=cc.ids, groups=[None] * n, base={"kl": np.zeros(n), "top1": np.ones(n)},
                            cand={"kl": cc.kl, "top1": cc.top1}, unpaired_base=[], unpaired_cand=[])
            looks = Looks(tuple(r.item_id for r in base), (None,) * len(base), {"kl": 0.0, "top1": 1.0})
            views.append(View(paired, "kl", ("kl", "top1") if cc.alternatives else ("kl",), looks))
        return tuple(views), cc

    def rekeyed(self, keys: Mapping[str, str]) -> "LogprobsSuite":
        # the pydoc corpus comes from the interpreter's stdlib: on another Python its key differs, while the
        # records a run stored are under the key it had then
        return dataclasses.replace(self, key=keys.get(self.suite, self.key))


def _corpus(ref: LogprobsSuiteRef, config_file: str) -> str:
    if ref.corpus == "pydoc":
        # the half of the Python reference topics that calibration never sees
        return "\n\n".join(calibration_texts(every=2, offset=1))
    if ref.corpus in ("stdlib", "docstrings"):
        # thousands of chunks where pydoc holds ~160: every module (any length), in the order of its text's hash
        from .corpora import candidates

        return "\n\n".join(d.text for d in candidates(ref.corpus, 0))
    try:
        return Path(ref.corpus).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read corpus {ref.corpus}: {e}", file=config_file, where="suites: logprobs") from None


def _suite_prompts(ref: LogprobsSuiteRef) -> list[str]:
    """A custom suite's own inputs, one chunk per item: a prompt, or its messages' contents in order."""
    from .custom import load_suite

    suite = load_suite(Path(ref.corpus.removeprefix("suite:")))
    return [i.prompt if i.prompt is not None else "\n".join(m.content for m in i.messages) for i in suite.items]


def resolve(ref: LogprobsSuiteRef, settings, policy, config_file: str = "") -> "LogprobsSuite | LongLogprobsSuite":
    """A campaign's `kind: logprobs` entry: chunks of a corpus, or (with `document_tokens`) long documents
    compared by depth."""
    if ref.document_tokens is not None:
        from .logprobs_long import resolve_long

        return resolve_long(ref, config_file)
    return load_logprobs_suite(ref, config_file)


def load_logprobs_suite(ref: LogprobsSuiteRef, config_file: str = "") -> LogprobsSuite:
    if ref.corpus.startswith("suite:"):
        chunks = _suite_prompts(ref)[:ref.chunks]
    else:
        text = " ".join(_corpus(ref, config_file).split())  # whitespace runs add nothing but tokens
        step = ref.chunk_chars
        chunks = [text[i:i + step] for i in range(0, len(text) - step + 1, step)][:ref.chunks]
    if len(chunks) < ref.chunks:
        unit = "prompts" if ref.corpus.startswith("suite:") else f"chunks of {ref.chunk_chars} characters"
        raise ConfigError(f"corpus {ref.corpus} holds {len(chunks)} {unit}; chunks: {ref.chunks} asks for more "
                          "(fewer chunks, shorter chunk_chars, or a larger corpus: stdlib holds about 3,000)",
                          file=config_file, where="suites: logprobs: chunks")
    key = key_hash({"chunks": stable_hash(chunks), "top_k": ref.top_k, "name": ref.name})
    return LogprobsSuite(name=ref.name, chunks=chunks, top_k=ref.top_k, key=f"logprobs:{ref.name}:{key}",
                         in_flight=InFlight.of(ref.concurrency, ref.max_concurrency, fallback=CONCURRENCY))


def _route(endpoint: Endpoint) -> PromptLogprobsRoute:
    route = endpoint.capabilities.prompt_logprobs
    if route is None:  # the plan refuses such a suite first; this guards a direct call
        raise ConfigError(f"the {endpoint.engine} engine serves no prompt logprobs: a logprobs suite cannot run on it")
    return route


async def _score(client: Client, endpoint: Endpoint, i: int, text: str, k: int, retries: int,
                 retry_backoff_s: float) -> Record:
    """One chunk's record, its text as the prompt by the engine's own route."""
    route = _route(endpoint)
    url, payload = route.request(endpoint, text, k)
    lp = await fetch_logprobs(client, route, url, payload, f"logprobs: chunk {i}", retries, retry_backoff_s)
    return chunk_record(i, text, k, lp, alternatives=route.alternatives)


def chunk_record(i: int, text: str, k: int, lp: dict, alternatives: bool = True) -> Record:
    """One chunk's record from its prompt logprobs (vLLM's echo shape: tokens, token_logprobs, top_logprobs)."""
    tokens, token_lp, top = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]
    scored = [x for x in token_lp[1:] if x is not None]
    nll = float(-np.mean(scored)) if scored else float("nan")
    extra = {"tokens": tokens, "lp": token_lp, "top": [t or {} for t in top], "n": len(scored)}
    if not alternatives:  # only the actual token at each position (TGI's route): no top-1 agreement from these
        extra["alternatives"] = False
    return Record(item_id=f"{i:04d}", scores={"nll": nll}, prompt_hash=stable_hash([text, k]),
                  doc_hash=stable_hash(text), response=None, extra=extra)


CONCURRENCY = 4  # chunks in flight: each is a whole prompt scored at once


def run_logprobs(suite: LogprobsSuite, endpoint: Endpoint, done: set[str], sink: Callable[[list[Record]], None],
                 concurrency: int = CONCURRENCY, timeout_s: float = 300, retries: int = 2, retry_backoff_s: float = 1.0) -> int:
    todo = [(i, c) for i, c in enumerate(suite.chunks) if f"{i:04d}" not in done]

    async def one(client: Client, i: int, text: str) -> None:
        sink([await _score(client, endpoint, i, text, suite.top_k, retries, retry_backoff_s)])

    gather_bounded(endpoint, timeout_s, concurrency,
                   [lambda client, i=i, text=text: one(client, i, text) for i, text in todo])
    return len(todo)


@dataclass(frozen=True)
class ChunkComparison:
    ids: list[str]
    kl: np.ndarray  # per chunk: mean per-token KL(base || variant), top-k approximation
    top1: np.ndarray  # per chunk: share of positions where the top tokens agree
    positions: list["PositionStats"]
    mismatched: list[str]  # chunks whose token sequences differ between the two (excluded)
    # False when a side served no alternatives (TGI's route): KL is then over {actual token, the rest}, a looser
    # lower bound, and top-1 agreement and delta-p are not measured (`top1` means nothing)
    alternatives: bool = True


def _actual_only(r: Record) -> list[dict[str, float]]:
    return [{} if x is None else {t: x} for t, x in zip(r.extra["tokens"], r.extra["lp"])]


def compare_chunks(base: list[Record], cand: list[Record]) -> ChunkComparison:
    from ..stats.distribution import compare_positions  # scipy: only when comparing
    b = {r.item_id: r for r in base}
    c = {r.item_id: r for r in cand}
    alternatives = all(r.extra.get("alternatives", True) for r in (*base, *cand))
    # both sides on the same footing: top-k against actual-token-only would be no bound at all
    tops = (lambda r: r.extra["top"]) if alternatives else _actual_only
    ids, kl, top1, pos, bad = [], [], [], [], []
    for i in sorted(b.keys() & c.keys()):
        if b[i].extra["tokens"] != c[i].extra["tokens"]:
            bad.append(i)  # different tokenizers: per-token comparison is meaningless
            continue
        ps = compare_positions(tops(b[i]), tops(c[i]))
        if len(ps.kl) == 0:
            continue
        ids.append(i)
        kl.append(float(ps.kl.mean()))
        top1.append(float(ps.top1_agree.mean()))
        pos.append(ps)
    return ChunkComparison(ids=ids, kl=np.array(kl), top1=np.array(top1), positions=pos, mismatched=bad,
                           alternatives=alternatives)


def perplexity(records: list[Record]) -> float:
    total = sum(r.scores["nll"] * r.extra["n"] for r in records)
    n = sum(r.extra["n"] for r in records)
    return float(np.exp(total / n)) if n else float("nan")
