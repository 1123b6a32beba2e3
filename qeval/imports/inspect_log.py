"""inspect_ai's eval logs: a `.eval` archive (`header.json`, `samples/<id>_epoch_<n>.json`, `reductions.json`) or
the same log as one `.json` file.

Read with the standard library alone (and zstd's decoder for archives inspect compressed with it), never with
inspect_ai, so a log is read as inspect wrote it whatever inspect is installed beside qeval. An item is a sample id;
its score is the sample's own where the task ran one epoch, else the log's reduction over the epochs (inspect's own
figure, under the reducer the log names). inspect's letter values are read as declared: C is 1, I and N are 0; P
(partial credit) is 0.5 only where the metric is declared continuous, and any other string is refused (inspect reads
an unknown string as 0 with a warning; qeval does not guess). inspect records no prompt hash: qeval hashes each
sample's `input` and `choices` (its prompt) and those with its `target` (its document), so items pair only where
they asked the same thing.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import struct
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterator

from ..hashing import file_hash
from ..record.metrics import MetricSpec
from ..record.store import Record
from . import IMPORTERS
from .base import BadResults, Imported, ImportedTask, Importer, Source, SourceFile

FORMAT = "inspect"
LOG_VERSION = 2  # the log schema this reader knows (inspect_ai's LOG_SCHEMA_VERSION)
ZIP_ZSTANDARD = 93  # the zip method inspect writes its archives with; Python reads it natively from 3.14

LETTERS = {"C": 1.0, "I": 0.0, "N": 0.0}  # correct, incorrect, no answer
PARTIAL = "P"
PARTIAL_VALUE = 0.5  # inspect's own value for partial credit

# inspect's built-in scorers by registry name: what their value is (0/1 from C/I, or a continuous score) and that
# a higher value is better (inspect_ai/scorer: _match.py, _choice.py, _classification.py, _pattern.py, _answer.py,
# _model.py)
BINARY_SCORERS = frozenset({"match", "includes", "choice", "exact", "pattern", "answer"})
GRADED_SCORERS = frozenset({"model_graded_qa", "model_graded_fact"})  # 0/1 unless partial_credit (then C/P/I)
CONTINUOUS_SCORERS = frozenset({"f1"})
# reducers over epochs whose value of 0/1 scores is still 0 or 1, by the name the log gives them (at_least_<k>);
# mean, median and pass_at_<k> give fractions
ZERO_ONE_REDUCERS = ("mode", "majority", "max", "at_least_")


def _load(data: bytes, file: Path, where: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as e:
        raise BadResults(f"not JSON ({e})", file=file, where=where) from None


def _zstd(raw: bytes) -> bytes:
    import zstandard  # ImportError: the caller says what to install

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
    return reader.read()


def _member(z: zipfile.ZipFile, info: zipfile.ZipInfo, file: Path) -> bytes:
    """One member's bytes. zstd members (inspect's default) need Python 3.14's zipfile or the zstandard package:
    the member's compressed bytes are read from its local header and decoded here."""
    if info.compress_type != ZIP_ZSTANDARD or sys.version_info >= (3, 14):
        return z.read(info)
    with file.open("rb") as f:
        f.seek(info.header_offset)
        head = f.read(30)
        if head[:4] != b"PK\x03\x04":
            raise BadResults("a damaged archive (no local header)", file=file, where=info.filename)
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        f.seek(info.header_offset + 30 + name_len + extra_len)
        raw = f.read(info.compress_size)
    try:
        data = _zstd(raw)
    except ImportError:
        raise BadResults("the archive is zstd-compressed (inspect's default): reading it needs Python 3.14 or the "
                         "zstandard package (pip install zstandard); or give the log as JSON (inspect log convert "
                         "--to json)", file=file, where=info.filename) from None
    if zlib.crc32(data) != info.CRC:
        raise BadResults("a damaged archive member (its CRC does not match)", file=file, where=info.filename)
    return data


def _read_log(path: Path) -> tuple[dict, list[tuple[str, dict]], Any]:
    """(header, [(where, sample)], reductions) of a `.eval` archive or a `.json` log."""
    if path.suffix == ".eval":
        try:
            z = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as e:
            raise BadResults(f"not an inspect .eval archive ({e})", file=path) from None
        with z:
            infos = {i.filename: i for i in z.infolist()}
            if "header.json" not in infos:
                raise BadResults("not an inspect .eval archive (no header.json: the run did not finish?)", file=path)
            header = _load(_member(z, infos["header.json"], path), path, "header.json")
            samples = [(name, _load(_member(z, i, path), path, name)) for name, i in infos.items()
                       if name.startswith("samples/") and name.endswith(".json")]
            reductions = (_load(_member(z, infos["reductions.json"], path), path, "reductions.json")
                          if "reductions.json" in infos else None)
        return header, samples, reductions
    doc = _load(path.read_bytes(), path, "")
    if not isinstance(doc, dict):
        raise BadResults("not an inspect log (a JSON object)", file=path)
    samples = doc.get("samples") or []
    return doc, [(f"samples[{i}]" + (f" (sample {s.get('id')}, epoch {s.get('epoch')})" if isinstance(s, dict) else ""), s)
                 for i, s in enumerate(samples)], doc.get("reductions")


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def prompt_hash(sample: dict) -> str:
    """What the item asked: its input (text or chat messages) and its choices."""
    return hashlib.sha256(_canonical({"input": sample.get("input"), "choices": sample.get("choices")})).hexdigest()


def doc_hash(sample: dict) -> str:
    """The item as a document: what it asked and what it is scored against."""
    return hashlib.sha256(_canonical({"input": sample.get("input"), "choices": sample.get("choices"),
                                      "target": sample.get("target")})).hexdigest()


def _scalar(v: Any, metric: str, file: Path, where: str, partial: dict[str, str]) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        if not math.isfinite(v):
            raise BadResults(f"score {metric!r} is {v}, not a finite number", file=file, where=where)
        return float(v)
    if isinstance(v, str) and v in LETTERS:
        return LETTERS[v]
    if v == PARTIAL:
        partial.setdefault(metric, f"{file.name}:{where}")
        return PARTIAL_VALUE
    raise BadResults(f"score {metric!r} is {v!r}: not one of inspect's values C, I, P, N nor a number (inspect "
                     "reads such a string as 0 with a warning; qeval does not guess what it means)",
                     file=file, where=where)


def _values(name: str, value: Any, file: Path, where: str, partial: dict[str, str]) -> dict[str, float]:
    """A scorer's value as metrics: a dict value is one metric per key (`scorer.key`)."""
    if isinstance(value, dict):
        return {f"{name}.{k}": _scalar(v, f"{name}.{k}", file, where, partial) for k, v in value.items()}
    if isinstance(value, list):
        raise BadResults(f"score {name!r} is a list: not one per-item score", file=file, where=where)
    return {name: _scalar(value, name, file, where, partial)}


def _registry_name(name: str) -> str:
    return name.rsplit("/", 1)[-1]  # "inspect_ai/includes" -> "includes"


def _scorers(header: dict) -> dict[str, tuple[str, dict]]:
    """Each score's name -> (the scorer's registry name, its options), from the results (which name a score and its
    scorer apart) and the eval's scorer list."""
    out: dict[str, tuple[str, dict]] = {}
    for s in (header.get("eval") or {}).get("scorers") or []:
        if isinstance(s, dict) and isinstance(s.get("name"), str):
            out[s["name"]] = (_registry_name(s["name"]), s.get("options") or {})
    for s in ((header.get("results") or {}).get("scores")) or []:
        if isinstance(s, dict) and isinstance(s.get("name"), str):
            registry = _registry_name(str(s.get("scorer") or s["name"]))
            out[s["name"]] = (registry, s.get("params") or out.get(s["name"], ("", {}))[1])
    return out


def _reducers(header: dict) -> list[str]:
    got = ((header.get("eval") or {}).get("config") or {}).get("epochs_reducer")
    names = [str(r) for r in got] if isinstance(got, list) else ([str(got)] if got else ["mean"])
    return [_registry_name(r) for r in names]


def declared(score: str, scorers: dict[str, tuple[str, dict]], epochs: int, reducers: list[str],
             file: Path) -> MetricSpec | None:
    """inspect's built-in scorer's declaration of a score (None: not a built-in, or not one qeval's table knows).
    Over several epochs a 0/1 score stays 0/1 only under a reducer that keeps it so."""
    registry, options = scorers.get(score, (_registry_name(score), {}))
    if registry in BINARY_SCORERS or (registry in GRADED_SCORERS and not options.get("partial_credit")):
        binary = True
    elif registry in CONTINUOUS_SCORERS:
        binary = False
    else:
        return None
    source = f"inspect's {registry} scorer"
    if binary and epochs > 1 and not all(r.startswith(ZERO_ONE_REDUCERS) for r in reducers):
        binary = False
        source += f", reduced over {epochs} epochs by {'/'.join(reducers)}: continuous"
    return MetricSpec(binary=binary, higher_is_better=True, source=f"{source} ({file.name})")


def _identity(header: dict) -> dict[str, Any]:
    ev = header.get("eval") or {}
    ds = ev.get("dataset") or {}
    cfg = ev.get("config") or {}
    plan = header.get("plan") or {}
    return {"eval.task": ev.get("task"), "eval.task_version": ev.get("task_version"),
            "eval.task_args": ev.get("task_args"), "eval.dataset.name": ds.get("name"),
            "eval.dataset.location": ds.get("location"),
            "plan.steps": [{"solver": s.get("solver"), "params": s.get("params")} for s in plan.get("steps") or []
                           if isinstance(s, dict)],
            "plan.config": plan.get("config"),
            "eval.scorers": [{"name": s.get("name"), "options": s.get("options")} for s in ev.get("scorers") or []
                             if isinstance(s, dict)],
            "eval.config.epochs": cfg.get("epochs") or 1, "eval.config.epochs_reducer": cfg.get("epochs_reducer"),
            "eval.model_generate_config": ev.get("model_generate_config")}


def _advisory(header: dict) -> dict[str, Any]:
    ev = header.get("eval") or {}
    return {"inspect_ai": (ev.get("packages") or {}).get("inspect_ai"), "eval.model": ev.get("model"),
            "eval.config.limit": (ev.get("config") or {}).get("limit"),
            "eval.dataset.samples": (ev.get("dataset") or {}).get("samples")}


def _reduced(reductions: Any, file: Path) -> dict[str, dict[str, Any]]:
    """score name -> sample id -> its value reduced over the epochs."""
    out: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(reductions or []):
        if not isinstance(r, dict) or not isinstance(r.get("scorer"), str):
            raise BadResults("not inspect's reductions (each names its scorer)", file=file, where=f"reductions[{i}]")
        if r["scorer"] in out:
            raise BadResults(f"score {r['scorer']!r} is reduced more than once (several epoch reducers): qeval "
                             "pairs one value per item; run the task with one reducer", file=file,
                             where=f"reductions[{i}]")
        out[r["scorer"]] = {str(s.get("sample_id")): s.get("value") for s in r.get("samples") or []
                            if isinstance(s, dict)}
    return out


def _samples(samples: list[tuple[str, dict]], file: Path) -> Iterator[tuple[str, dict]]:
    seen: dict[tuple[str, int], str] = {}
    for where, s in samples:
        if not isinstance(s, dict) or "id" not in s:
            raise BadResults("not an inspect sample (no 'id')", file=file, where=where)
        key = (str(s["id"]), int(s.get("epoch") or 1))
        if key in seen:
            raise BadResults(f"sample {key[0]} epoch {key[1]} twice ({seen[key]} and {where})", file=file,
                             where=where)
        seen[key] = where
        yield where, s


def _response(s: dict) -> str | None:
    out = s.get("output")
    text = out.get("completion") if isinstance(out, dict) else None
    return None if text is None else str(text)[:2000]


def read_log(path: Path) -> tuple[ImportedTask, dict]:
    """One log -> its task (records, declarations, identity) and its header."""
    header, raw, reductions = _read_log(path)
    if header.get("version") != LOG_VERSION:
        raise BadResults(f"inspect log version {header.get('version')!r}: this reader knows version {LOG_VERSION}",
                         file=path, where="version")
    if header.get("status") != "success":
        raise BadResults(f"the eval's status is {header.get('status')!r}, not 'success': its scores are not the "
                         "whole task's", file=path, where="status")
    ev = header.get("eval") or {}
    task = str(ev.get("task") or "")
    if not task:
        raise BadResults("not an inspect log (no eval.task)", file=path, where="eval.task")
    if not raw:
        raise BadResults("the log has no samples (inspect ran with --no-log-samples?): no item's score to pair",
                         file=path, where="samples")
    epochs = int((ev.get("config") or {}).get("epochs") or 1)
    reduced = _reduced(reductions, path) if epochs > 1 else {}
    partial: dict[str, str] = {}
    by_id: dict[str, list[tuple[str, dict]]] = {}
    for where, s in _samples(raw, path):
        by_id.setdefault(str(s["id"]), []).append((where, s))
    records: list[Record] = []
    dropped: dict[str, str] = {}
    for item, group in by_id.items():
        group.sort(key=lambda ws: int(ws[1].get("epoch") or 1))
        where, first = group[0]
        errored = [(w, s["error"]) for w, s in group if s.get("error")]
        if errored:
            w, e = errored[0]
            dropped[item] = f"errored ({w}: {str(e.get('message', e) if isinstance(e, dict) else e)[:200]})"
            continue
        if any(not s.get("scores") for _, s in group):
            dropped[item] = "no score"
            continue
        scores: dict[str, float] = {}
        for w, s in group:  # every epoch's value read, so that a value qeval cannot read refuses the log
            for name, score in s["scores"].items():
                value = score.get("value") if isinstance(score, dict) else None
                got = _values(name, value, path, w, partial)
                if len(group) == 1:
                    scores.update(got)
        if epochs > 1:
            for name in first["scores"]:
                if item not in reduced.get(name, {}):
                    dropped[item] = f"no reduction of {name!r} over its epochs"
                    break
                scores.update(_values(name, reduced[name][item], path, f"reductions: {name}: sample {item}", partial))
            if item in dropped:
                continue
        if len({prompt_hash(s) for _, s in group}) > 1:
            raise BadResults(f"sample {item}: its epochs asked different prompts", file=path, where=where)
        target = first.get("target")
        records.append(Record(item_id=item, scores=scores, prompt_hash=prompt_hash(first), doc_hash=doc_hash(first),
                              response=_response(first),
                              extra={"target": json.dumps(target)[:500], "at": f"{path.name}:{where}"}))
    scorers, reducers = _scorers(header), _reducers(header)
    names = sorted({m for r in records for m in r.scores})
    decl = {m: spec for m in names if (spec := declared(m, scorers, epochs, reducers, path)) is not None}
    suite = f"{FORMAT}/{task}"
    planned = tuple(dict.fromkeys(s["name"] for s in ev.get("scorers") or [] if isinstance(s, dict) and "name" in s))
    return ImportedTask(suite=suite, records=tuple(records), declared=decl, identity=_identity(header),
                        advisory=_advisory(header), planned=planned or tuple(names), file=str(path),
                        records_file=str(path), dropped=dropped, partial=partial), header


def _is_log(path: Path) -> bool:
    if path.suffix == ".eval":
        return zipfile.is_zipfile(path)
    if path.suffix != ".json" or path.name.startswith("results_"):
        return False
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    return head.startswith(b"{") and b'"version"' in head and b'"eval"' in head


@IMPORTERS.register(FORMAT)
class InspectImporter(Importer):
    """One inspect_ai eval log: a `.eval` archive or a `.json` log (a log folder holds many: name one)."""

    kind = FORMAT

    @classmethod
    def claims(cls, src: Path) -> bool:
        return src.is_file() and _is_log(src)

    def read(self, src: Path) -> Imported:
        if src.is_dir():
            logs = sorted(p for p in src.iterdir() if p.is_file() and _is_log(p))
            raise BadResults("a folder of inspect logs: name one log" + (": " + ", ".join(p.name for p in logs)
                                                                          if logs else " (none found here)"), file=src)
        if not src.is_file():
            raise BadResults("no such file", file=src)
        if src.suffix not in (".eval", ".json"):
            raise BadResults("not an inspect log (a .eval archive or a .json log)", file=src)
        task, header = read_log(src)
        ev = header.get("eval") or {}
        lines = 0 if src.suffix == ".eval" else sum(1 for _ in src.open("rb"))
        source = Source(format=FORMAT, evaluator="inspect_ai", version=(ev.get("packages") or {}).get("inspect_ai"),
                        model=None if ev.get("model") is None else str(ev["model"]),
                        files=(SourceFile(str(src), file_hash(src), lines),))
        return Imported(tasks={task.suite: task}, source=source)
