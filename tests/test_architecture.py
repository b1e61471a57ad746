"""The training room's shape (issue 57), checked on the source: nothing outside attention_geometry/training uses a
private name of it (tests and benchmarks go through its public seam: loop.Trainer, step.Step and the two batch
sources), and no module of it grows past 500 lines. The import layers and the absence of cycles are import-linter's
contracts (pyproject.toml, `make lint`)."""

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
