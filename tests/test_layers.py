"""The package's import graph keeps its floors: no import cycle, and no import from a room to a room above it.

Every `import` and `from ... import` in qeval/**.py counts, relative ones resolved, including those inside
functions and `if TYPE_CHECKING:` blocks (a deferred import is still a dependency: it only hides a cycle).
`python -m tests.test_layers` prints the rooms and the arrows between them.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "qeval"

# The rooms from the bottom floor up. A module may import from its own room or any room below it, never from a
# room above. Patterns are module names (fnmatch); "qeval.x.*" covers the package qeval.x and everything in it.
ROOMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("qeval.errors", "qeval.aio", "qeval.hashing", "qeval.registry", "qeval.validation", "qeval.settings",
                "qeval.methods", "qeval.progress", "qeval.machine*", "qeval.emulate*", "qeval.workers*")),
    ("stats", ("qeval.stats*",)),
    ("records", ("qeval.record*",)),
    ("verdict", ("qeval.verdict*",)),
    ("engines", ("qeval.engines*",)),
    ("imports", ("qeval.imports*",)),
    ("suites, probe, quantize", ("qeval.suites*", "qeval.probe*", "qeval.quantize*")),
    ("report, tracking", ("qeval.report*", "qeval.tracking*")),
    ("executors", ("qeval.executors*",)),
    ("config", ("qeval.config",)),
    ("pipeline", ("qeval.pipeline*",)),
    ("setup", ("qeval.setup*",)),
    ("entry points", ("qeval", "qeval.cli")),
)

@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    @property
    def where(self) -> str:
        return f"{module_file(self.importer)}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(name: str) -> str:
    base = PACKAGE.parent / Path(*name.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return str(path.relative_to(PACKAGE.parent))


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import in the file (at any depth) of a module of this package, as the module it names."""
    is_package = path.name == "__init__.py"
    out: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.level, node.module)
            # `from pkg import mod` imports the submodule; `from mod import name` the module holding the name
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        for target in targets:
            # `import qeval.a.b` names its deepest module of this package
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append(Import(name, target, node.lineno))
    return out


def graph() -> dict[str, list[Import]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def room_of(name: str) -> int | None:
    for floor, (_, patterns) in enumerate(ROOMS):
        for pattern in patterns:
            if name == pattern or (pattern.endswith("*") and (name == pattern[:-1] or
                                                              fnmatch.fnmatch(name, pattern[:-1] + ".*"))):
                return floor
    return None


def cycles(g: dict[str, list[Import]]) -> list[tuple[list[str], list[Import]]]:
    """Each group of modules that reach one another (Tarjan's strongly connected components), with one cycle
    through it as the imports that close it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for e in g[v]:
            if e.imported not in index:
                visit(e.imported)
                low[v] = min(low[v], low[e.imported])
            elif e.imported in on:
                low[v] = min(low[v], index[e.imported])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(g)))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return [(group, _a_cycle(g, set(group), group[0])) for group in groups]


def _a_cycle(g: dict[str, list[Import]], group: set[str], start: str) -> list[Import]:
    """The shortest way from `start` back to itself inside its group (breadth first)."""
    came: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for e in sorted(g[v], key=lambda e: e.imported):
                if e.imported not in group or e.imported in came:
                    continue
                came[e.imported] = e
                if e.imported == start:
                    path = [e]
                    while path[0].importer != start:
                        path.insert(0, came[path[0].importer])
                    return path
                nxt.append(e.imported)
        frontier = nxt
    raise AssertionError(f"{start} is in a cycle that could not be walked")


def cycle_key(group: list[str]) -> str:
    return "cycle: " + " ".join(sorted(group))


def upward(g: dict[str, list[Import]]) -> list[Import]:
    """Imports from a room to a room above it."""
    out = []
    for name, edges in g.items():
        here = room_of(name)
        for e in edges:
            there = room_of(e.imported)
            if here is not None and there is not None and there > here:
                out.append(e)
    return out


def violations() -> dict[str, str]:
    """Each violation (a key naming it) -> how a failure reports it."""
    g = graph()
    out: dict[str, str] = {}
    for name in sorted(g):
        if room_of(name) is None:
            out[f"no room: {name}"] = f"{module_file(name)} ({name}) is in no room: add it to ROOMS or move it"
    for group, cycle in cycles(g):
        out[cycle_key(group)] = (f"import cycle among {', '.join(module_file(n) for n in group)}; one: "
                                 + " -> ".join(f"{e.importer} ({e.where})" for e in cycle) + f" -> {cycle[0].importer}")
    for e in upward(g):
        key = f"{e.importer} -> {e.imported}"
        if key not in out:
            out[key] = (f"{e.where}: {e.importer} (room {ROOMS[room_of(e.importer)][0]}) imports {e.imported} "
                        f"(room {ROOMS[room_of(e.imported)][0]}, above it)")
    return out


@pytest.fixture(scope="module")
def found() -> dict[str, str]:
    return violations()


def test_no_cycle(found):
    new = [why for key, why in found.items() if key.startswith("cycle: ")]
    assert not new, "\n".join(new)


def test_every_module_in_a_room(found):
    new = [why for key, why in found.items() if key.startswith("no room: ")]
    assert not new, "\n".join(new)


def test_no_import_from_a_room_above(found):
    new = [why for key, why in found.items() if " -> " in key and not key.startswith("cycle: ")]
    assert not new, "\n".join(new)


def test_the_graph_is_read(tmp_path):
    """Positive control: the reader finds every kind of import it must, and a made-up graph's cycle and upward
    import are caught."""
    source = tmp_path / "mod.py"
    source.write_text("from __future__ import annotations\n"
                      "from typing import TYPE_CHECKING\n"
                      "import qeval.stats.exact\n"  # absolute
                      "from ..errors import ConfigError\n"  # relative, a name
                      "from ..engines import spec, Endpoint\n"  # relative, a submodule and the package's name
                      "if TYPE_CHECKING:\n"
                      "    from .plan import VariantPlan\n"
                      "def later():\n"
                      "    from . import sink\n")
    known = set(modules())
    found = {(e.imported, e.line) for e in imports_of("qeval.pipeline.mod", source, known)}
    assert found == {("qeval.stats.exact", 3), ("qeval.errors", 4), ("qeval.engines.spec", 5), ("qeval.engines", 5),
                     ("qeval.pipeline.plan", 7), ("qeval.pipeline.sink", 9)}
    package = tmp_path / "__init__.py"
    package.write_text("from . import vllm\nfrom .base import Endpoint\n")
    assert {e.imported for e in imports_of("qeval.engines", package, known)} == {"qeval.engines.vllm",
                                                                               "qeval.engines.base"}
    assert ("qeval.config", "qeval.errors") in {(e.importer, e.imported) for edges in graph().values() for e in edges}
    fake = {"qeval.errors": [Import("qeval.errors", "qeval.cli", 1)],
            "qeval.cli": [Import("qeval.cli", "qeval.errors", 2)]}
    assert [cycle_key(group) for group, _ in cycles(fake)] == ["cycle: qeval.cli qeval.errors"]
    assert [(e.importer, e.imported) for e in upward(fake)] == [("qeval.errors", "qeval.cli")]


def arrows_between_rooms() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = defaultdict(int)
    for name, edges in graph().items():
        here = room_of(name)
        for e in edges:
            there = room_of(e.imported)
            if here != there:
                out[(ROOMS[here][0] if here is not None else name,
                     ROOMS[there][0] if there is not None else e.imported)] += 1
    return dict(out)


def main() -> None:
    g = graph()
    print("rooms, top floor first:")
    for floor in reversed(range(len(ROOMS))):
        members = sorted(n for n in g if room_of(n) == floor)
        print(f"  {floor:2d} {ROOMS[floor][0]:<24} {len(members)} modules")
    unplaced = sorted(n for n in g if room_of(n) is None)
    if unplaced:
        print("in no room: " + ", ".join(unplaced))
    print("arrows between rooms (imports):")
    order = {name: floor for floor, (name, _) in enumerate(ROOMS)}
    for (a, b), n in sorted(arrows_between_rooms().items(), key=lambda kv: (-order.get(kv[0][0], -1),
                                                                              -order.get(kv[0][1], -1))):
        up = " UP" if a in order and b in order and order[b] > order[a] else ""
        print(f"  {a} -> {b}: {n}{up}")
    found = violations()
    print(f"violations: {len(found)}")
    for key in sorted(found):
        print(f"  {found[key]}")


if __name__ == "__main__":
    main()
