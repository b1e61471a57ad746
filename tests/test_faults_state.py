"""Damaged run state and config edge cases: checksums of snapshots and states,
the kept previous state, the run lock, legacy run dirs, the loss log, the corpus identified by content,
empty corpus configs, changed input text, and the one-line schema error. Every check looks at what a user
sees: files, exit codes, the single stderr line, and results compared with an undamaged run."""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import run_cli as _cli
from helpers import write_random_corpus as write_corpus
from helpers import write_run_config_file as write_run

from attention_geometry.cli import main as cli_main
from attention_geometry.data.corpus_config import corpus_config_from_dict
from attention_geometry.data.prepare import corpus_status, prepare_corpus
from attention_geometry.errors import UserError
from attention_geometry.formats import files, rundir
from attention_geometry.formats.corpus import CorpusError
from attention_geometry.training.loop import train
from attention_geometry.training.run_config import load_run_config

REPO = Path(__file__).resolve().parents[1]
CONSTANT = {"schedule": "constant"}
RUN = "tiny-random-encoder-standard-s0"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_cfg(tmp_path: Path, corpus: Path, max_steps: int, name: str = "run.yaml") -> Path:
    return write_run(
        tmp_path / name, corpus, max_steps=max_steps, state_every=3, snapshot_every=3, eval_every=3, overrides=CONSTANT
    )


def _same_run(a: Path, b: Path) -> None:
    """loss.csv and every snapshot's weights byte for byte."""
    assert (a / "loss.csv").read_bytes() == (b / "loss.csv").read_bytes()
    snaps = sorted(p.name for p in (a / "checkpoints").iterdir())
    assert snaps == sorted(p.name for p in (b / "checkpoints").iterdir())
    for s in snaps:
        assert _sha(a / "checkpoints" / s / "model.safetensors") == _sha(b / "checkpoints" / s / "model.safetensors"), s


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus):
    """A 9-step run trained in one go: what every resumed run below must equal."""
    tmp = tmp_path_factory.mktemp("ref")
    out = tmp / "ref"
    train(load_run_config(_run_cfg(tmp, corpus, 9)), out, progress=False)
    return out


@pytest.fixture()
def six(tmp_path, corpus):
    """A run trained to step 6 (states at 3 and 6), and the config that continues it to step 9."""
    out = tmp_path / "out"
    train(load_run_config(_run_cfg(tmp_path, corpus, 6)), out, progress=False)
    return out, _run_cfg(tmp_path, corpus, 9, "longer.yaml")


# ------------------------------------------------------------------------------------------ checksums


def test_checksums_record_every_file_and_find_changes(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.bin").write_bytes(b"\x01" * 1000)
    (d / "b.txt").write_text("hello")
    assert files.verify_checksums(d) is False  # none recorded: nothing to check
    files.write_checksums(d)
    rec = json.loads((d / files.CHECKSUMS).read_text())["files"]
    assert rec == {
        "a.bin": {"sha256": _sha(d / "a.bin"), "bytes": 1000},
        "b.txt": {"sha256": _sha(d / "b.txt"), "bytes": 5},
    }
    assert files.verify_checksums(d) is True
    with open(d / "a.bin", "r+b") as f:  # same size, other bytes
        f.seek(500)
        f.write(b"\x00")
    with pytest.raises(files.ChecksumError, match=r"a\.bin: sha256 differs"):
        files.verify_checksums(d)
    (d / "a.bin").write_bytes(b"\x01" * 10)
    with pytest.raises(files.ChecksumError, match=r"a\.bin: 10 bytes, 1000 when written"):
        files.verify_checksums(d)
    (d / "a.bin").write_bytes(b"\x01" * 1000)
    (d / "b.txt").unlink()
    with pytest.raises(files.ChecksumError, match=r"b\.txt: missing"):
        files.verify_checksums(d)
    (d / files.CHECKSUMS).write_text("{not json")
    with pytest.raises(files.ChecksumError, match="checksums.json: unreadable"):
        files.verify_checksums(d)


def test_rotate_dir_keeps_the_previous_folder(tmp_path):
    final, prev = tmp_path / "state", tmp_path / "state.prev"
    for i in range(3):
        tmp = tmp_path / f".tmp-{i}"
        tmp.mkdir()
        (tmp / "n").write_text(str(i))
        files.rotate_dir(tmp, final, prev)
    assert (final / "n").read_text() == "2" and (prev / "n").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "state.prev"]


def _safetensors_tensor(path: Path, needle: str) -> tuple[str, int, int]:
    """(name, absolute start, end) of the first tensor whose name contains `needle`, read from the header."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    name = sorted(k for k in header if needle in k)[0]
    a, b = header[name]["data_offsets"]
    return name, 8 + n + a, 8 + n + b


@pytest.mark.slow
def test_snapshots_carry_checksums_and_a_zeroed_key_tensor_is_refused(tmp_path, six):
    out, _ = six
    snap = out / "checkpoints" / "step-0000003"
    rec = json.loads((snap / "checksums.json").read_text())["files"]
    on_disk = {p.name for p in snap.iterdir() if p.name != "checksums.json"}
    assert set(rec) == on_disk and {"model.safetensors", "config.json", "run.yaml"} <= on_disk
    assert all(rec[n]["sha256"] == _sha(snap / n) for n in rec)
    from transformers import AutoModelForMaskedLM  # still a whole Hugging Face model folder

    AutoModelForMaskedLM.from_pretrained(str(snap))
    before = _cli("score-checkpoints", str(out), "--out", str(tmp_path / "ok.csv"), "--no-progress")
    assert before.returncode == 0 and "warning" not in before.stderr, before.stderr

    name, a, b = _safetensors_tensor(snap / "model.safetensors", "attention.self.key.weight")
    with open(snap / "model.safetensors", "r+b") as f:  # half of a key tensor zeroed after writing
        f.seek(a)
        f.write(b"\x00" * ((b - a) // 2))
    for args in (("score-checkpoints", str(out)), ("score", str(snap))):
        r = _cli(*args, "--out", str(tmp_path / "x.csv"), "--no-progress")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert (
            r.stderr.startswith("error: damaged snapshot: ")
            and f"{snap / 'model.safetensors'}: sha256 differs" in r.stderr
        )
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow
def test_score_updates_verifies_the_snapshots_it_reads_only(tmp_path, six, corpus):
    out, _ = six  # snapshots at steps 0, 3, 6
    name, a, b = _safetensors_tensor(
        out / "checkpoints" / "step-0000006" / "model.safetensors", "attention.self.key.weight"
    )
    with open(out / "checkpoints" / "step-0000006" / "model.safetensors", "r+b") as f:
        f.seek(a)
        f.write(b"\x00" * ((b - a) // 2))
    args = ("score-updates", str(out), "--corpus", str(corpus), "--batches", "1", "--batch-size", "8", "--no-progress")
    # step 0 reads snapshots 0 and 3 (its applied update): the damaged step 6 is never read
    ok = _cli(*args, "--steps", "0", "--out", str(tmp_path / "u0.csv"))
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    # step 3 reads snapshot 6 for its applied update: refused with one line naming it
    bad = _cli(*args, "--steps", "3", "--out", str(tmp_path / "u3.csv"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "damaged snapshot: " in bad.stderr and "step-0000006/model.safetensors: sha256 differs" in bad.stderr
    assert not (tmp_path / "u3.csv").exists()


def test_legacy_snapshots_are_read_with_one_warning(six, capsys):
    out, _ = six
    from attention_geometry.scoring.scorer import score_checkpoints

    verified = score_checkpoints(out, progress=False)
    capsys.readouterr()
    for p in (out / "checkpoints").iterdir():
        (p / "checksums.json").unlink()
    legacy = score_checkpoints(out, progress=False)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: ") and "3 of 3 snapshot(s) have no checksums.json" in err
    assert legacy.equals(verified)


# ------------------------------------------------------------------------------------------ state


def test_state_keeps_the_previous_one_with_checksums(six):
    out, _ = six
    assert rundir.state_step(out / "state") == 6 and rundir.state_step(out / "state.prev") == 3
    for d in (out / "state", out / "state.prev"):
        rec = json.loads((d / "checksums.json").read_text())["files"]
        assert set(rec) == {"model.safetensors", "training.pt", "state.json"}
        assert all(rec[n]["sha256"] == _sha(d / n) for n in rec)


@pytest.mark.parametrize("damage", ["truncate model.safetensors", "truncate training.pt", "garbage state.json"])
def test_a_damaged_newest_state_falls_back_to_the_previous_one(six, reference, capsys, damage):
    out, longer = six
    what, name = damage.split()
    target = out / "state" / name
    if what == "truncate":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    else:
        target.write_bytes(b"\x00\xff{not json")
    damaged = target.read_bytes()
    capsys.readouterr()
    summary = train(load_run_config(longer), out, progress=False)
    err = capsys.readouterr().err
    assert summary["status"] == "resumed"
    assert err.count("\n") == 1 and err.startswith(f"warning: damaged training state: {target}: "), err
    assert f"resuming from the previous state {out / 'state.prev'} at step 3" in err
    _same_run(out, reference)  # from step 3 again: equal to the run trained in one go
    assert rundir.state_step(out / "state") == 9 and rundir.state_step(out / "state.prev") == 6
    assert (out / "state.damaged" / name).read_bytes() == damaged  # set aside, never read


def test_no_intact_state_left_is_one_line_naming_the_file(six):
    out, longer = six
    for d in ("state", "state.prev"):
        (out / d / "training.pt").write_bytes(b"")
    r = _cli("train", "--config", str(longer), "--out", str(out), "--no-progress")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: damaged training state: {out / 'state' / 'training.pt'}: 0 bytes")
    assert f"move {out} aside to restart the run from step 0" in r.stderr


def test_a_legacy_state_without_checksums_resumes_with_one_warning(six, reference, capsys):
    out, longer = six
    for d in ("state", "state.prev"):
        (out / d / "checksums.json").unlink()
    capsys.readouterr()
    assert train(load_run_config(longer), out, progress=False)["status"] == "resumed"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "state: no checksums.json" in err and err.startswith("warning: ")
    _same_run(out, reference)
    assert (out / "state" / "checksums.json").is_file()  # written with the next state


@pytest.mark.slow
def test_a_legacy_state_that_cannot_be_read_is_one_line(six):
    out, longer = six
    shutil.rmtree(out / "state.prev")
    (out / "state" / "checksums.json").unlink()
    (out / "state" / "training.pt").write_bytes(b"garbage")
    r = _cli("train", "--config", str(longer), "--out", str(out), "--no-progress")
    assert r.returncode == 2 and r.stderr.count("\n") == 2, r.stderr  # the legacy warning, then the error
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f"error: {out / 'state'}: unreadable training state") and "move" in last


def test_loss_rows_missing_before_the_state_step_are_an_error(six):
    out, longer = six
    with open(out / "loss.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    kept = [r for r in rows if r["step"] not in ("2", "4")]
    with open(out / "loss.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(kept)
    with pytest.raises(
        UserError, match=r"loss\.csv: damaged loss log \(no rows for 2 step\(s\) before the state's step: 2, 4\)"
    ):
        train(load_run_config(longer), out, progress=False)


# ------------------------------------------------------------------------------------------ lock


def _holder(lock: Path) -> subprocess.Popen:
    """Another process holding `lock` as a trainer does (files.pid_lock)."""
    code = (
        "import sys, time; from attention_geometry.formats.files import pid_lock\n"
        f"with pid_lock({str(lock)!r}, 'run x'):\n    print('held', flush=True); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_train_on_a_locked_run_stops_at_once(tmp_path, corpus):
    out = tmp_path / "out"
    holder = _holder(rundir.lock_path(out))
    try:
        t0 = time.time()
        r = _cli("train", "--config", str(_run_cfg(tmp_path, corpus, 6)), "--out", str(out), "--no-progress")
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: run {out} is locked by pid {holder.pid} ")
    assert not out.exists() and time.time() - t0 < 60


def test_a_train_through_a_symlink_takes_the_real_folders_lock(tmp_path, corpus):
    """Issue 59 (LOW): two trainers, one naming the run through a symbolic link to the other's folder, ran at once:
    the lock was named after the path as given. Now it is the real folder's."""
    out = tmp_path / "out"
    out.mkdir()
    link = tmp_path / "link"
    link.symlink_to(out, target_is_directory=True)
    assert rundir.lock_path(link) == rundir.lock_path(out) == tmp_path / "out.lock"
    holder = _holder(rundir.lock_path(out))
    try:
        r = _cli("train", "--config", str(_run_cfg(tmp_path, corpus, 6)), "--out", str(link), "--no-progress")
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 2 and "is locked by pid" in r.stderr, r.stderr
    assert list(out.iterdir()) == []


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path):
    lock = tmp_path / "run.lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(dead.stdout)  # a pid left by a process that ended (its flock ended with it)
    seen = []
    with files.pid_lock(lock, "run r", warn=seen.append):
        assert lock.read_text().strip() == str(os.getpid())
        with pytest.raises(UserError, match=f"run r is locked by pid {os.getpid()}"):
            with files.pid_lock(lock, "run r"):
                pass
    assert seen == [
        f"run r: taking over the stale lock of pid {dead.stdout.strip()}, which ended without releasing it ({lock})"
    ]
    assert not lock.exists()


# ------------------------------------------------------------------------------------------ corpus identity


def test_a_moved_byte_identical_corpus_resumes_and_another_one_restarts(tmp_path, corpus, reference):
    moved = tmp_path / "elsewhere" / "c"
    shutil.copytree(corpus, moved)
    out = tmp_path / "out"
    train(load_run_config(_run_cfg(tmp_path, corpus, 6)), out, progress=False)
    # the same settings on the moved copy: the same run (finished), run.yaml now names the new path
    assert (
        train(load_run_config(_run_cfg(tmp_path, moved, 6, "moved6.yaml")), out, progress=False)["status"] == "finished"
    )
    assert yaml.safe_load((out / "run.yaml").read_text())["corpus"] == str(moved.resolve())
    assert f"corpus moved ({corpus.resolve()} -> {moved.resolve()})" in (out / "train.log").read_text()
    summary = train(load_run_config(_run_cfg(tmp_path, moved, 9, "moved.yaml")), out, progress=False)
    assert summary["status"] == "resumed" and not (tmp_path / "out.old-1").exists()
    _same_run(out, reference)
    other = write_corpus(tmp_path / "other", seed=1)  # same shape, other tokens, same name
    assert (
        train(load_run_config(_run_cfg(tmp_path, other, 9, "other.yaml")), out, progress=False)["status"] == "trained"
    )
    assert (tmp_path / "out.old-1").is_dir()
    assert "settings changed (corpus_sha256" in (out / "train.log").read_text()


# ------------------------------------------------------------------------------------------ corpus config


@pytest.mark.parametrize(
    "text, got",
    [
        ("", "an empty file"),
        ("# only a comment\n", "an empty file"),
        ("- dataset: wiki_offline\n", "a list"),
        ("wiki_offline\n", "a str"),
    ],
)
def test_an_empty_or_non_mapping_corpus_config_is_one_line(tmp_path, text, got):
    cfg = tmp_path / "CORPUS.yaml"
    cfg.write_text(text)
    r = _cli("prepare-corpus", "--config", str(cfg), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr == f"error: {cfg}: a corpus config is a mapping of keys (e.g. `dataset: wiki_offline`), got {got}\n"
    assert not (tmp_path / "c").exists()


def _docs(folder: Path, n: int = 30, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"d{i:03d}.txt").write_text(
            f"Document {i} {extra}: the river and the mountain, the city and the sea, number {i * 7} of many.\n"
        )
    return folder


def test_changed_input_text_is_not_nothing_to_do(tmp_path):
    text = _docs(tmp_path / "text")
    cfg = corpus_config_from_dict(
        {
            "dataset": "text_files",
            "paths": [str(text)],
            "block_len": 16,
            "tokenizer": {"vocab_size": 100, "min_frequency": 1},
        }
    )
    out = prepare_corpus(cfg, tmp_path / "c")
    m = json.loads((out / "manifest.json").read_text())
    assert m["files_sha256"] == {n: _sha(out / n) for n in ("train.npy", "heldout.npy", "tokenizer.json")}
    assert corpus_status(cfg, out) == "current"
    from attention_geometry.data.sources import input_fingerprint

    before = input_fingerprint(cfg)
    assert before[0] == f"{text / 'd000.txt'} {_sha(text / 'd000.txt')}" and len(before) == 30
    (text / "d007.txt").write_text("Document 7 was rewritten: the forest and the ocean.\n")
    assert input_fingerprint(cfg) != before  # the workflow's parameter of prepare_corpus changes
    assert corpus_status(cfg, out) == "changed"
    with pytest.raises(
        CorpusError,
        match=r"prepared from input text that changed since \(the content of .*d007\.txt "
        r"changed \(sha256\)\): use --force",
    ):
        prepare_corpus(cfg, out)
    prepare_corpus(cfg, out, force=True)
    assert json.loads((out / "manifest.json").read_text())["documents_sha256"] != m["documents_sha256"]
    assert corpus_status(cfg, out) == "current"
    (text / "d030.txt").write_text("Document 30: a new file in the folder.\n")
    assert corpus_status(cfg, out) == "changed"


def test_the_workflow_hands_the_input_hashes_to_the_corpus_rule(tmp_path):
    from helpers import config_plan, validated_config

    cfg = validated_config()
    text = _docs(tmp_path / "text")
    cfg["corpora"] = {"wiki_offline": {"dataset": "text_files", "paths": [str(text)], "block_len": 16}}
    p = config_plan(cfg)
    first = p.corpus_inputs("wiki_offline")
    assert first.splitlines()[0] == f"{text / 'd000.txt'} {_sha(text / 'd000.txt')}"
    (text / "d000.txt").write_text("changed\n")
    assert config_plan(cfg).corpus_inputs("wiki_offline") != first
    assert "inputs=lambda w: PLAN.corpus_inputs(w.corpus)" in (REPO / "rules" / "data.smk").read_text()


# ------------------------------------------------------------------------------------------ schema error


def test_a_schema_error_is_one_line_with_the_key_path():
    from attention_geometry.workflow.plan import schema_error

    schema = str(REPO / "config" / "schema.yaml")
    good = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    assert schema_error(good, schema) is None
    bad = copy.deepcopy(good)
    bad["training"]["groups"]["main"]["settings"]["max_stpes"] = 3
    assert schema_error(bad, schema) == (
        "config training.groups.main.settings: unknown key `max_stpes` (did you mean `max_steps`?)"
    )
    bad = copy.deepcopy(good)
    bad["training"]["groups"]["main"]["runs"][0]["size"] = 7
    msg = schema_error(bad, schema)
    assert msg.startswith("config training.groups.main.runs[0].size: ") and "\n" not in msg and len(msg) < 400


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device"),
        "safetensors",  # the writer's own error type, with the OS error in its text
    ],
)
def test_a_full_disk_is_one_line_and_loses_nothing(tmp_path, corpus, monkeypatch, capsys, error):
    """Training into a full file system: one `error:` line naming the folder, the free space and the size of
    one snapshot; no temporary folder is left; the same command later resumes to the same final weights."""
    from safetensors import SafetensorError

    if error == "safetensors":
        error = SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )
    cfg = _run_cfg(tmp_path, corpus, 9)
    out = tmp_path / "out"
    real = files.write_checksums
    target = "attention_geometry.training.snapshots.write_checksums"  # the name the snapshot writer calls
    calls = {"n": 0}

    def full_after_two(folder):
        calls["n"] += 1
        if calls["n"] > 2:  # the disk fills up after the first snapshot and state
            raise error
        return real(folder)

    monkeypatch.setattr(target, full_after_two)
    code = cli_main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith(("error", "Traceback"))]
    assert code == 2 and len(lines) == 1 and "no space left on the device for" in lines[0], err
    assert "MiB free; one takes about" in lines[0] and "run the same command again" in lines[0]
    assert not [p for p in out.rglob(".tmp-*")]
    monkeypatch.setattr(target, real)
    assert cli_main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    fresh = tmp_path / "fresh"
    train(load_run_config(cfg), fresh, progress=False)
    final = "checkpoints/step-0000009/model.safetensors"
    assert (out / final).read_bytes() == (fresh / final).read_bytes()


def test_a_deleted_final_snapshot_is_rewritten_from_the_training_state(tmp_path, corpus):
    """A finished run whose final snapshot was moved away: the same command writes it again from the training
    state (the same bytes), instead of answering "nothing to do"; a missing earlier snapshot cannot be rebuilt
    and is one line naming it."""
    cfg = _run_cfg(tmp_path, corpus, 9)
    out = tmp_path / "out"
    train(load_run_config(cfg), out, progress=False)
    final = out / "checkpoints" / "step-0000009"
    kept = tmp_path / "kept"
    shutil.move(final, kept)
    summary = train(load_run_config(cfg), out, progress=False)
    assert summary["status"] == "finished"
    for f in ("model.safetensors", "config.json", "run.yaml", "checksums.json"):
        assert (final / f).read_bytes() == (kept / f).read_bytes(), f
    assert "rewritten from the training state" in (out / "train.log").read_text()
    shutil.rmtree(out / "checkpoints" / "step-0000003")
    with pytest.raises(UserError, match=r"no snapshot of step\(s\) 3; only the final step's can be rewritten"):
        train(load_run_config(cfg), out, progress=False)
