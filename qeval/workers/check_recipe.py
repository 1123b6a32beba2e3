"""Read a team's llm-compressor recipe file with llm-compressor itself (runs in its venv, never imports qeval).

Usage: python check_recipe.py RECIPE
Prints one JSON line: {"ok": true, "modifiers": [class names]} or {"ok": false, "error": text, "key": the
YAML key at fault where it can tell (a modifier's type, or a field of one), "close": a known name like it}.
"""

import difflib
import json
import re
import sys


def check(path: str) -> dict:
    from llmcompressor.modifiers.factory import ModifierFactory
    from llmcompressor.recipe import Recipe

    try:
        recipe = Recipe.create_instance(path)
    except Exception as e:  # what llm-compressor raises is the answer: pydantic's, yaml's, its own ValueError
        key, close, text = None, None, f"{type(e).__name__}: {e}"
        errors = getattr(e, "errors", None)
        if callable(errors):  # pydantic: the modifier, the field, what is wrong with it
            first = (errors() or [{}])[0]
            loc = first.get("loc") or ()
            key = str(loc[-1]) if loc else None
            text = f"{getattr(e, 'title', 'modifier')}: {'.'.join(map(str, loc))}: {first.get('msg', e)}"
        elif (m := re.search(r"No modifier of type '([^']+)'", str(e))):
            key = m.group(1)
            known = [*ModifierFactory._main_registry, *ModifierFactory._registered_registry,
                     *ModifierFactory._experimental_registry]
            close = next(iter(difflib.get_close_matches(key, known, n=1)), None)
        return {"ok": False, "error": text, "key": key, "close": close}
    mods = [type(m).__name__ for m in recipe.modifiers]
    if not mods:  # llm-compressor reads modifiers only under "<name>_stage:" then "<name>_modifiers:"
        return {"ok": False, "error": "no modifiers in it: llm-compressor reads them under a key ending in "
                                      "_stage, then one ending in _modifiers", "key": None, "close": None}
    return {"ok": True, "modifiers": mods}


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1])))
