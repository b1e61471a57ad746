"""The package's layering, read statically with `ast` (an import that only runs on some path, a lazy import in
a function or one under `if TYPE_CHECKING`, counts as much as a top-level one):

- no import cycle among its modules;
- the torch-free modules (what the notebooks and the Snakefile import at parse time) never import torch;
- each public name has one import path: every `from attention_geometry.M import name` in the package, the tests,
  the benchmarks, the rules and the notebooks names the module that defines it (no re-export shims), and every
  `__all__` lists only names its module defines;
- no two modules share a file name (a name says one thing)."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = "attention_geometry"
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / PACKAGE
# Subpackages whose modules import without torch (the notebooks, rules/common.smk at parse time and the small
# workflow jobs import them; architectures/ names tensors, it never reads one); a function may import torch
# lazily (figdata's extract-wqk scores a model).
TORCH_FREE = ("formats", "architectures", "workflow", "analysis")


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    return ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))


def _module_level(tree: ast.AST):
    """The nodes that run when a module is imported (function bodies left out)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def imported(name: str, path: Path, known: set[str], module_level: bool = False) -> set[str]:
    """The package modules that `path` (module `name`) imports anywhere in its body. `from M import a` depends
    on M.a when that is a module, else on M itself; importing a.b.c also runs the __init__ of a and a.b, which
    counts except for the packages that hold `name`. In a module that imports importlib, a string constant that
    names a package module counts too (a guard: the package names what it imports, cli.runner included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    direct: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    by_name = any(isinstance(n, ast.Import) and any(a.name == "importlib" for a in n.names) for n in ast.walk(tree))
    for node in _module_level(tree) if module_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            direct.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            for a in node.names:
                direct.add(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module)
        elif by_name and isinstance(node, ast.Constant) and node.value in known:
            direct.add(node.value)
    out = set()
    for target in direct:
        parts = target.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in known and prefix not in ancestors and prefix != name:
                out.add(prefix)
        if target in known and target != name:
            out.add(target)
        elif not target.startswith(PACKAGE):
            out.add(target)  # third-party modules (torch) stay in the graph as leaves
    return out


def import_graph(module_level: bool = False) -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imported(name, path, known, module_level) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first search, three colours)."""
    colour = {n: 0 for n in graph}  # 0 unseen, 1 on the current path, 2 done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if m not in colour:
                continue
            if colour[m] == 1:
                return path[path.index(m) :] + [m]
            if colour[m] == 0 and (cycle := visit(m)):
                return cycle
        path.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if colour[n] == 0 and (cycle := visit(n)):
            return cycle
    return None


def reaches(graph: dict[str, set[str]], start: str, target: str) -> list[str] | None:
    """A path start -> ... -> target (target a module or a top-level third-party package), or None."""
    seen, stack = set(), [[start]]
    while stack:
        path = stack.pop()
        node = path[-1]
        if node == target or node.startswith(target + "."):
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend(path + [m] for m in sorted(graph.get(node, ())))
    return None


# ------------------------------------------------------------------------------------------- one import path
def defined_names(path: Path) -> set[str]:
    """Names a module binds itself at top level (def, class, assignment; inside top-level if/try too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)

    visit(tree.body)
    return out


def package_imports(path: Path) -> set[str]:
    """Names a module binds at top level by importing them from the package (what a shim would re-export)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE)):
            out.update(a.asname or a.name for a in node.names)
    return out


def consumer_sources() -> list[tuple[str, str]]:
    """(where, python source) of every file that imports the package: package modules, tests, benchmarks, the
    rule files' import lines, and the notebooks' code cells."""
    out = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))]
    for folder in ("tests", "benchmarks"):
        out += [
            (str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted((ROOT / folder).rglob("*.py"))
        ]
    for p in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        text = p.read_text(encoding="utf-8")
        stmts = re.findall(r"^[ \t]*(from attention_geometry[\w.]* import (?:\([^)]*\)|[^\n]*))", text, re.M)
        stmts += re.findall(r"^[ \t]*(import attention_geometry[^\n]*)", text, re.M)
        out.append((str(p.relative_to(ROOT)), "\n".join(stmts)))
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
        code = [
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells
            if c["cell_type"] == "code"
        ]
        code = [c for c in code if c.strip() and not c.lstrip().startswith(("%", "!"))]
        out.append((str(p.relative_to(ROOT)), "\n".join(code)))
    return out


def second_addresses() -> list[str]:
    mods = modules()
    defined = {name: defined_names(path) for name, path in mods.items()}
    borrowed = {name: package_imports(path) for name, path in mods.items()}
    problems = []
    for where, source in consumer_sources():
        tree = ast.parse(source, where)
        aliases: dict[str, str] = {}  # local alias -> package module
        package = module_name(ROOT / where).rpartition(".")[0] if where.startswith("src/") else ""
        if where.endswith("__init__.py"):
            package = module_name(ROOT / where)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node, package)
                if not module.startswith(PACKAGE) or module not in mods:
                    continue
                for a in node.names:
                    if f"{module}.{a.name}" in mods:
                        aliases[a.asname or a.name] = f"{module}.{a.name}"
                    elif a.name not in defined[module]:
                        problems.append(f"{where}: {a.name} is imported from {module}, which does not define it")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                module = aliases[node.value.id]
                # module.attr where module only imported attr from elsewhere in the package: a second address (a
                # standard or third-party module it imports, e.g. for monkeypatching module.os, is not)
                attr_is_module = f"{module}.{node.attr}" in mods
                if node.attr in borrowed[module] and node.attr not in defined[module] and not attr_is_module:
                    problems.append(f"{where}: {node.value.id}.{node.attr}: {module} does not define {node.attr}")
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                for elt in node.value.elts:
                    if elt.value not in defined[name]:
                        problems.append(f"{name}.__all__ lists {elt.value}, which it does not define")
    return sorted(set(problems))


# ----------------------------------------------------------------------------------------------------- tests
def test_the_graph_is_read():
    """The reader sees relative, absolute, lazy and by-name imports (guards against a test that passes on
    nothing)."""
    graph = import_graph()
    assert f"{PACKAGE}.architectures.registry" in graph[f"{PACKAGE}.architectures.families.text"]
    assert f"{PACKAGE}.architectures.families" in graph[f"{PACKAGE}.architectures.keys"]
    assert f"{PACKAGE}.scoring.scorer" in graph[f"{PACKAGE}.scoring.updates"]  # lazy, inside a function
    assert f"{PACKAGE}.scoring.updates" in graph[f"{PACKAGE}.cli"]  # lazy, in cli.runner
    assert "torch" in graph[f"{PACKAGE}.training.models"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert reaches({"a": {"b"}, "b": {"torch.nn"}}, "a", "torch") == ["a", "b", "torch.nn"]


def test_families_import_only_the_registry():
    """A family module depends on the registry's base types (and sibling family modules), never on the
    extractor or anything above it: adding a family touches one module and the registry's contract."""
    graph = import_graph()
    allowed = {f"{PACKAGE}.architectures.registry", f"{PACKAGE}.errors", f"{PACKAGE}.architectures"}
    for name, deps in graph.items():
        if name.startswith(f"{PACKAGE}.architectures.families"):
            extra = {d for d in deps if d.startswith(PACKAGE) and d not in allowed}
            extra = {d for d in extra if not d.startswith(f"{PACKAGE}.architectures.families")}
            assert not extra, f"{name} imports {sorted(extra)}"


def test_weights_and_scoring_meet_only_in_architectures():
    """The weight sources know where q/k tensors are from architectures/, never from scoring/ above them (the
    scorer reads through weights.loading); architectures/ imports neither."""
    graph = import_graph()
    for name in graph:
        for low, high in (("weights", "scoring"), ("architectures", "weights"), ("architectures", "scoring")):
            if name.startswith(f"{PACKAGE}.{low}"):
                path = reaches(graph, name, f"{PACKAGE}.{high}")
                assert path is None, f"{low}/ reaches {high}/: " + " -> ".join(path)


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("sub", TORCH_FREE)
def test_torch_free_subpackages(sub):
    graph = import_graph(module_level=True)
    for name in graph:
        if name.startswith(f"{PACKAGE}.{sub}"):
            path = reaches(graph, name, "torch")
            assert path is None, "imports torch: " + " -> ".join(path)


def test_one_import_path_per_name():
    problems = second_addresses()
    assert not problems, "\n".join(problems)


def test_the_checker_finds_a_second_address(tmp_path, monkeypatch):
    """A name imported through a module that only imports it is reported (the checker can fail)."""
    shim = "from attention_geometry.scoring.measures import symmetry\n"
    user = (
        "from attention_geometry.analysis.summaries import symmetry\n"
        "import attention_geometry.scoring.scorer as S\nS.open_source\nS.os\n"
    )
    assert "symmetry" not in defined_names(SRC / "analysis" / "summaries.py")
    monkeypatch.setattr(sys.modules[__name__], "consumer_sources", lambda: [("tests/x.py", shim + user)])
    problems = second_addresses()
    assert any("symmetry is imported from attention_geometry.analysis.summaries" in p for p in problems)
    assert any("S.open_source" in p for p in problems)  # scorer only imports it from weights.loading
    assert not any("S.os" in p for p in problems)  # a standard module, e.g. for monkeypatching


def test_module_file_names_are_unique():
    names = Counter(p.name for p in SRC.rglob("*.py") if p.name != "__init__.py")
    assert not [n for n, c in names.items() if c > 1]


# --------------------------------------------------------------------------------------- the module map
def _design_block(section: str) -> str:
    """The fenced module list under docs/DESIGN.md's heading `section`."""
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    return text.split(f"\n## {section}", 1)[1].split("```", 2)[1]


def _listed(text: str, indent: int = 0) -> set[str]:
    """The module (NAME.py) and subpackage (NAME/) names that open a line of a module list: the entries, not the
    descriptions' continuation lines, which are indented further."""
    return set(re.findall(rf"^ {{0,{indent}}}(\w+\.py|\w+/)(?= |$)", text, re.M))


def _on_disk(package: Path) -> set[str]:
    return {p.name for p in package.glob("*.py") if p.name != "__init__.py"} | {
        f"{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()
    }


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""


SUBPACKAGES = sorted(d.name for d in SRC.iterdir() if (d / "__init__.py").is_file())


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_the_module_map_and_the_docstring_list_every_module_of(sub):
    """docs/DESIGN.md's section on a subpackage and the subpackage's docstring each list exactly its modules (and
    sub-subpackages) as they are on disk: a module added, moved or removed shows in both."""
    assert _listed(_design_block(f"`{sub}/`")) == _on_disk(SRC / sub)
    assert _listed(_docstring(SRC / sub), indent=4) == _on_disk(SRC / sub)


def test_the_top_level_is_mapped_too():
    top = {p.name for p in SRC.glob("*.py")}
    assert _listed(_design_block("Top level")) == top
    assert (
        _listed(_docstring(SRC), indent=4) == _on_disk(SRC) == (top - {"__init__.py"}) | {f"{s}/" for s in SUBPACKAGES}
    )
    # what counts as listed: the entries at the margin, never a description's continuation line
    assert _listed("a.py  x\nb/  y\n    c.py  a continuation line\n") == {"a.py", "b/"}
