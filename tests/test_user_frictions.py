"""What a new user met, each fixed: checked here so that it stays fixed (the model card, the workflow's
report and dry run, and the SLURM profile have their own checks in tests/test_user_frictions_workflow.py)."""

from __future__ import annotations

import io

import pandas as pd
from test_checkpoints_cli import fake_run, run_cli

from attention_geometry.formats.columns import TRAINING_COLUMNS


def test_score_checkpoints_to_stdout(tmp_path, capsys):
    """`score-checkpoints --out -` writes the CSV table on stdout, as `score --out -` does (it was refused as an
    unknown output suffix); the same rows as the file it writes."""
    run, _ = fake_run(tmp_path)
    code, out, err = run_cli(["score-checkpoints", run, "--out", "-", "--quiet"], capsys)
    assert code == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == TRAINING_COLUMNS and len(df)
    code, _, err = run_cli(["score-checkpoints", run, "--out", tmp_path / "t.csv", "--quiet"], capsys)
    assert code == 0, err
    pd.testing.assert_frame_equal(df, pd.read_csv(tmp_path / "t.csv"))
    assert not list(tmp_path.glob("-*"))
