"""What an importer is and what it gives: per task, the records, the evaluator's own metric declarations, and
the settings two runs of the task must share to be compared (its identity); for the whole source, where it came
from (format, evaluator, model as recorded, each file read with its hash and length)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ConfigError
from ..hashing import stable_hash
from ..record.metrics import MetricSpec
from ..record.store import Record


class BadResults(ConfigError):
    """A results file that cannot be read as its format says, or cannot be compared: bad input (exit 2), always
    naming the file and the place in it (a line, a key, a member of an archive)."""

    def __init__(self, message: str, *, file: str | Path, where: str | None = None):
        super().__init__(message, file=str(file), where=where)


@dataclass(frozen=True)
class SourceFile:
    path: str
    sha256: str
    lines: int  # a text file's lines; 0 for one that is not line-based


@dataclass(frozen=True)
class Source:
    format: str  # the importer's kind ("lm_eval")
    evaluator: str  # the tool that wrote the results ("lm-eval")
    version: str | None  # its version as the results record it
    model: str | None  # the model as the results name it (not checked: the same model may be served under any name)
    files: tuple[SourceFile, ...]


@dataclass(frozen=True)
class ImportedTask:
    suite: str  # qeval's part name ("lm_eval/<task>"), so a campaign's policy matches it unchanged
    records: tuple[Record, ...]
    declared: dict[str, MetricSpec]  # the evaluator's own declarations, each naming the file and key it came from
    # settings that change what an item asks or how it is scored: two runs whose identities differ are not compared
    identity: dict[str, Any]
    # shown beside the comparison, never refused (the evaluator's version, its limit, data paths)
    advisory: dict[str, Any] = field(default_factory=dict)
    planned: tuple[str, ...] = ()  # the metrics the task declares, whether or not any record has a score for them
    file: str = ""  # the file its identity was read from, named when a comparison is refused
    records_file: str = ""  # the file its records were read from (each record's extra["at"] is a line of it)
    # items the evaluator ran but gave no score (an errored sample): item id -> why, counted as unpaired
    dropped: dict[str, str] = field(default_factory=dict)
    # metrics with partial-credit values (inspect's P), each with the first place: compared only where a declaration
    # says the metric is continuous
    partial: dict[str, str] = field(default_factory=dict)

    @property
    def identity_hash(self) -> str:
        """A digest of its identity, for the record (which two runs of the task were compared): not a store key."""
        return stable_hash(self.identity)


@dataclass(frozen=True)
class Imported:
    tasks: dict[str, ImportedTask]  # by suite
    source: Source


class Importer:
    """One results format. `claims` says whether a path looks like it (for a source named without its format);
    `read` imports it or raises BadResults naming the file and place."""

    kind: ClassVar[str] = ""
    local: ClassVar[bool] = True  # its source is a path on this machine (False: a URI, such as an MLflow run's)

    @classmethod
    def claims(cls, src: Path) -> bool:
        return False

    def read(self, src: Path) -> Imported:
        raise NotImplementedError
