"""What a campaign file says about suites: one model per suite kind (SuiteRef; `kind` picks it, and a kind
registered through the entry point group `qeval.suites` brings its own), each naming the Suite it resolves to
(suites/base.py), and the generation settings of a suite descriptor. Scorers' specs live with the scorers."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from ..errors import ConfigError
from ..registry import Registry
from ..validation import Kinded, Name, Strict

if TYPE_CHECKING:
    from ..verdict.policy import GatePolicy
    from ..settings import Settings
    from .base import Suite


class GenerationSpec(Strict):
    max_tokens: int = Field(32, gt=0)
    temperature: float = Field(0.0, ge=0)
    chat: bool = True  # apply the model's chat template (instruct models need it)
    stop: list[str] = []
    # answers per item; the item's score per scorer is the mean over them. Each sample's seed comes from
    # the item id and the sample index, so a rerun asks the same questions (where the engine honours seeds)
    samples: int = Field(1, ge=1, le=100)

    @model_validator(mode="after")
    def _sampling(self) -> "GenerationSpec":
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples: {self.samples} needs temperature > 0 (greedy decoding gives one answer "
                             f"{self.samples} times)")
        return self


# requests in flight: a number, or "auto", sized from what the engine holds once it is up (its KV cache's tokens
# over one request's, its max_num_seqs) and at most the entry's max_concurrency; where the engine cannot say
# (an external endpoint), the entry's default number. Neither enters a key: requests in flight change no result
Concurrency = Annotated[int, Field(gt=0, le=4096)] | Literal["auto"]
MaxConcurrency = Annotated[int, Field(gt=0, le=4096)]

# -- suite references (in the campaign file) ------------------------------------------------------------

SUITES = Registry("suite kind", entry_point_group="qeval.suites")


@dataclass(frozen=True)
class Needed:
    """Something an entry needs on this machine before its suite can be planned (`qeval doctor` lists it)."""

    what: str
    here: bool
    detail: str


class SuiteRef(Kinded):
    """A suite the campaign runs; `kind` picks its model. A plugin's kind overrides `resolve`."""

    kind: str
    # "module:function" that makes the Suite (suites/base.py) a built-in entry names: named, not imported, so
    # that reading a campaign file loads no suite's code
    RESOLVER: ClassVar[str] = ""
    NEEDS: ClassVar[str] = ""  # "module:function" listing what it needs on this machine, named as RESOLVER is

    def resolve(self, settings: "Settings", policy: "GatePolicy", config_file: str = "") -> "Suite":
        """The suite this entry names, loaded and validated (bad input: ConfigError naming the file)."""
        module, _, name = self.RESOLVER.partition(":")
        return getattr(import_module(module), name)(self, settings, policy, config_file)

    def located(self, base: Path) -> "SuiteRef":
        """The entry with its relative paths taken from `base` (the campaign file's folder)."""
        return self

    def check_files(self, config_file: str) -> None:
        """Refuse (ConfigError) a file the entry names that is not there, before anything runs."""

    def fitted(self, max_model_len: int | None, index: int, config_file: str = "") -> "SuiteRef":
        """The entry with what it sizes from the served context set (an `auto` length), refusing what does not
        fit it (ConfigError at `suites[index].KEY`). `max_model_len`: the shortest context any variant is served
        with (None: no variant's engine states one)."""
        return self

    def needs(self, settings: "Settings", config_file: str = "") -> list[Needed]:
        """What the entry needs on this machine beyond its files (an lm-eval task's data), each found or not;
        asked before `resolve`, which refuses what is missing. ConfigError: the entry itself is at fault."""
        if not self.NEEDS:
            return []
        module, _, name = self.NEEDS.partition(":")
        return getattr(import_module(module), name)(self, settings, config_file)

    @classmethod
    def model_for(cls, kind: str) -> type["SuiteRef"]:
        spec = SUITES.get(kind)
        if not (isinstance(spec, type) and issubclass(spec, SuiteRef)):
            raise ValueError(f"suite kind {kind!r}: its entry point must name a SuiteRef (qeval.suites.spec)")
        return spec


def _located(p: Path | None, base: Path) -> Path | None:
    return None if p is None else (p if p.is_absolute() else (base / p).resolve())


def _must_exist(target: Path | None, config_file: str, kind: str) -> None:
    if target is not None and not target.exists():
        raise ConfigError(f"{target} does not exist", file=config_file, where=f"suites: {kind}")


@SUITES.register("custom")
class CustomSuiteRef(SuiteRef):
    RESOLVER: ClassVar[str] = "qeval.suites.custom:resolve"
    kind: Literal["custom"]
    path: Path  # the suite's YAML descriptor
    concurrency: Concurrency = 8  # requests in flight: enough to keep the server's batch full
    max_concurrency: MaxConcurrency = 256  # the most `auto` sends

    def located(self, base: Path) -> "CustomSuiteRef":
        return self.model_copy(update={"path": _located(self.path, base)})

    def check_files(self, config_file: str) -> None:
        _must_exist(self.path, config_file, self.kind)


@SUITES.register("lm_eval")
class LmEvalSuiteRef(SuiteRef):
    RESOLVER: ClassVar[str] = "qeval.suites.lmeval:resolve"
    NEEDS: ClassVar[str] = "qeval.suites.lmeval_tasks:data_needs"
    kind: Literal["lm_eval"]
    tasks: list[str] = Field(min_length=1)
    include_path: Path | None = None  # local task YAMLs
    limit: int | None = Field(None, gt=0)
    num_fewshot: int | None = Field(None, ge=0)
    fewshot_seed: int = 1234
    add_bos_token: bool = True  # measured: without BOS, local-completions disagrees with the HF reference
    apply_chat_template: bool = False
    num_concurrent: Concurrency = 4  # requests in flight (lm-eval's own setting)
    max_concurrency: MaxConcurrency = 256  # the most `auto` sends
    batch_size: int = Field(8, gt=0)
    # how a multiple-choice task is scored, each way its own part: "loglikelihood", lm-eval's (one echo request
    # per choice, with prompt logprobs; metrics `acc`, ...), and/or "next_token", qeval's (one request per
    # question, the answers' letters read from the next token's top-k; metric `acc_next_token`)
    scoring: list[Literal["loglikelihood", "next_token"]] = Field(["loglikelihood"], min_length=1)
    next_token_top_k: int = Field(20, gt=1)  # vLLM serves at most --max-logprobs (20 by default)

    @model_validator(mode="after")
    def _scorings_once(self) -> "LmEvalSuiteRef":
        if len(set(self.scoring)) != len(self.scoring):
            raise ValueError(f"scoring: {self.scoring} names one twice")
        return self

    def located(self, base: Path) -> "LmEvalSuiteRef":
        return self.model_copy(update={"include_path": _located(self.include_path, base)})

    def check_files(self, config_file: str) -> None:
        _must_exist(self.include_path, config_file, self.kind)



@SUITES.register("logprobs")
class LogprobsSuiteRef(SuiteRef):
    """Prompt log-probabilities of a text corpus: perplexity, and KL / top-1 agreement against the baseline.
    With `document_tokens`, long documents cut at that many tokens, compared by depth (suites/logprobs_long.py)."""

    RESOLVER: ClassVar[str] = "qeval.suites.logprobs:resolve"
    kind: Literal["logprobs"]
    name: Name = "corpus"
    # "pydoc": held-out Python reference text shipped with CPython (~160 chunks); "stdlib" (the standard
    # library's modules, ~3,000) or "docstrings" (their docstrings, ~700); a UTF-8 file; or "suite:DESCRIPTOR":
    # a custom suite's own prompts, one chunk each (how the variant sees the inputs it is graded on). With
    # `document_tokens` also a folder (a document per file): suites/corpora.py. A corpus that holds fewer
    # chunks than `chunks` asks is refused.
    corpus: str = "pydoc"
    chunks: int = Field(32, gt=1)
    chunk_chars: int = Field(1200, ge=100)
    top_k: int = Field(10, gt=0, le=20)  # vLLM serves at most --max-logprobs (20 by default)
    concurrency: Concurrency = 4  # chunks in flight: each a whole prompt scored at once
    max_concurrency: MaxConcurrency = 256  # the most `auto` sends
    # quality by position: documents of exactly this many tokens (auto: the served context length less one,
    # set by the plan), compared per depth bucket of token positions [lo, hi)
    document_tokens: int | Literal["auto"] | None = None
    documents: int = Field(48, ge=2)
    buckets: Literal["auto"] | list[Annotated[int, Field(gt=0)]] = "auto"  # auto: 1k, 2k, 4k, ... (doubling)
    min_bucket_documents: int = Field(8, ge=2)  # fewer documents reach a bucket: INCONCLUSIVE, never PASS
    min_bucket_tokens: int = Field(2000, ge=1)  # fewer tokens compared in a bucket: likewise

    @model_validator(mode="after")
    def _long(self) -> "LogprobsSuiteRef":
        if isinstance(self.document_tokens, int) and self.document_tokens < 2:
            raise ValueError("document_tokens must be at least 2 (or auto)")
        if isinstance(self.buckets, list) and self.buckets != sorted(set(self.buckets)):
            raise ValueError(f"buckets: {self.buckets} must rise")
        return self

    def fitted(self, max_model_len: int | None, index: int, config_file: str = "") -> "LogprobsSuiteRef":
        """`document_tokens` above the served context is refused; `auto` becomes that length less one (the one
        token a completion request asks for beside its prompt)."""
        n, where = self.document_tokens, f"suites[{index}].document_tokens"
        if n == "auto":
            if max_model_len is None:
                raise ConfigError("document_tokens: auto reads the served context length (max_model_len), which no "
                                  "variant's engine states: give a number", file=config_file, where=where)
            return self.model_copy(update={"document_tokens": max_model_len - 1})
        if isinstance(n, int) and max_model_len is not None and n > max_model_len:
            raise ConfigError(f"document_tokens {n} exceeds the context a variant is served with (max_model_len "
                              f"{max_model_len})", file=config_file, where=where)
        return self

    def located(self, base: Path) -> "LogprobsSuiteRef":
        if self.corpus in ("pydoc", "stdlib", "docstrings"):
            return self
        prefix = "suite:" if self.corpus.startswith("suite:") else ""
        return self.model_copy(update={"corpus": prefix + str(_located(Path(self.corpus.removeprefix(prefix)), base))})

    def check_files(self, config_file: str) -> None:
        if self.corpus in ("pydoc", "stdlib", "docstrings"):
            return
        path = Path(self.corpus.removeprefix("suite:"))
        if not (path.is_file() or (self.document_tokens is not None and path.is_dir())):
            raise ConfigError(f"corpus {self.corpus} does not exist", file=config_file, where="suites: logprobs")


@SUITES.register("needle")
class NeedleSuiteRef(SuiteRef):
    """Retrieval at length: seeded key-value needles at several depths of haystacks of several lengths, each
    prompt exact in the engine's tokens, scored 0/1 and grouped by haystack (suites/needle.py)."""

    RESOLVER: ClassVar[str] = "qeval.suites.needle:resolve"
    kind: Literal["needle"]
    name: Name = "needle"
    # prompt lengths in tokens, question included (auto: 1k, 2k, 4k, ... doubling while one fits the served
    # context with its answer, set by the plan: an 8k context gets 1k to 4k, since 8k and an answer exceed it)
    lengths: Literal["auto"] | list[Annotated[int, Field(ge=64)]] = "auto"
    depths: list[Annotated[float, Field(ge=0, le=1)]] = Field([0.0, 0.25, 0.5, 0.75, 1.0], min_length=1)
    haystacks: int = Field(8, ge=1)  # per length: the clusters of the statistics
    # what the needle hides in: RULER's noise sentences repeated, held-out Python reference text, the standard
    # library's docstrings, or a UTF-8 file's sentences
    filler: str = "repeat"
    distractors: int = Field(0, ge=0, le=20)  # needles of other keys in the same haystack, never asked
    seed: int = 0
    max_tokens: int = Field(12, gt=0)  # the answer's tokens (greedy): a 7-digit value and a little more
    concurrency: Concurrency = 4  # prompts in flight: each a whole haystack
    max_concurrency: MaxConcurrency = 256

    @model_validator(mode="after")
    def _layout(self) -> "NeedleSuiteRef":
        if isinstance(self.lengths, list) and (not self.lengths or self.lengths != sorted(set(self.lengths))):
            raise ValueError(f"lengths: {self.lengths} must rise, without repeats")
        if self.depths != sorted(set(self.depths)):
            raise ValueError(f"depths: {self.depths} must rise, without repeats")
        if len({round(d * 100) for d in self.depths}) != len(self.depths):
            raise ValueError(f"depths: {self.depths} must differ by at least 0.01 (an item's id says its percent)")
        return self

    def fitted(self, max_model_len: int | None, index: int, config_file: str = "") -> "NeedleSuiteRef":
        """A prompt and its answer must fit the served context: the longest length plus `max_tokens` above it is
        refused; `auto` doubles from 1k while one fits."""
        where = f"suites[{index}].lengths"
        if self.lengths == "auto":
            if max_model_len is None:
                raise ConfigError("lengths: auto reads the served context length (max_model_len), which no "
                                  "variant's engine states: give the lengths", file=config_file, where=where)
            out, n = [], 1024
            while n + self.max_tokens <= max_model_len:
                out.append(n)
                n *= 2
            if not out:
                raise ConfigError(f"lengths: auto starts at 1024 tokens, which with max_tokens {self.max_tokens} "
                                  f"exceeds the served context (max_model_len {max_model_len}): give the lengths",
                                  file=config_file, where=where)
            return self.model_copy(update={"lengths": out})
        longest = max(self.lengths)
        if max_model_len is not None and longest + self.max_tokens > max_model_len:
            raise ConfigError(f"a needle prompt of {longest} tokens and its answer of max_tokens {self.max_tokens} "
                              f"exceed the context a variant is served with (max_model_len {max_model_len})",
                              file=config_file, where=where)
        return self

    def located(self, base: Path) -> "NeedleSuiteRef":
        if self.filler in ("repeat", "pydoc", "docstrings"):
            return self
        return self.model_copy(update={"filler": str(_located(Path(self.filler), base))})

    def check_files(self, config_file: str) -> None:
        if self.filler not in ("repeat", "pydoc", "docstrings") and not Path(self.filler).is_file():
            raise ConfigError(f"filler {self.filler} does not exist", file=config_file, where="suites: needle")
