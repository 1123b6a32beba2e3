"""Calibration text that exists offline on every machine: the Python reference manual's topics.

It ships inside CPython (`pydoc_data.topics`), is real English technical prose written by others,
and is the same everywhere for a given Python version, so recipes stay reproducible.
"""

from __future__ import annotations


def calibration_texts(every: int = 2, offset: int = 0) -> list[str]:
    from pydoc_data.topics import topics

    keys = sorted(topics)
    return [topics[k] for k in keys[offset::every]]
