"""The per-run provenance record (training.run_provenance.record_provenance -> {run}/provenance.csv ->
concat-tables --kind run_provenance): each start or resume of the trainer appends one row with the commit of the
checkout, read here independently with git."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import PROVENANCE_COLUMNS, PROVENANCE_HOST_COLUMNS, PROVENANCE_SPEED_COLUMNS
from attention_geometry.formats.rundir import PROVENANCE_CSV
from attention_geometry.training.run_provenance import record_provenance
from attention_geometry.workflow.concat import concat_tables

REPO = Path(__file__).resolve().parents[1]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_each_start_appends_a_row_with_the_checkouts_commit(tmp_path):
    record_provenance(tmp_path, "r1", 0, 100, when="2026-12-03T20:00:00Z")
    record_provenance(tmp_path, "r1", 40, 100, when="2026-12-03T21:00:00Z")
    rows = _rows(tmp_path / PROVENANCE_CSV)
    assert list(rows[0]) == PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS + PROVENANCE_SPEED_COLUMNS
    assert all(r["tokens_per_s"] == r["mfu"] == "" for r in rows)  # filled in when a start ends
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


def _proc_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_rows_name_the_cpu_flags_and_a_host_id_that_tells_boots_apart(tmp_path, monkeypatch):
    import hashlib

    from attention_geometry.training import run_provenance as provenance

    record_provenance(tmp_path, "r1", 0, 10, when="2026-12-07T15:00:00Z")
    row = _rows(tmp_path / PROVENANCE_CSV)[0]
    flags = _proc_flags()
    # read off /proc/cpuinfo here, independently: which of the numeric flags this host has
    assert set(row["cpu_flags"].split()) == flags & {
        "avx2",
        "fma",
        "avx512f",
        "avx512_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    }
    ids = [
        Path(p).read_text().strip() for p in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id") if Path(p).is_file()
    ]
    if len(ids) == 2:
        assert row["host_id"] == hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12]
    assert len(row["host_id"]) == 12
    # two hosts cloned from one image share the machine id, not the boot id
    real_open = open

    def other_boot(path, *a, **k):
        if str(path) == "/proc/sys/kernel/random/boot_id":
            import io

            return io.StringIO("another-boot")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", other_boot)
    assert provenance.host_id() != row["host_id"]


def test_a_record_begun_before_the_host_columns_keeps_its_six(tmp_path):
    old = ",".join(PROVENANCE_COLUMNS) + "\nr1,2026-12-01T00:00:00Z,0,100,abc,Some CPU\n"
    (tmp_path / PROVENANCE_CSV).write_text(old)
    record_provenance(tmp_path, "r1", 50, 100, when="2026-12-07T15:00:00Z")
    rows = _rows(tmp_path / PROVENANCE_CSV)
    assert list(rows[1]) == PROVENANCE_COLUMNS and rows[1]["from_step"] == "50"
    # gathered beside a new record, the old rows' host columns are empty
    record_provenance(tmp_path / "b", "b", 0, 100, when="2026-12-07T15:00:01Z")
    out = tmp_path / "all.csv"
    concat_tables([tmp_path / PROVENANCE_CSV, tmp_path / "b" / PROVENANCE_CSV], out, kind="run_provenance")
    got = _rows(out)
    assert list(got[0]) == PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS + PROVENANCE_SPEED_COLUMNS
    assert got[0]["host_id"] == "" and got[2]["host_id"] != ""


def test_a_record_begun_with_the_host_columns_keeps_its_eight(tmp_path):
    """Study 4's records (eight columns, no speed) keep their header when a run resumes, and the speed of the
    resumed start is not written into a column they lack."""
    from attention_geometry.training.run_provenance import record_speed

    head = ",".join(PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS)
    row = "r1,2026-12-07T16:00:00Z,0,3500,abc,AMD EPYC,avx2 fma,0123456789ab"
    (tmp_path / PROVENANCE_CSV).write_text(f"{head}\n{row}\n")
    record_provenance(tmp_path, "r1", 250, 3500, when="2026-12-07T17:00:00Z")
    record_speed(tmp_path, 1234.5, 0.5)
    rows = _rows(tmp_path / PROVENANCE_CSV)
    assert [list(r) for r in rows] == [PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS] * 2


def test_a_finished_start_records_its_tokens_per_second_and_mfu(tmp_path):
    """Issue 57.4: a run's provenance row gets the positions per second and the MFU of its start. Checked against
    train.log's own loop time (the `done:` line: steps and seconds) and the cost model's FLOPs per position
    (training/cost.py, itself checked against FlopCounterMode) over this process's measured peak."""
    import re

    from helpers import write_random_corpus, write_run_config_file

    from attention_geometry.formats.corpus import load_corpus
    from attention_geometry.training.cost import measured_cpu_peak, update_flops
    from attention_geometry.training.loop import train
    from attention_geometry.training.run_config import load_run_config, resolve_run

    corpus = write_random_corpus(tmp_path / "c", n_train=64, block_len=16, vocab=50)
    cfg = load_run_config(write_run_config_file(tmp_path / "run.yaml", corpus, max_steps=12, eval_blocks=0))
    train(cfg, tmp_path / "out", threads=1, progress=False)
    row = _rows(tmp_path / "out" / PROVENANCE_CSV)[-1]
    tokens_s, mfu = float(row["tokens_per_s"]), float(row["mfu"])
    h = resolve_run(cfg, load_corpus(corpus)).hyper
    log = (tmp_path / "out" / "train.log").read_text()
    steps, seconds = re.findall(r"done: (\d+) steps in [\d.]+ s \(([\d.]+) s/step", log)[-1]
    per_update = h.batch_size * h.seq_len
    assert int(steps) == 12
    assert tokens_s == pytest.approx(per_update / float(seconds), rel=0.05)
    flops_per_position = update_flops(h, "encoder", h.seq_len) / per_update
    assert mfu == pytest.approx(tokens_s * flops_per_position / measured_cpu_peak(1), rel=1e-4)
