"""Read a team's calibration set with HF datasets as the quantizer will (runs in the llm-compressor venv, never
imports qeval): a bad file, split or column is found before anything starts, not when its variant is made.

Usage: python check_calibration.py PATH FIELD [SPLIT]
Prints one JSON line: {"ok": true, "examples": n, "usable": n} or {"ok": false, "error": text, "key": the
recipe.calibration key at fault (path, split or field)}.
"""

import difflib
import json
import sys


def _message_problem(value) -> str | None:
    if not isinstance(value, list) or not value:
        return f"a list of chat messages, not {type(value).__name__}"
    bad = next((m for m in value if not (isinstance(m, dict) and "role" in m and "content" in m)), None)
    return None if bad is None else f"messages with role and content, not {str(bad)[:80]}"


def check(path: str, field: str, split: str | None) -> dict:
    # the quantizer's own reader: what passes here is what it will read
    from quantize_llmc import load_examples

    try:
        ds = load_examples(path, split)
    except SystemExit as e:  # the reader's own words: a file kind or a split it cannot take
        return {"ok": False, "error": str(e), "key": "split" if "split" in str(e) else "path"}
    except Exception as e:  # what datasets raises on a file it cannot parse is the answer
        return {"ok": False, "error": f"calibration data {path}: {type(e).__name__}: {str(e).splitlines()[0]}",
                "key": "path"}
    if field not in ds.column_names:
        close = difflib.get_close_matches(field, ds.column_names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return {"ok": False, "key": "field",
                "error": f"calibration data {path}: no column {field!r} (it has {ds.column_names}){hint}"}
    usable = 0
    for n, value in enumerate(ds[field]):
        problem = _message_problem(value) if field == "messages" else (
            None if isinstance(value, str) else f"text, not {type(value).__name__}")
        if problem:
            return {"ok": False, "key": "field", "error": f"calibration data {path}: example {n}: "
                                                          f"column {field!r} holds {problem}"}
        usable += bool(value)
    if not usable:
        return {"ok": False, "key": "path", "error": f"calibration data {path}: no non-empty example"}
    return {"ok": True, "examples": len(ds), "usable": usable}


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)))
