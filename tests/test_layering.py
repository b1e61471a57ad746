"""The package's layering: no import cycle among its modules (imports inside functions included), and no
module over MAX_LINES lines. The import graph is read statically with `ast`, so an import that only runs on
some path (a lazy import in a function, one under `if TYPE_CHECKING`) counts as much as a top-level one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "attention_geometry"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules that `path` (module `name`) imports anywhere in its body, relative imports
    resolved against its package. `from M import a` depends on M.a when that is a module, else on M itself
    (an attribute of M's __init__); importing a.b.c also runs the __init__ of a and a.b, which counts
    except for the packages that hold `name` (they are already being imported when it runs). In a module
    that imports importlib, a string constant that names a package module counts too (cli.py's COMMANDS)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    direct: set[str] = set()  # modules whose own body must have run
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    by_name = any(isinstance(n, ast.Import) and any(a.name == "importlib" for a in n.names) for n in ast.walk(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            direct.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                module = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                direct.add(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module)
        elif by_name and isinstance(node, ast.Constant) and node.value in known:  # importlib (cli.COMMANDS)
            direct.add(node.value)
    out = set()
    for target in direct:
        parts = target.split(".")
        for i in range(1, len(parts)):  # the enclosing packages' __init__ run first
            prefix = ".".join(parts[:i])
            if prefix in known and prefix not in ancestors and prefix != name:
                out.add(prefix)
        if target in known and target != name:
            out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imported(name, path, known) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first search, three colours)."""
    colour = {n: 0 for n in graph}  # 0 unseen, 1 on the current path, 2 done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if colour[m] == 1:
                return path[path.index(m):] + [m]
            if colour[m] == 0 and (cycle := visit(m)):
                return cycle
        path.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if colour[n] == 0 and (cycle := visit(n)):
            return cycle
    return None


def test_the_graph_is_read():
    """The reader sees relative, absolute and lazy imports (guards against a test that passes on nothing)."""
    graph = import_graph()
    assert f"{PACKAGE}.registry" in graph[f"{PACKAGE}.families.text"]  # from ..registry import ...
    assert f"{PACKAGE}.families" in graph[f"{PACKAGE}.extract"]  # from . import families
    assert f"{PACKAGE}.checkpoints" in graph[f"{PACKAGE}.updates"]  # lazy, inside snapshot_matrices
    assert f"{PACKAGE}.updates" in graph[f"{PACKAGE}.cli"]  # by name, through importlib
    assert f"{PACKAGE}.training.models" in graph[f"{PACKAGE}.updates"]  # from .training.models import ...
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_families_import_only_the_registry():
    """A family module depends on the registry's base types (and sibling family modules), never on the
    extractor or anything above it: adding a family touches one module and the registry's contract."""
    graph = import_graph()
    allowed = {f"{PACKAGE}.registry", f"{PACKAGE}.errors"}
    for name, deps in graph.items():
        if name.startswith(f"{PACKAGE}.families"):
            extra = {d for d in deps if d not in allowed and not d.startswith(f"{PACKAGE}.families")}
            assert not extra, f"{name} imports {sorted(extra)}"


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_size(name):
    n = len(modules()[name].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{name} has {n} lines (at most {MAX_LINES}): split it by job"
