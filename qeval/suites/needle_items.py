"""The needle suite's items, and how a prompt is laid out in tokens: pure, seeded, the same on every machine.

An item is one needle ("The special code for {key} is {value}.") at one depth of one haystack of one length.
Its key (a pair of words) and 7-digit value are drawn per haystack by a `random.Random` seeded with a stable
hash of (seed, length, haystack) — never Python's `hash()`, which differs per process — so every variant, every
rerun and every machine asks the same items, and the depths of one haystack share its filler and its needle:
depth is the only thing that changes within a haystack (its group, for the clustered statistics).

The layout works on token ids the engine gave (suites/needle.py tokenizes the pieces): filler sentences are
laid end to end from a seeded start, cut so that the whole prompt is exactly `length` tokens, and the needle
goes in at the sentence boundary nearest `depth` of the filler, so that a needle never splits a sentence.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from ..hashing import stable_hash

# RULER's noise haystack: sentences that say nothing, so the needle is the only fact in the prompt
REPEAT = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
# the words keys are made of: plain, distinct, one word each; a fixed list (not read from the interpreter's
# text) so that a key is the same on every Python
WORDS = ("amber", "anchor", "apple", "arrow", "autumn", "badge", "basket", "beacon", "birch", "blossom", "bottle",
         "bridge", "bronze", "bucket", "cabin", "camel", "candle", "canyon", "carpet", "castle", "cedar", "cherry",
         "circle", "cobalt", "copper", "coral", "cotton", "crystal", "dagger", "desert", "dragon", "eagle", "ember",
         "engine", "falcon", "feather", "forest", "fossil", "garden", "garnet", "ginger", "glacier", "granite",
         "harbor", "hazel", "helmet", "island", "ivory", "jacket", "jasmine", "kettle", "ladder", "lantern", "lemon",
         "linen", "magnet", "maple", "marble", "meadow", "mirror", "monkey", "needle", "nickel", "oasis", "olive",
         "orchid", "otter", "paddle", "parrot", "pebble", "pepper", "pillow", "planet", "pocket", "prairie", "puzzle",
         "quartz", "rabbit", "raven", "ribbon", "river", "rocket", "saddle", "salmon", "silver", "socket", "spider",
         "spruce", "summit", "tablet", "temple", "thunder", "timber", "tulip", "tunnel", "velvet", "violet", "walnut",
         "willow", "window", "winter", "zephyr")
# a sentence ends at . ! or ? before a space, or at a line's end: a code block or a list without full stops is cut
# by lines, so that no "sentence" is so long that the boundary nearest a depth lies far from it
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")


@dataclass(frozen=True)
class Needle:
    key: str  # two words: "copper lantern"
    value: str  # 7 digits

    @property
    def sentence(self) -> str:
        return f" The special code for {self.key} is {self.value}."


@dataclass(frozen=True)
class Haystack:
    """One haystack: its needle, the needles that are not asked (distractors) with where they go (a fraction of
    the filler), and where its filler starts (a sentence index, taken modulo the filler's sentences)."""

    length: int
    index: int
    needle: Needle
    distractors: tuple[tuple[Needle, float], ...]
    start: int

    @property
    def group(self) -> str:
        return f"L{self.length}-h{self.index:02d}"

    def question(self) -> str:
        return f"\n\nWhat is the special code for {self.needle.key}? The special code for {self.needle.key} is"


@dataclass(frozen=True)
class NeedleItem:
    haystack: Haystack
    depth: float  # 0: the needle opens the filler; 1: it closes it

    @property
    def item_id(self) -> str:
        return f"{self.haystack.group}-d{round(self.depth * 100):03d}"

    @property
    def group(self) -> str:
        return self.haystack.group


def seeded(seed: int, *what: object) -> random.Random:
    """A generator for one haystack: the same on every process and Python (a stable hash, not `hash()`)."""
    return random.Random(int(stable_hash([seed, *what]), 16))


def haystack(seed: int, length: int, index: int, distractors: int) -> Haystack:
    rng = seeded(seed, length, index)
    keys: list[str] = []
    values: list[str] = []
    while len(keys) < 1 + distractors:  # in the order drawn (a list, not a set: a set's order is per process)
        key, value = " ".join(rng.sample(WORDS, 2)), str(rng.randrange(1_000_000, 10_000_000))
        if key not in keys and value not in values:
            keys.append(key)
            values.append(value)
    asked, *others = (Needle(k, v) for k, v in zip(keys, values))
    return Haystack(length=length, index=index, needle=asked,
                    distractors=tuple((d, rng.random()) for d in others), start=rng.randrange(1 << 30))


def layout(lengths: Sequence[int], depths: Sequence[float], haystacks: int, seed: int,
           distractors: int = 0) -> list[NeedleItem]:
    """Every item: per length, per haystack, per depth (in that order)."""
    return [NeedleItem(h, d) for n in lengths for k in range(haystacks)
            for h in [haystack(seed, n, k, distractors)] for d in depths]


def sentences(text: str) -> list[str]:
    """A filler text as sentences (or lines), each with the space before it (so that ids laid end to end read as
    text)."""
    out = [" " + " ".join(s.split()) for s in SENTENCE_END.split(text)]
    return [s for s in out if s.strip()]


@dataclass(frozen=True)
class Laid:
    ids: tuple[int, ...]
    needle_at: int  # the needle's first token's position in the prompt
    filler_tokens: int


def assemble(filler: Sequence[Sequence[int]], start: int, needle: Sequence[int], question: Sequence[int],
             distractors: Sequence[tuple[Sequence[int], float]], length: int, depth: float) -> Laid:
    """A prompt of exactly `length` ids: filler sentences from `start` on (round the list as often as needed),
    the needle at the sentence boundary nearest `depth` of the filler, each distractor at the boundary nearest
    its own fraction, the question last. The filler is cut to fit at its end, before the question; a depth of 1
    puts the needle after the cut. ValueError: the needles and question alone do not fit."""
    budget = length - len(question) - len(needle) - sum(len(d) for d, _ in distractors)
    if budget < 0:
        raise ValueError(f"a needle prompt of {length} tokens cannot hold its needles and question "
                         f"({length - budget} tokens)")
    if not filler or not any(filler):
        raise ValueError("the filler has no tokens")
    sents: list[Sequence[int]] = []
    n, k = 0, start % len(filler)
    while n < budget:
        s = filler[k][:budget - n]
        sents.append(s)
        n += len(s)
        k = (k + 1) % len(filler)
    bounds = [0]
    for s in sents:
        bounds.append(bounds[-1] + len(s))

    def nearest(frac: float) -> int:  # a boundary's index among `bounds`
        want = frac * budget
        return min(range(len(bounds)), key=lambda i: (abs(bounds[i] - want), i))

    inserts = sorted([(nearest(f), 1, list(d)) for d, f in distractors] + [(nearest(depth), 0, list(needle))],
                     key=lambda t: (t[0], t[1]))
    out: list[int] = []
    at, j = -1, 0
    for i in range(len(sents) + 1):
        while j < len(inserts) and inserts[j][0] == i:
            if inserts[j][1] == 0:
                at = len(out)
            out += inserts[j][2]
            j += 1
        if i < len(sents):
            out += list(sents[i])
    out += list(question)
    assert len(out) == length
    return Laid(ids=tuple(out), needle_at=at, filler_tokens=budget)
