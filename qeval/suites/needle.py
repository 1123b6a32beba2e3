"""Retrieval at length (`kind: needle`): can the variant still find a fact deep in a long prompt?

Items come from suites/needle_items.py (seeded, the same on every machine). Per variant, the pieces of each
prompt (filler sentences, needle, distractors, question) are tokenized by the variant's own engine (its tokenize
route) and laid end to end as token ids, so that each prompt is exactly its length in tokens and its needle
exactly where its record says. The prompt ends in the question and the start of the answer; the answer is
greedy, and `acc` is 1 where the needle's 7-digit value appears in it.

An item's group is its haystack: the depths of one haystack share its filler and needle (and so the prefix a
server may cache), and their results are not independent, so the gate's statistics are clustered by haystack.
Beside `acc`, each length is a view of its own (`acc@4k`): reported, and gated where a rule names it. The
record keeps the accuracy of each (length, depth) cell for the report's heat map.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .. import aio
from ..engines import Endpoint
from ..errors import ConfigError, EngineError
from ..hashing import key_hash, stable_hash
from ..record.metrics import MetricSpec, indicator
from ..record.store import Record
from .base import InFlight, ItemSuite, Pairing, Part, SuiteRun, View, requests_in_flight, run_items
from .http import session, tokenize
from .logprobs_long import tokens_label
from .needle_items import REPEAT, Haystack, NeedleItem, assemble, layout, sentences
from .spec import NeedleSuiteRef

CONCURRENCY = 4
NAMED = ("repeat", "pydoc", "docstrings")
WINDOW = 64  # filler sentences tokenized at once while a haystack's filler grows to its length


def filler_sentences(filler: str) -> list[str]:
    """The filler as sentences: RULER's noise sentences, held-out Python reference text, the standard
    library's docstrings (in the order of their text's hash), or a file's text."""
    if filler == "repeat":
        return [" " + s for s in REPEAT]
    if filler == "pydoc":
        from ..quantize.calibration import calibration_texts

        return sentences("\n\n".join(calibration_texts(every=2, offset=1)))
    if filler == "docstrings":
        from .corpora import documents

        return sentences("\n\n".join(d.text for d in sorted(documents("docstrings", 0), key=lambda d: d.key)))
    try:
        return sentences(Path(filler).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read filler {filler} as UTF-8 text: {e}") from None


@dataclass(frozen=True)
class NeedleSuite(ItemSuite):
    name: str
    items: tuple[NeedleItem, ...]
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    filler: tuple[str, ...]  # its sentences
    filler_key: str
    max_tokens: int
    key: str
    in_flight: InFlight = InFlight(CONCURRENCY)

    @property
    def suite(self) -> str:
        return f"needle/{self.name}"

    def length_metric(self, n: int) -> str:
        return f"acc@{tokens_label(n)}"

    # -- the Suite protocol (suites/base.py) -------------------------------------------------------
    @property
    def parts(self) -> tuple[Part, ...]:
        where = "needle suite"
        per_length = tuple(self.length_metric(n) for n in self.lengths)
        metrics: dict[str, MetricSpec] = {"acc": indicator(where), **{m: indicator(where) for m in per_length}}
        return (Part(suite=self.suite, key=self.key, metrics=metrics, primary="acc", gated=("acc", *per_length),
                     planned=("acc", *per_length), grouped=True, needs_tokenize=True),)

    @property
    def concurrency(self) -> int:
        return self.in_flight.fixed

    def tally(self) -> dict[str, int]:
        return {"needle suites": 1, "needle items": len(self.items)}

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        return [(self.suite, "acc", len(self.items), tuple(i.group for i in self.items))]

    def run(self, run: SuiteRun) -> None:
        (part,) = self.parts
        if run.is_complete(part) or run.skip(part):
            return
        n = requests_in_flight(run, self.in_flight, [part], max(self.lengths), self.max_tokens)
        run_items(run, part, [(i.item_id, i.group) for i in self.items],
                  lambda done, put: aio.run(self._ask(run.endpoint, done, put, n, run.timeout_s,
                                                          run.retry_backoff_s)),
                  note=f" ({len(self.items)} needles, {len(self.items) // len(self.depths)} haystacks)")

    async def _ask(self, endpoint: Endpoint, done: set[str], sink: Callable[[list[Record]], None], concurrency: int,
                   timeout_s: float, retry_backoff_s: float, retries: int = 2) -> None:
        route = endpoint.capabilities.tokenize
        if route is None:  # the plan refuses such a suite first; this guards a direct call
            raise ConfigError(f"the {endpoint.engine} engine has no tokenize route: {self.suite} cannot run on it")
        todo = [i for i in self.items if i.item_id not in done]
        if not todo:
            return
        cache: dict[str, tuple[int, ...]] = {}
        sem = asyncio.Semaphore(concurrency)
        async with session(endpoint, timeout_s, concurrency) as client:

            async def ids_of(text: str) -> tuple[int, ...]:
                if text not in cache:
                    async with sem:
                        tok = await tokenize(client, endpoint, route, text, f"{self.suite}: tokenizing")
                    if tok.max_model_len is not None and max(self.lengths) + self.max_tokens > tok.max_model_len:
                        raise EngineError(f"{self.suite}: a prompt of {max(self.lengths)} tokens and its answer "
                                          f"({self.max_tokens}) exceed the served context of {tok.max_model_len}")
                    cache[text] = tok.ids
                return cache[text]

            async def window(h: Haystack, budget: int) -> list[tuple[int, ...]]:
                """The haystack's filler sentences from its start on, tokenized until they hold `budget` ids."""
                out: list[tuple[int, ...]] = []
                k = h.start % len(self.filler)
                while sum(len(s) for s in out) < budget:
                    texts = [self.filler[(k + j) % len(self.filler)] for j in range(WINDOW)]
                    out += await asyncio.gather(*(ids_of(t) for t in texts))
                    k = (k + WINDOW) % len(self.filler)
                return out

            async def one(item: NeedleItem, filler: list[tuple[int, ...]]) -> None:
                h = item.haystack
                needle, question = await ids_of(h.needle.sentence), await ids_of(h.question())
                others = [(await ids_of(d.sentence), f) for d, f in h.distractors]
                laid = assemble(filler, 0, needle, question, others, h.length, item.depth)
                body = {"model": endpoint.model, "prompt": route.prompt(list(laid.ids)), "max_tokens": self.max_tokens,
                        "temperature": 0.0}
                async with sem:
                    text = await client.post_json("/completions", body, what=f"{self.suite}: item {item.item_id}",
                                                  retries=retries, retry_backoff_s=retry_backoff_s,
                                                  parse=lambda answer: answer["choices"][0]["text"] or "")
                sink([needle_record(item, laid.ids, laid.needle_at, laid.filler_tokens, text, self.filler_key)])

            by_haystack: dict[str, list[NeedleItem]] = {}
            for i in todo:
                by_haystack.setdefault(i.group, []).append(i)

            async def haystack(group: list[NeedleItem]) -> None:
                # its depths are asked together: they share the filler before the needle, a prefix a server caches
                h = group[0].haystack
                pieces = [h.needle.sentence, h.question(), *(d.sentence for d, _ in h.distractors)]
                fixed = sum(len(ids) for ids in await asyncio.gather(*(ids_of(t) for t in pieces)))
                filler = await window(h, h.length - fixed)
                await asyncio.gather(*(one(i, filler) for i in group))

            await asyncio.gather(*(haystack(g) for g in by_haystack.values()))

    def views(self, part: Part, base: list[Record], cand: list[Record]) -> tuple[View, ...]:
        """`acc` over every item (grouped by haystack, looked at by sequential gates), then `acc@<length>` per
        length over that length's items."""
        (whole,) = super().views(part, base, cand)
        p = whole.paired
        if "acc" not in p.base:
            return (whole,)
        from ..verdict.pairing import Paired

        length = {r.item_id: int(r.extra.get("length", 0)) for r in base}
        out = [whole]
        for n in self.lengths:
            at = [k for k, i in enumerate(p.ids) if length.get(i) == n]
            if not at:
                continue
            m = self.length_metric(n)
            sub = Paired(ids=[p.ids[k] for k in at], groups=[p.groups[k] for k in at],
                         base={m: p.base["acc"][at]}, cand={m: p.cand["acc"][at]}, unpaired_base=[], unpaired_cand=[])
            out.append(View(sub, None, (m,)))
        return tuple(out)

    def pair(self, part: Part, base: list[Record], cand: list[Record]) -> Pairing:
        from ..record.measurements import Strata, Stratum

        pairing = super().pair(part, base, cand)
        cells = strata(base, cand)
        if not cells:
            return pairing
        return dataclasses.replace(pairing, strata=Strata(axis="length x depth",
                                                          cells=[Stratum.model_validate(c) for c in cells]))

    def rekeyed(self, keys: Mapping[str, str]) -> "NeedleSuite":
        # a named filler comes from the interpreter's stdlib: on another Python its key differs, while the
        # records a run stored are under the key it had then
        return dataclasses.replace(self, key=keys.get(self.suite, self.key))


def needle_record(item: NeedleItem, ids: Sequence[int], needle_at: int, filler_tokens: int, text: str,
                  filler_key: str) -> Record:
    """One needle's result: 1 where its value appears in the answer. The prompt's hash is its ids' (two variants
    that tokenize it differently did not see the same prompt); its layout is kept for the strata and a reader."""
    h = item.haystack
    return Record(item_id=item.item_id, scores={"acc": 1.0 if h.needle.value in text else 0.0},
                  prompt_hash=stable_hash(list(ids)), group=item.group, response=text,
                  doc_hash=stable_hash([filler_key, h.length, h.index, item.depth, h.needle.key, h.needle.value]),
                  extra={"length": h.length, "depth": item.depth, "needle_at": needle_at, "prompt_tokens": len(ids),
                         "filler_tokens": filler_tokens, "value": h.needle.value})


def strata(base: Sequence[Record], cand: Sequence[Record]) -> list[dict]:
    """Per (length, depth) cell of the items both sides have: its items, each side's accuracy, and the
    variant's less the baseline's; with the mean position of the needle in tokens."""
    b = {r.item_id: r for r in base if r.sample == 0}
    c = {r.item_id: r for r in cand if r.sample == 0}
    cells: dict[tuple[int, float], list[tuple[float, float, int]]] = {}
    for i in sorted(b.keys() & c.keys()):
        rb = b[i]
        at = (int(rb.extra["length"]), float(rb.extra["depth"]))
        cells.setdefault(at, []).append((rb.scores["acc"], c[i].scores["acc"], int(rb.extra["needle_at"])))
    out = []
    for (n, d), rows in sorted(cells.items()):
        xb, xc, pos = (np.array([r[k] for r in rows], dtype=float) for k in range(3))
        out.append(dict(length=n, depth=d, items=len(rows), needle_at=int(round(pos.mean())), base=float(xb.mean()),
                        variant=float(xc.mean()), delta=float((xc - xb).mean())))
    return out


def resolve(ref: NeedleSuiteRef, settings, policy, config_file: str = "") -> NeedleSuite:
    if not isinstance(ref.lengths, list):
        raise ConfigError("lengths: auto is set from the served context length by the plan", file=config_file,
                          where="suites: needle: lengths")
    try:
        filler = filler_sentences(ref.filler)
    except ConfigError as e:
        raise ConfigError(str(e), file=config_file, where="suites: needle: filler") from None
    if not filler:
        raise ConfigError(f"filler {ref.filler} has no sentences", file=config_file, where="suites: needle: filler")
    filler_key = stable_hash(filler)
    items = layout(ref.lengths, ref.depths, ref.haystacks, ref.seed, ref.distractors)
    key = key_hash({"filler": filler_key, "lengths": ref.lengths, "depths": ref.depths, "haystacks": ref.haystacks,
                    "distractors": ref.distractors, "seed": ref.seed, "max_tokens": ref.max_tokens, "name": ref.name,
                    "named": ref.filler in ("pydoc", "docstrings")})
    return NeedleSuite(name=ref.name, items=tuple(items), lengths=tuple(ref.lengths), depths=tuple(ref.depths),
                       filler=tuple(filler), filler_key=filler_key, max_tokens=ref.max_tokens,
                       key=f"needle:{ref.name}:{key}",
                       in_flight=InFlight.of(ref.concurrency, ref.max_concurrency, fallback=CONCURRENCY))
