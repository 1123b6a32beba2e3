"""Build lm-eval tasks and read their docs, offline, with no model (runs in the engine venv, never imports qeval).

Usage: python check_lmeval_tasks.py SPEC.json OUT.json
SPEC: {"groups": [{"include_path": dir | null, "tasks": [name, ...], "files": {name: yaml}}, ...]}
OUT:  per group, {name: {"ok": true, "n_docs": int} | {"ok": false, "problem": "missing" | "unknown" |
      "broken", "error": str, "dataset": str, "close": [name, ...]}}

Fast where it can be, since `qeval validate` waits for it: a task that reads a Hub dataset is answered from
its YAML alone (importing lm-eval and `datasets` takes 1-2 s); and only the folders that define the named
tasks are indexed (lm-eval's index of all its own ~14,000 task files takes ~18 s on a small CPU): the include
path, or for a built-in task its own folder, else the top-level folders of lm_eval/tasks whose YAMLs name it.
"""

import difflib
import importlib.util
import json
import re
import sys
import traceback
from pathlib import Path

import yaml

# what `datasets` / huggingface_hub say where a dataset is in neither a local file nor a cache, offline
_MISSING = ("OfflineModeIsEnabled", "Couldn't reach", "couldn't be found", "doesn't exist on the Hub",
            "Unable to find", "No such file", "FileNotFoundError", "DatasetNotFoundError", "LocalEntryNotFound")


def _builtin_folders(root: Path, names: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Per name, the top-level task folders whose YAMLs name it (as a task, group or tag); every task name seen."""
    # keys are quoted in generated YAMLs ("task": "mmlu_anatomy"); a tag may be one item of a list
    lines = {n: re.compile(r"(?m)^\s*(?:[\"']?(?:task|group|tag)[\"']?\s*:\s*|-\s*)[\"']?" + re.escape(n)
                           + r"[\"']?\s*$") for n in names}
    declared = re.compile(r"(?m)^[\"']?task[\"']?\s*:\s*[\"']?([\w.\-]+)")
    folders: dict[str, set[str]] = {n: set() for n in names}
    seen: set[str] = set()
    for p in root.rglob("*.yaml"):
        text = p.read_text(errors="replace")
        for n, line in lines.items():
            if n in text and line.search(text):
                folders[n].add(str(root / p.relative_to(root).parts[0]))
        seen.update(declared.findall(text))
    return {n: sorted(f) for n, f in folders.items()}, sorted(seen)


class _Plain(yaml.SafeLoader):
    """A task YAML as data: lm-eval's `!function` tags are not run."""


_Plain.add_multi_constructor("!", lambda loader, suffix, node: None)


def _plain(path: Path, depth: int = 0) -> dict:
    """The YAML's keys over those of the files it includes (as lm-eval merges them)."""
    cfg = yaml.load(path.read_text(), Loader=_Plain)
    if not isinstance(cfg, dict):
        return {}
    inc = cfg.pop("include", None)
    for name in ([inc] if isinstance(inc, str) else inc if isinstance(inc, list) else []):
        base = path.parent / name
        if depth < 8 and base.is_file():
            cfg = {**_plain(base, depth + 1), **cfg}
    return cfg


def _own_yaml(root: Path, name: str) -> Path | None:
    """A plain task in a top-level folder of its own name (hellaswag/hellaswag.yaml). A task is one YAML; a
    group or tag may gather tasks from several folders, so it is left to the scan."""
    folder = root / name
    declares = re.compile(r"(?m)^[\"']?task[\"']?\s*:\s*[\"']?" + re.escape(name) + r"[\"']?\s*$")
    for p in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
        try:
            if declares.search(p.read_text(errors="replace")) and _plain(p).get("task") == name:
                return p
        except (OSError, yaml.YAMLError):
            continue
    return None


def _hub_dataset(path: Path) -> str | None:
    """The Hub dataset ("org/name") a task reads, if that is all it reads. Offline, `datasets` refuses the Hub
    before it looks in the Hub's cache, then looks only in its own cache, which run_lmeval makes new for each
    run: such a task cannot load here, whatever else its YAML says. A task with a cache_dir of its own, code
    of its own, or a local folder by that name is left to lm-eval."""
    try:
        cfg = _plain(path)
    except (OSError, yaml.YAMLError):
        return None
    ds = cfg.get("dataset_path")
    kwargs = cfg.get("dataset_kwargs") if isinstance(cfg.get("dataset_kwargs"), dict) else {}
    if (not isinstance(ds, str) or ds.count("/") != 1 or ds.startswith((".", "/", "buckets/")) or Path(ds).exists()
            or "cache_dir" in kwargs or "class" in cfg or cfg.get("custom_dataset") is not None):
        return None
    return ds


def _touch(task) -> int:
    """Read what the run reads: the evaluation docs (the first one rendered), and the few-shot split if named."""
    docs = task.eval_docs
    if len(docs) == 0:
        raise ValueError("its evaluation split has no docs")
    doc = docs[0]
    task.doc_to_text(doc)
    task.doc_to_target(doc)
    if task.config.output_type == "multiple_choice":
        task.doc_to_choice(doc)
    split = getattr(task.config, "fewshot_split", None)
    if split is not None and len(task.dataset[split]) == 0:
        raise ValueError(f"its few-shot split {split!r} has no docs")
    return len(docs)


def _message(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:400]


def _problem(e: BaseException) -> str:
    chain, cur = [], e
    while cur is not None and len(chain) < 10:
        chain.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    text = " | ".join(chain)
    return "missing" if isinstance(e, (ConnectionError, FileNotFoundError)) or any(m in text for m in _MISSING) \
        else "broken"


def _dataset(tm, name: str) -> str:
    entry = tm.task_index.get(name)
    cfg = (entry.cfg if entry is not None else None) or {}
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    path = cfg.get("dataset_path") or ""
    return f"{path}, data_files {json.dumps(files)}" if files else str(path)


def _check_one(tm, name: str, yaml_file: str | None) -> dict:
    if name not in tm.task_index:
        if yaml_file:  # lm-eval skipped the file while indexing: say why
            from lm_eval.tasks._yaml_loader import load_yaml

            try:
                load_yaml(Path(yaml_file), resolve_func=False, recursive=True)
            except Exception as e:  # noqa: BLE001 - its own words are the message
                return {"ok": False, "problem": "broken", "error": f"lm-eval cannot read its YAML: {_message(e)}"}
        return {"ok": False, "problem": "unknown", "error": "not in lm-eval's index", "close": []}
    try:
        built = tm.load([name])["tasks"]
    except Exception as e:  # noqa: BLE001 - a task's dataset is loaded as it is built
        traceback.print_exc()
        named = re.search(r"reach '([^']+)'", str(e))  # a group's or tag's own entry names no dataset
        return {"ok": False, "problem": _problem(e), "error": _message(e),
                "dataset": _dataset(tm, name) or (named.group(1) if named else "")}
    n = 0
    for sub in built.values():
        try:
            n += _touch(sub)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            return {"ok": False, "problem": _problem(e), "error": f"{sub.task_name}: {_message(e)}",
                    "dataset": _dataset(tm, sub.task_name)}
    return {"ok": True, "n_docs": n, "subtasks": sorted(built)}


def check(groups: list[dict]) -> list[dict]:
    builtins = Path(importlib.util.find_spec("lm_eval").origin).parent / "tasks"  # found, not imported
    out: list[dict[str, dict]] = [{} for _ in groups]
    pending = []  # (group index, name, its own YAML if known)
    for k, g in enumerate(groups):
        for name in g["tasks"]:
            own = g.get("files", {}).get(name) if g["include_path"] else _own_yaml(builtins, name)
            hub = _hub_dataset(Path(own)) if own else None
            if hub:
                out[k][name] = {"ok": False, "problem": "missing", "dataset": hub,
                                "error": f"{hub} is a Hub dataset; offline, `datasets` reads it from no cache here"}
            else:
                pending.append((k, name, own))
    if not pending:
        return out
    from lm_eval.tasks import TaskManager

    wanted = [n for k, n, own in pending if not groups[k]["include_path"] and own is None]
    folders, seen = _builtin_folders(builtins, wanted) if wanted else ({}, [])
    local, full = {}, None
    for k, name, own in pending:
        g = groups[k]
        if g["include_path"]:
            if k not in local:
                local[k] = TaskManager(include_path=g["include_path"], include_defaults=False)
            out[k][name] = _check_one(local[k], name, own)
        elif own is None and not folders.get(name):
            out[k][name] = {"ok": False, "problem": "unknown", "error": "not an lm-eval task",
                            "close": difflib.get_close_matches(name, seen, n=3)}
        else:
            where = [str(builtins / name)] if own else folders[name]
            out[k][name] = _check_one(TaskManager(include_path=where, include_defaults=False), name, None)
            if not out[k][name]["ok"] and out[k][name]["problem"] != "missing":
                # e.g. a group whose tasks live in other folders: lm-eval's whole index, slow but complete
                full = full or TaskManager()
                out[k][name] = _check_one(full, name, None)
    return out


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(check(spec["groups"]), indent=1))
