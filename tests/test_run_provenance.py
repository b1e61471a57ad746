"""The per-run provenance record (training.snapshots.record_provenance -> {run}/provenance.csv ->
concat-tables --kind run_provenance): each start or resume of the trainer appends one row with the commit of the
checkout, read here independently with git."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import PROVENANCE_COLUMNS
from attention_geometry.formats.rundir import PROVENANCE_CSV
from attention_geometry.training.snapshots import record_provenance
from attention_geometry.workflow.concat import concat_tables

REPO = Path(__file__).resolve().parents[1]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_each_start_appends_a_row_with_the_checkouts_commit(tmp_path):
    record_provenance(tmp_path, "r1", 0, 100, when="2026-12-03T20:00:00Z")
    record_provenance(tmp_path, "r1", 40, 100, when="2026-12-03T21:00:00Z")
    rows = _rows(tmp_path / PROVENANCE_CSV)
    assert list(rows[0]) == PROVENANCE_COLUMNS
    assert [(r["from_step"], r["to_step"], r["started_utc"]) for r in rows] == [
        ("0", "100", "2026-12-03T20:00:00Z"),
        ("40", "100", "2026-12-03T21:00:00Z"),
    ]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout (CI's clean clone is one)
        assert all(r["code_version"].split(" ")[0] == head.stdout.strip() for r in rows)
    assert all(r["cpu"] for r in rows)


def test_concat_gathers_the_runs_rows_and_refuses_a_repeated_start(tmp_path):
    for run, starts in (("a", [0]), ("b", [0, 50])):
        for s in starts:
            record_provenance(tmp_path / run, run, s, 100, when=f"2026-12-03T20:00:{s:02d}Z")
    out = tmp_path / "run_provenance.csv"
    n = concat_tables([tmp_path / "a" / PROVENANCE_CSV, tmp_path / "b" / PROVENANCE_CSV], out, kind="run_provenance")
    assert n == 3 and [r["run"] for r in _rows(out)] == ["a", "b", "b"]
    dup = tmp_path / "dup.csv"
    dup.write_text((tmp_path / "a" / PROVENANCE_CSV).read_text())
    with pytest.raises(UserError):
        concat_tables([tmp_path / "a" / PROVENANCE_CSV, dup], tmp_path / "x.csv", kind="run_provenance")
