"""Named offline sources of long documents: text that ships with Python itself, or the user's own files.

A long-context suite needs documents of thousands of tokens that are on every machine without a download:
- `stdlib`: the standard library's own modules (`Lib/*.py`), one document each;
- `docstrings`: each stdlib module's docstrings (read with `ast`, nothing imported), joined;
- `pydoc`: the half of the Python reference topics that calibration never sees (quantize/calibration.py),
  joined in order into documents of about `chars` characters (the topics are short);
- a FILE: its text, cut into documents of about `chars` characters at paragraph breaks;
- a DIR: each UTF-8 file under it (sorted), one document each.

Documents come in a deterministic order that depends on their text only (a hash of it), not on where the
files lie, so a run on another machine with the same Python asks the same documents. A document's length
in tokens is known only once a variant's engine tokenizes it: `candidates` returns those long enough in
characters to be likely long enough in tokens; the suite keeps the first that are.
"""

from __future__ import annotations

import ast
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..hashing import stable_hash

NAMED = ("stdlib", "docstrings", "pydoc")
# the fewest characters a token takes, as a bound from below: code and prose run 3-4 characters a token, so a
# text of fewer than 2 characters a token asked is not long enough, and one that is may still be short
CHARS_PER_TOKEN_FLOOR = 2


@dataclass(frozen=True)
class Document:
    name: str  # where it came from ("stdlib:argparse.py", "pydoc:3"), for a reader
    text: str

    @property
    def key(self) -> str:
        return stable_hash(self.text)


def _stdlib_files() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _docstrings(source: str) -> str:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return "\n\n".join(d for n in nodes if (d := ast.get_docstring(n)))


def _joined(parts: list[str], chars: int, name: str) -> list[Document]:
    """Consecutive parts joined into documents of at least `chars` characters (the last, shorter, left out)."""
    out, cur = [], []
    for p in parts:
        cur.append(p)
        if sum(len(x) for x in cur) >= chars:
            out.append(Document(f"{name}:{len(out)}", "\n\n".join(cur)))
            cur = []
    return out


def documents(corpus: str, chars: int) -> list[Document]:
    """Every document of the corpus, in no particular order."""
    if corpus == "stdlib":
        return [Document(f"stdlib:{p.name}", t) for p in _stdlib_files() if (t := _read(p))]
    if corpus == "docstrings":
        return [Document(f"docstrings:{p.name}", d) for p in _stdlib_files()
                if (t := _read(p)) and (d := _docstrings(t))]
    if corpus == "pydoc":
        from ..quantize.calibration import calibration_texts

        return _joined(calibration_texts(every=2, offset=1), chars, "pydoc")
    path = Path(corpus)
    if path.is_dir():
        return [Document(str(p.relative_to(path)), t) for p in sorted(path.rglob("*"))
                if p.is_file() and (t := _read(p))]
    text = _read(path)
    if text is None:
        raise ConfigError(f"cannot read corpus {corpus} as UTF-8 text")
    return _joined(text.split("\n\n"), chars, path.name)


def candidates(corpus: str, tokens: int) -> list[Document]:
    """The corpus's documents that may hold `tokens` tokens, in the order of their text's hash."""
    chars = CHARS_PER_TOKEN_FLOOR * tokens
    docs = [d for d in documents(corpus, 2 * chars) if len(d.text) >= chars]
    return sorted(docs, key=lambda d: d.key)


def named_key(corpus: str) -> bool:
    """Whether the corpus's text comes from the interpreter (its key then differs on another Python)."""
    return corpus in NAMED
