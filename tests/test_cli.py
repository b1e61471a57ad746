"""The dispatcher's own switches (the subcommands are tested with their modules)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attention_geometry.cli import COMMANDS, main, runner

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_names_its_two_functions():
    """The table is explicit and follows one convention: subcommand NAME is commands.add_arguments_NAME and the
    working module's run_NAME (dashes as underscores), so that grep finds every one of them."""
    for name, command in COMMANDS.items():
        stem = name.replace("-", "_")
        assert command.add_arguments.__module__ == "attention_geometry.commands", name
        assert command.add_arguments.__name__ == f"add_arguments_{stem}", name
        assert runner(name).__name__ == f"run_{stem}", name
    with pytest.raises(KeyError):
        runner("no-such-command")


def test_version_is_the_project_version():
    want = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    out = subprocess.run(
        [sys.executable, "-m", "attention_geometry.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"attention-geometry {want}"


def test_unknown_subcommand_is_one_line(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown command 'no-such-command' (one of score, ")


def test_an_empty_source_is_one_line_naming_it(tmp_path, capsys):
    assert main(["score", "", "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert err == "error: SOURCE: empty (a model directory, a .gguf file or a hub id)\n"
    assert not (tmp_path / "x.csv").exists()


def test_one_progress_switch_for_every_subcommand_and_every_rule_uses_it(capsys):
    for name in COMMANDS:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0 and "--no-progress" in capsys.readouterr().out, name
    # the rules' logs are files: no carriage-return bar streams in them
    calls = re.findall(
        r'python -m attention_geometry ([a-z-]+)([^"]*)"',
        "".join(p.read_text() for p in sorted((ROOT / "rules").glob("*.smk"))),
    )
    assert len(calls) >= 9
    assert all(rest.startswith(" --no-progress") for _, rest in calls), calls


@pytest.mark.slow
def test_no_progress_silences_the_bars(tmp_path):
    # `score` draws a bar over the layers: with --no-progress (and its old name --quiet) stderr has none
    from attention_geometry.training.models import build_model

    model = build_model("tiny", "encoder", "standard", seed=0, vocab_size=64)
    model.save_pretrained(tmp_path / "m")
    base = [sys.executable, "-m", "attention_geometry.cli", "score", str(tmp_path / "m")]
    env = {"TQDM_MININTERVAL": "0"}
    import os

    runs = {
        flag: subprocess.run(
            base + ["--out", str(tmp_path / f"{i}.csv")] + ([flag] if flag else []),
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
        for i, flag in enumerate(["", "--no-progress", "--quiet"])
    }
    assert all(r.returncode == 0 for r in runs.values()), [r.stderr[-500:] for r in runs.values()]
    assert "scoring" in runs[""].stderr
    assert "scoring" not in runs["--no-progress"].stderr and "scoring" not in runs["--quiet"].stderr


def test_no_subcommands_help_imports_torch():
    """`--help` (and an argument error) of every subcommand is answered without importing torch: the arguments
    of every subcommand live in the torch-free commands.py (cli.COMMANDS), its work behind cli.runner."""
    code = (
        "import contextlib, io, sys\n"
        "from attention_geometry.cli import COMMANDS, main\n"
        "for name in COMMANDS:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main([name, '--help'])\n"
        "    assert 'torch' not in sys.modules, name\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_score_help_names_every_source_kind_and_the_matrix():
    """Issue 58.7: `score --help` named neither `pkg:` nor the OV view. Every kind of SOURCE the loader takes
    (weights.loading: a folder, a .gguf file, pkg:PACKAGE/PATH, a hub id) and --matrix's three values are named."""
    out = subprocess.run(
        [sys.executable, "-m", "attention_geometry.cli", "score", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    flat = " ".join(out.split())
    for needle in ("model folder", ".gguf file", "pkg:PACKAGE/PATH", "hub id", "--matrix", "qk", "ov", "both"):
        assert needle in flat, needle
