"""The dispatcher's own switches (the subcommands are tested with their modules)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_project_version():
    want = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    out = subprocess.run([sys.executable, "-m", "attention_geometry.cli", "--version"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"attention-geometry {want}"


def test_unknown_subcommand_is_refused():
    out = subprocess.run([sys.executable, "-m", "attention_geometry.cli", "no-such-command"],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0
    assert "invalid choice" in out.stderr
