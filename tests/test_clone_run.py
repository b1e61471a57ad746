"""The README's first quick-start command on a fresh clone: `make run` sets up the venv and runs the embedded
default, and since the clone's committed results are current (their inputs' sha256 are the recorded ones), it
re-runs nothing and leaves every tracked file as committed: `git status --porcelain` prints nothing."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers import REPO


@pytest.mark.venv
@pytest.mark.workflow
def test_make_run_on_a_fresh_clone_changes_nothing(tmp_path):
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run(["make", "run"], cwd=clone, env=env, capture_output=True, text=True, timeout=3000)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    log = run.stdout + run.stderr
    assert "Nothing to be done" in log, log[-3000:]
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, capture_output=True, text=True, check=True
    ).stdout
    assert status == "", status
    shutil.rmtree(clone / ".venv", ignore_errors=True)
