"""The toolkit every spec is validated with: strict pydantic models, specs picked by `kind`, and YAML
read so that an error names the file, the line and the key (PyYAML keeps node positions; pydantic
gives the key path)."""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler,
                      model_validator)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError, to_jsonable_python

from .errors import ConfigError

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def spec_error(kind: str, message: str, loc: tuple[Any, ...], value: Any) -> ValidationError:
    """One validation error at `loc` with `message` as is (no pydantic prefix); raised inside a validator,
    pydantic puts the outer path in front of `loc`, so the error keeps its line."""
    # "{m}" with the message as context: a brace in the message is not read as a template
    err = PydanticCustomError(kind, "{m}", {"m": message})
    return ValidationError.from_exception_data("spec", [InitErrorDetails(type=err, loc=loc, input=value)])


def relocated(err: ValidationError, prefix: tuple[Any, ...], known: list[str] | None = None) -> ValidationError:
    """`err`'s errors under `prefix` (a spec validated in a validator of the model holding it); `known`: the keys
    the inner spec takes, for the did-you-mean of an unknown one."""
    details = []
    for e in err.errors():
        ctx = {"m": error_message(e)} | ({"known": known} if known is not None else {})
        details.append(InitErrorDetails(type=PydanticCustomError(e["type"], "{m}", ctx),
                                        loc=(*prefix, *e["loc"]), input=e.get("input")))
    return ValidationError.from_exception_data("spec", details)


class Kinded(Strict):
    """A family of specs whose `kind` picks the model that validates the rest: a kind registered through an
    entry point brings its own model, so no Literal of kinds shuts it out. The family's base class answers
    `model_for`; validating as the base gives an instance of the kind's model."""

    kind: str
    default_kind: ClassVar[str | None] = None  # the kind of a spec that names none

    def __new__(cls, *args: Any, **data: Any) -> "Kinded":
        # ScorerSpec(kind="numeric", ...) is a NumericScorerSpec, as validating it as a ScorerSpec gives, and
        # EngineSpec() its default kind's model; pydantic's __init__ then validates it as that model (whose
        # _as_its_kind returns self: a validator that returns another object is not supported in __init__)
        model = cls.model_of(data) if data or cls.default_kind is not None else cls
        return super().__new__(model if issubclass(model, cls) else cls)

    @classmethod
    def model_for(cls, kind: str) -> type["Kinded"]:
        """The model of `kind`; an unknown kind raises ConfigError with the registry's did-you-mean."""
        return cls

    @classmethod
    def carried(cls, data: Mapping[str, Any], model: type["Kinded"]) -> Mapping[str, Any]:
        """What of `data` the kind's model validates (a family may leave behind keys its other kinds own)."""
        return data

    @classmethod
    def model_of(cls, data: Mapping[str, Any]) -> type["Kinded"]:
        """The model of the kind `data` names; an unknown kind is a validation error at `kind`."""
        kind = data.get("kind", cls.default_kind)
        if kind is None:
            raise spec_error("missing", "required key is missing", ("kind",), data)
        if not isinstance(kind, str):
            raise spec_error("string_type", "kind must be a string", ("kind",), kind)
        try:
            return cls.model_for(kind)
        except (ConfigError, ValueError) as e:
            raise spec_error("unknown_kind", str(e), ("kind",), kind) from None

    @classmethod
    def of_its_kind(cls, data: Any) -> "Kinded":
        """`data` validated by its kind's model, every key its own (nothing carried or left behind)."""
        return cls.model_of(data).model_validate(data) if isinstance(data, Mapping) else cls.model_validate(data)

    @model_validator(mode="wrap")
    @classmethod
    def _as_its_kind(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, Mapping):
            return handler(data)
        model = cls.model_of(data)
        if model is cls or not issubclass(model, cls):
            return handler(data)
        return model.model_validate(cls.carried(data, model))


def known_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def non_defaults(value: Any) -> Any:
    """What a spec says beyond its defaults, as JSON: each field whose value differs from its default (a
    nested spec: what it says beyond its own defaults), a field without a default always, and a Kinded spec's
    `kind` always (it says which model the rest belongs to). What keys are taken over: a setting added later
    at its default, or a kind registered later, adds nothing to them, so no existing key changes; a changed
    default changes no key either (that is what bumping qeval.hashing.KEY_VERSION is for)."""
    if isinstance(value, BaseModel):
        out = {}
        for name, f in type(value).model_fields.items():
            x = non_defaults(getattr(value, name))
            if f.is_required() or (name == "kind" and isinstance(value, Kinded)):
                out[name] = x
            elif x != non_defaults(_default(f)):
                out[name] = x
        return out
    if isinstance(value, Mapping):
        return {str(k): non_defaults(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [non_defaults(v) for v in value]
    return to_jsonable_python(value)


def _default(f: FieldInfo) -> Any:
    # the default itself, not get_default's deep copy: copying a Kinded spec asks the registry for its model
    return f.default if f.default_factory is None else f.get_default(call_default_factory=True, validated_data={})


def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation admits (through Annotated, Optional and unions)."""
    if typing.get_origin(tp) is Annotated:
        return _models_in(typing.get_args(tp)[0])
    if typing.get_origin(tp) in (Union, types.UnionType):
        return [m for a in typing.get_args(tp) for m in _models_in(a)]
    return [tp] if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _items_of(tp: Any) -> Any:
    """What a list (or a mapping's values) of this annotation holds."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (list, tuple) and args:
        return args[0]
    if typing.get_origin(tp) is dict and len(args) == 2:
        return args[1]
    return None


def _model_of(tp: Any, data: Any) -> type[BaseModel] | None:
    models = _models_in(tp)
    if len(models) != 1:
        return None
    m = models[0]
    if issubclass(m, Kinded) and isinstance(data, Mapping):
        try:
            return m.model_for(str(data.get("kind", m.default_kind)))
        except ConfigError:
            return None
    return m


def keys_at(model: type[BaseModel], data: Any, path: tuple[Any, ...]) -> list[str]:
    """The keys the spec at `path` in `data` takes (walking the models' annotations), or [] where unknown."""
    tp: Any = model
    for key in path:
        m = _model_of(tp, data)
        if m is not None:
            field = next((f for n, f in m.model_fields.items() if key in (n, f.alias)), None)
            tp = field.annotation if field else None
        else:
            tp = _items_of(tp)
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            data = None
        if tp is None:
            return []
    m = _model_of(tp, data)
    return known_keys(m) if m is not None else []


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(text: str, file: str) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in os.environ:
            raise ConfigError(f"environment variable ${{{m.group(1)}}} is not set", file=file)
        return os.environ[m.group(1)]

    return _VAR.sub(sub, text)


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """Parse a YAML file; return the data and its node tree (for line numbers in errors)."""
    file = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", file=file) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", file=file) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 (byte {e.start})", file=file) from None
    text = _expand(text, file)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", file=file, where=where) from None
    return data, node


def line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Walk the YAML node tree along a pydantic error location; return the deepest line found."""
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if k.value == key), None)
            if hit is None:
                break
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        # pydantic adds the union member's tag (e.g. 'custom') to the path: skip it
    return line


def error_message(e: Any) -> str:
    """pydantic's message without the "Value error, " it puts before a validator's own words."""
    ctx = e.get("ctx") or {}
    if e["type"] in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return str(ctx.get("m", e["msg"]))


def unknown_key(key: Any, known: list[str]) -> str:
    close = difflib.get_close_matches(str(key), [k for k in known if k != key], n=1)
    return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")


def format_validation(err: ValidationError, file: str, node: yaml.Node | None,
                      model: type[BaseModel] | None = None, data: Any = None) -> ConfigError:
    """The first error as one line naming the file, the line and the key; an unknown key gets the closest
    key the spec takes (`model` and `data`: what was validated, to find which keys those are)."""
    errors = err.errors()
    # a misspelled required key shows up twice (unknown + missing): report the unknown one
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(first["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    line = line_of(node, loc)
    msg = error_message(first)
    paired = False
    if first["type"] == "extra_forbidden":
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == loc[:-1]]
        paired = bool(difflib.get_close_matches(str(loc[-1]), missing, n=1))
        known = (first.get("ctx") or {}).get("known") or (keys_at(model, data, loc[:-1]) if model else [])
        msg = unknown_key(loc[-1], missing if paired else known)
    elif first["type"] == "missing":
        msg = "required key is missing"
    others = len(errors) - 1 - (1 if paired else 0)
    more = f" (and {others} more)" if others > 0 else ""
    where = f"line {line}: {key}" if line else key
    return ConfigError(f"{msg}{more}", file=file, where=where)


def parse_model(model: type[BaseModel], data: Any, file: str, node: yaml.Node | None) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise format_validation(e, file, node, model, data) from None
