"""The training room's shape (issue 57), checked on the source: nothing outside attention_geometry/training uses a
private name of it (tests and benchmarks go through its public seam: loop.Trainer, step.Step and the two batch
sources), and no module of it grows past 500 lines. The import layers and the absence of cycles are import-linter's
contracts (pyproject.toml, `make lint`); the benchmarks, which are no package, are checked for cycles here."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

TRAINING = REPO / "src" / "attention_geometry" / "training"
MAX_LINES = 500


def _outside_training() -> list[Path]:
    files = [*(REPO / "src").rglob("*.py"), *(REPO / "tests").glob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    return [f for f in files if TRAINING not in f.parents and f != Path(__file__).resolve()]


def private_uses(source: str) -> list[str]:
    """The private names of attention_geometry.training that `source` imports or reads: `from ...training.X import
    _y`, `m._y` where m is a training module bound by an import, and a monkeypatch target string naming one."""
    tree = ast.parse(source)
    aliases: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attention_geometry.training"):
            for a in node.names:
                if a.name.startswith("_"):
                    found.append(f"{node.module}.{a.name}")
                elif node.module == "attention_geometry.training":  # a module of the package: `from ... import loop`
                    aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("attention_geometry.training.") and a.asname:
                    aliases.add(a.asname)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.startswith("attention_geometry.training.") and any(p.startswith("_") for p in text.split(".")[2:]):
                found.append(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if node.attr.startswith("_"):
                found.append(f"{node.value.id}.{node.attr}")
    return found


def test_the_scan_finds_each_kind_of_private_use():
    src = (
        "from attention_geometry.training.loop import _Run, train\n"
        "from attention_geometry.training import loop as L\n"
        "L._build(1)\nL.train()\n"
        "import attention_geometry.training.runtime as rt\nrt._precision\n"
        "p = 'attention_geometry.training.loop._update'\n"
    )
    assert sorted(private_uses(src)) == [
        "L._build",
        "attention_geometry.training.loop._Run",
        "attention_geometry.training.loop._update",
        "rt._precision",
    ]
    assert private_uses("from attention_geometry.training.loop import Trainer\nTrainer(1)._x\n") == []


def test_nothing_outside_training_uses_its_private_names():
    bad = {str(f.relative_to(REPO)): uses for f in _outside_training() if (uses := private_uses(f.read_text()))}
    assert not bad, bad


def test_no_training_module_is_longer_than_500_lines():
    long = {p.name: n for p in TRAINING.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


BENCHMARKS = REPO / "benchmarks"


def benchmark_imports(source: str, siblings: set[str]) -> set[str]:
    """The benchmark scripts that `source` imports, at any depth of it (a function's own import too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & siblings


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the import graph (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_through_a_functions_own_import():
    siblings = {"a", "b", "c"}
    sources = {"a": "import b\n", "b": "def f():\n    from c import x\n", "c": "import os\nimport a as aa\n"}
    graph = {m: benchmark_imports(src, siblings) for m, src in sources.items()}
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert import_cycle(graph) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_among_the_benchmarks():
    """Issue 57.7: benchmarks/ are thin scripts over the package; none of them is imported by another in a circle
    (paper_cost -> gpu_measure -> train_throughput -> paper_cost was one)."""
    scripts = {p.stem: p for p in BENCHMARKS.glob("*.py")}
    graph = {name: benchmark_imports(p.read_text(), set(scripts)) for name, p in scripts.items()}
    assert import_cycle(graph) is None, import_cycle(graph)
