"""`NAME=FORMAT:SOURCE`, as `qeval compare` takes a variant on its command line: the format named, or the one
registered importer that claims the source."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from . import IMPORTERS


def parse_source(text: str, option: str) -> tuple[str, str, Path]:
    """(name, format, path). The format may be left out only when exactly one importer claims the path."""
    name, eq, rest = text.partition("=")
    if not eq or not name or not rest:
        raise ConfigError(f"{option} {text!r}: expected NAME=FORMAT:PATH (e.g. w4=lm_eval:runs/w4/)")
    fmt, colon, path = rest.partition(":")
    if colon and fmt in IMPORTERS.every_name():
        return name, fmt, Path(path)
    src = Path(rest)
    claimed = [k for k in IMPORTERS.every_name() if IMPORTERS.get(k).claims(src)]
    if len(claimed) == 1:
        return name, claimed[0], src
    known = ", ".join(IMPORTERS.every_name())
    if not claimed:
        raise ConfigError(f"{option} {text!r}: no results format recognises {src}; name it as NAME=FORMAT:PATH "
                          f"(formats: {known})")
    raise ConfigError(f"{option} {text!r}: {src} could be {' or '.join(claimed)}; name the format as NAME=FORMAT:PATH")
