"""Checks a class against a Protocol: every member the protocol states is there, callable where it is a method,
and takes what the protocol's callers pass (inspect.signature), static where they call it on the class."""

from __future__ import annotations

import inspect
from typing import Any

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
DUNDERS = ("__init__", "__enter__", "__exit__")  # the special methods a protocol here states


def members(protocol: type) -> dict[str, Any]:
    """name -> what the protocol declares: a function, a staticmethod, a property, or its annotation (a data
    member; a string: the modules are written with postponed annotations)."""
    out: dict[str, Any] = {}
    for klass in reversed(protocol.__mro__):
        if not getattr(klass, "_is_protocol", False) or klass.__module__ == "typing":
            continue
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            out[name] = annotation
        for name, value in vars(klass).items():
            if name == "__init__" and getattr(value, "__module__", None) == "typing":
                continue  # what typing gives a protocol that states no __init__ of its own
            if (not name.startswith("_") or name in DUNDERS) and (inspect.isfunction(value) or
                                                                   isinstance(value, (staticmethod, property))):
                out[name] = value
    return out


def class_level(annotation: Any) -> bool:
    return str(annotation).startswith(("ClassVar", "typing.ClassVar"))


def incompatible(want: inspect.Signature, have: inspect.Signature) -> list[str]:
    """What a call shaped by `want` (the protocol's) would find wrong with `have` (the implementation's)."""
    problems: list[str] = []
    hp = list(have.parameters.values())
    var_pos = any(p.kind is P.VAR_POSITIONAL for p in hp)
    var_kw = any(p.kind is P.VAR_KEYWORD for p in hp)
    positional = [p for p in hp if p.kind in POSITIONAL]
    by_name = {p.name: p for p in hp if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    given: set[str] = set()
    wanted = list(want.parameters.values())
    for i, w in enumerate(p for p in wanted if p.kind in POSITIONAL):
        if i < len(positional):
            h = positional[i]
            given.add(h.name)
            if w.kind is P.POSITIONAL_OR_KEYWORD and h.name != w.name and not var_kw:
                problems.append(f"takes {w.name!r} as {h.name!r} (a caller may pass it by name)")
            if w.default is not P.empty and h.default is P.empty:
                problems.append(f"{h.name!r} has no default, and callers may leave it out")
        elif not var_pos:
            problems.append(f"takes no {w.name!r}")
    for w in (p for p in wanted if p.kind is P.KEYWORD_ONLY):
        h = by_name.get(w.name)
        if h is None:
            if not var_kw:
                problems.append(f"takes no keyword {w.name!r}")
            continue
        given.add(h.name)
        if w.default is not P.empty and h.default is P.empty:
            problems.append(f"{h.name!r} has no default, and callers may leave it out")
    if any(p.kind is P.VAR_POSITIONAL for p in wanted) and not var_pos:
        problems.append("takes no *args")
    if any(p.kind is P.VAR_KEYWORD for p in wanted) and not var_kw:
        problems.append("takes no **kwargs")
    for h in hp:
        if h.default is P.empty and h.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and h.name not in given:
            problems.append(f"needs {h.name!r}, which the protocol's callers never pass")
    return problems


def _without_self(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def check_class(cls: type, protocol: type) -> list[str]:
    """What `cls` lacks or takes differently of `protocol`'s class-level members and methods (instance data members
    are the caller's to check on an instance: see check_instance)."""
    problems: list[str] = []
    for name, declared in members(protocol).items():
        where = f"{cls.__name__}.{name}"
        if not isinstance(declared, (staticmethod, property)) and not inspect.isfunction(declared):
            if class_level(declared) and not hasattr(cls, name):
                problems.append(f"{where}: missing (class attribute {declared})")
            continue
        if isinstance(declared, property):
            continue  # an attribute or a property of an instance: check_instance
        found = inspect.getattr_static(cls, name, None)
        if found is None:
            problems.append(f"{where}: missing")
            continue
        if isinstance(declared, staticmethod):
            # called on the class (before any instance): a static or class method
            if not isinstance(found, (staticmethod, classmethod)):
                problems.append(f"{where}: the protocol calls it on the class; make it a staticmethod or classmethod")
                continue
            want, impl = inspect.signature(declared.__func__), getattr(cls, name)
        else:
            if isinstance(found, (staticmethod, classmethod)) or not callable(found):
                problems.append(f"{where}: must be an instance method")
                continue
            want, impl = _without_self(inspect.signature(declared)), getattr(cls, name)
        if not callable(impl):
            problems.append(f"{where}: not callable")
            continue
        have = inspect.signature(impl)
        if not isinstance(declared, staticmethod) and not isinstance(found, (staticmethod, classmethod)):
            have = _without_self(have)
        problems += [f"{where}: {p}" for p in incompatible(want, have)]
    return problems


def check_instance(obj: object, protocol: type) -> list[str]:
    """The data members and properties the protocol states, read on a built instance."""
    problems = []
    for name, declared in members(protocol).items():
        if isinstance(declared, property) or not (inspect.isfunction(declared) or isinstance(declared, staticmethod)):
            try:
                getattr(obj, name)
            except AttributeError:
                problems.append(f"{type(obj).__name__}().{name}: missing")
    return problems
