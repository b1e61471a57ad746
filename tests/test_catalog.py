"""notebooks/catalog.yaml and the notebooks' code, read statically: every entry names a notebook, no
notebook computes W_qk (no model loading, scoring or torch), and a notebook writes only its own catalog
outputs, none of which another entry reads; a notebook groups, joins, pivots or pairs no data itself (each
figure's frame comes from a tested function of attention_geometry.analysis, figure_frames) and defines no
function longer than MAX_FUNCTION_LINES. (That no rule reads a notebook's output is checked on the dry
run's DAG in tests/test_workflow.py; that a notebook run creates no other file, in tests/test_notebooks.py.)"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from attention_geometry.workflow.plan import notebook_file

ROOT = Path(__file__).resolve().parents[1]
CATALOG = yaml.safe_load((ROOT / "notebooks" / "catalog.yaml").read_text())
NOTEBOOKS = sorted({notebook_file(CATALOG, name) for name in CATALOG})

# modules that load weights or score matrices: a notebook reads their results from a table or a .npz
FORBIDDEN_MODULES = {"torch", "transformers", "safetensors", "gguf", "accelerate", "tokenizers"}
# subpackages / modules a notebook never imports: what computes W_qk or scores, reads weights, trains, or makes
# workflow tables (the notebooks draw from tidy tables only)
FORBIDDEN_PACKAGE_MODULES = (
    "scoring",
    "weights",
    "training",
    "data",
    "formats.corpus",
    "workflow.concat",
    "workflow.plan",
)
FORBIDDEN_CALLS = {
    "layer_matrices",
    "score_model",
    "wqk",
    "median_symmetry_layer",
    "open_source",
    "write_wqk",
    "symmetry_speedup_tables",
    "from_pretrained",
    "load_file",
}
# calls that group, join, reshape or pair rows: what makes a figure's data frame, done by a tested function of
# attention_geometry.analysis (figure_frames, summaries), never in a notebook cell
DATA_SHAPING_CALLS = {
    "groupby",
    "merge",
    "merge_asof",
    "merge_ordered",
    "pivot",
    "pivot_table",
    "unstack",
    "crosstab",
    "paired_difference",
}
MAX_FUNCTION_LINES = 15  # a notebook's own helper (a label, a filter) stays short; longer code is a tested function
# calls that write a file when given a path (pandas, numpy, matplotlib, pathlib, the package)
WRITERS = {
    "to_csv",
    "to_parquet",
    "to_excel",
    "to_json",
    "to_pickle",
    "to_latex",
    "to_markdown",
    "to_html",
    "to_feather",
    "write_tables",
    "save",
    "savefig",
    "savez",
    "savez_compressed",
    "write_text",
    "write_bytes",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_table",
}
FILE_MOVERS = {"copy", "copy2", "copyfile", "copytree", "move", "rename", "replace", "symlink", "link"}  # os, shutil
PATH_KEYWORDS = {"path", "path_or_buf", "buf", "fname", "file", "csv", "tex", "md", "pdf", "png", "out", "dst"}


def _code(path: str) -> ast.Module:
    nb = json.loads((ROOT / path).read_text())
    source = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return ast.parse(source, filename=path)


def _subscript_of(node, name: str) -> str | None:
    """The constant key of `name["key"]`, else None."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == name
        and isinstance(node.slice, ast.Constant)
    ):
        return node.slice.value
    return None


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _entries(path: str) -> list[str]:
    return [name for name in CATALOG if notebook_file(CATALOG, name) == path]


def _got(path: str, name: str) -> set[str]:
    """The keys the notebook reads as `name.get("key", ...)`, or for inputs through a helper of its own named
    `optional(key, ...)` that does (the report's): what it does without when an entry does not give it."""
    tree = _code(path)
    helper = any(
        isinstance(f, ast.FunctionDef) and f.name == "optional" and f"{name}.get(" in ast.unparse(f)
        for f in ast.walk(tree)
    )
    keys = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and isinstance(f.value, ast.Name) and f.value.id == name:
            keys.add(node.args[0].value)
        elif helper and isinstance(f, ast.Name) and f.id == "optional":
            keys.add(node.args[0].value)
    return keys


def test_every_entry_names_a_notebook_and_every_notebook_has_an_entry():
    for name, entry in CATALOG.items():
        assert (ROOT / notebook_file(CATALOG, name)).is_file(), name
        assert set(entry) >= {"caption", "inputs", "outputs", "params"}, name
        assert set(entry) <= {"caption", "inputs", "outputs", "params", "notebook", "constants", "optional"}, name
    on_disk = {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert on_disk == set(NOTEBOOKS)


def test_optional_inputs_are_inputs_the_notebook_can_do_without():
    for name, entry in CATALOG.items():
        optional = set(entry.get("optional", []))
        assert optional <= set(entry["inputs"]), name
        assert optional <= _got(notebook_file(CATALOG, name), "inputs"), name  # read with inputs.get


def test_entries_sharing_a_notebook_differ_only_in_constants_outputs_caption_and_what_it_can_do_without():
    """Entries of one notebook give the same inputs and params, except those the notebook reads with .get (Figure
    S1's trained runs, Figure 2's grouped-query table)."""
    for path in NOTEBOOKS:
        entries = [CATALOG[n] for n in _entries(path)]
        spare = {"inputs": _got(path, "inputs"), "params": _got(path, "params")}
        for e in entries[1:]:
            for key in ("inputs", "params"):
                differ = set(e[key]) ^ set(entries[0][key])
                assert differ <= spare[key], (path, key, sorted(differ - spare[key]))
                same = set(e[key]) & set(entries[0][key])
                if key == "inputs":
                    assert {k: e[key][k] for k in same} == {k: entries[0][key][k] for k in same}, path
            assert set(e["outputs"]) == set(entries[0]["outputs"]), path
            assert set(e.get("constants", {})) == set(entries[0].get("constants", {})), path


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_notebook_computes_no_wqk(path):
    for node in ast.walk(_code(path)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            assert _call_name(node) not in FORBIDDEN_CALLS, (path, ast.unparse(node))
            continue
        else:
            continue
        for m in modules:
            parts = m.split(".")
            assert parts[0] not in FORBIDDEN_MODULES, (path, m)
            if parts[0] == "attention_geometry" and len(parts) > 1:
                below = ".".join(parts[1:])
                assert not any(below == f or below.startswith(f + ".") for f in FORBIDDEN_PACKAGE_MODULES), (path, m)


def _shaping_problems(tree: ast.Module) -> list[str]:
    """What a notebook's code does that is not reading and drawing: a data-shaping call, a long function."""
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                problems.append(f"{getattr(node, 'name', 'lambda')}: {lines} lines")
        elif isinstance(node, ast.Call) and _call_name(node) in DATA_SHAPING_CALLS:
            problems.append(ast.unparse(node)[:120])
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_notebook_only_reads_and_draws(path):
    """No groupby / merge / pivot / unstack / seed pairing and no long function in a notebook (issue 32): the
    figure's frame is an analysis function's, unit-tested on a hand-made table."""
    assert _shaping_problems(_code(path)) == [], path


def test_the_shaping_check_finds_what_it_forbids():
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    source = (
        f"def long():\n{body}\n\n"
        "def short():\n    return 1\n\n"
        "df.groupby('a').size()\nanalysis.paired_difference(df, 'init', 'a', 'b', ['v'])\n"
        "df.pivot_table(index='a')\nleft.merge(right, on='k')\n', '.join(['a'])\nframes.split(df, 'a')\n"
    )
    problems = _shaping_problems(ast.parse(source))
    assert problems[0] == f"long: {MAX_FUNCTION_LINES + 1} lines"
    assert len(problems) == 5 and not any("short" in p or "join" in p or "split" in p for p in problems)


def _is_os_file_call(call: ast.Call, name: str) -> bool:
    f = call.func
    return (
        name in FILE_MOVERS
        and isinstance(f, ast.Attribute)
        and isinstance(f.value, ast.Name)
        and f.value.id in ("os", "shutil")
    )


def _is_pathlike_literal(node) -> bool:
    return (
        isinstance(node, (ast.JoinedStr, ast.BinOp))
        or (isinstance(node, ast.Constant) and isinstance(node.value, str))
        or _subscript_of(node, "inputs") is not None
        or (isinstance(node, ast.Call) and _call_name(node) in {"join", "Path", "with_suffix", "with_name"})
    )


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_notebook_writes_only_its_catalog_outputs(path):
    written, read = set(), set()
    for node in ast.walk(_code(path)):
        if _subscript_of(node, "outputs") is not None:
            written.add(_subscript_of(node, "outputs"))
        if _subscript_of(node, "inputs") is not None:
            read.add(_subscript_of(node, "inputs"))
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        args = list(node.args) + [k.value for k in node.keywords if k.arg in PATH_KEYWORDS]
        if name == "open" and isinstance(node.func, ast.Name):
            mode = (
                node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            )
            if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
                assert _subscript_of(node.args[0], "outputs") is not None, (path, ast.unparse(node))
        elif (name in WRITERS or _is_os_file_call(node, name)) and args:
            targets = [a for a in args if _subscript_of(a, "outputs") is not None]
            assert targets, f"{path}: {ast.unparse(node)} writes a file that is not one of its outputs"
            assert not any(_is_pathlike_literal(a) for a in args), (path, ast.unparse(node))
    for name in _entries(path):
        entry = CATALOG[name]
        assert written == set(entry["outputs"]), (name, written)  # every output written, no other
        # an input the entry does not give is read only where the notebook has it (inputs.get)
        assert read <= set(entry["inputs"]) | _got(path, "inputs"), (name, read)


def test_no_catalog_output_is_read_by_another_entry_or_lies_outside_the_results():
    outputs = {}
    for name, entry in CATALOG.items():
        for template in entry["outputs"].values():
            assert template not in outputs, (name, outputs.get(template))  # one writer per file
            outputs[template] = name
            assert re.fullmatch(r"\{results\}/(figures|tables)/[^/{}]+|\{results\}/[^/{}]+\.md", template), template
    for name, entry in CATALOG.items():
        for template in entry["inputs"].values():
            assert template not in outputs, f"{name} reads {template}, an output of {outputs.get(template)}"
