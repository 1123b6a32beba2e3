"""A team's llm-compressor recipe file and calibration set, read in the quantizer's own environment by the code
that will use them, before anything starts: an error names the file and the place (exit 2)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from ..errors import ConfigError
from ..settings import Runtime
from .spec import CalibrationSpec
from .worker import WORKERS


def line_of_key(text: str, key: str) -> int | None:
    """The first line where `key` is written as a YAML key (or a JSON one): llm-compressor's errors name keys,
    not lines. Hand-written: a key search over the text is all this needs."""
    pattern = re.compile(rf"""^\s*["']?{re.escape(key)}["']?\s*:""")
    return next((n for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)), None)


def _tool_answer(runtime: Runtime, script: str, args: list[str], what: str, file: str, where: str) -> dict:
    """One check script's JSON line, run as the quantizer runs (its venv, the caller's environment, offline)."""
    env = runtime.env(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.run([str(runtime.python), str(WORKERS / script), *args], capture_output=True, text=True,
                          env=env, timeout=300)  # a hang bound: it imports the tool and reads the file, seconds
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ConfigError(f"{what} (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:] or ''}",
                          file=file, where=where) from None


def group_problem(base: Path, group: int) -> str | None:
    """Why weight groups of `group` columns do not tile this model's linear layers (llm-compressor refuses them
    after loading the model and calibrating), or None. Read from its config: q/k/v and gate/up take hidden_size
    columns, o_proj the heads' width, down_proj intermediate_size."""
    try:
        cfg = json.loads((base / "config.json").read_text())
    except (OSError, ValueError):
        return None  # an unreadable config is the engine's and the quantizer's to report
    cfg = cfg.get("text_config") or cfg
    hidden, inter, heads = cfg.get("hidden_size"), cfg.get("intermediate_size"), cfg.get("num_attention_heads")
    widths = {"hidden_size": hidden, "intermediate_size": inter,
              "attention width": heads * (cfg.get("head_dim") or hidden // heads) if heads and hidden else None}
    bad = {k: w for k, w in widths.items() if isinstance(w, int) and w % group}
    if not bad:
        return None
    fits = [g for g in (128, 64, 32, 16) if all(w % g == 0 for w in widths.values() if isinstance(w, int))]
    return (f"weight groups of {group} columns do not divide this model's layers ("
            + ", ".join(f"{k} {w}" for k, w in bad.items()) + "); "
            + (f"group_size {fits[0]} does" if fits else "no group size of 16-128 does"))


def check_recipe_file(runtime: Runtime, path: Path, where: str) -> list[str]:
    """The recipe's modifiers, or a ConfigError (exit 2) naming the file, line and key."""
    if not runtime.exists():
        return []  # the quantizer's missing environment is reported where it would run (exit 3)
    got = _tool_answer(runtime, "check_recipe.py", [str(path)], "llm-compressor could not read the recipe",
                       str(path), where)
    if got["ok"]:
        return got["modifiers"]
    key, line = got.get("key"), None
    if key:
        line = line_of_key(path.read_text(errors="replace"), key)
    hint = f" Did you mean {got['close']!r}?" if got.get("close") else ""
    at = f"{where}, key {key!r}" if key else where
    raise ConfigError(got["error"].splitlines()[0] + hint, file=str(path), where=f"line {line}: {at}" if line else at)


def check_calibration(runtime: Runtime, cal: CalibrationSpec, config_file: str, where: str) -> dict:
    """{examples, usable} of the set as the quantizer will read it, or a ConfigError (exit 2) naming the
    campaign file and the recipe.calibration key at fault; the message names the data file."""
    if not runtime.exists():
        return {}  # as above: exit 3 where it would run
    args = [str(cal.path), cal.field] + ([cal.split] if cal.split else [])
    got = _tool_answer(runtime, "check_calibration.py", args, f"datasets could not read {cal.path}", config_file,
                       f"{where}.path")
    if not got["ok"]:
        raise ConfigError(got["error"], file=config_file, where=f"{where}.{got.get('key') or 'path'}")
    return got
