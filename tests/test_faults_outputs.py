"""The output side of fault handling: a command's --out never destroys what it reads or what the user keeps
there, and every write that fails is one `error:` line with nothing changed. prefetch-qk and prepare-corpus
replace a whole folder, join-parts and concat-tables one file (files.atomic_path); each case below is checked
against a hash of the whole temporary tree taken before the command ran."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from helpers import cli_in_process as cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import TABLE_COLUMNS
from attention_geometry.weights.prefetch import PREFETCH_MARKER

# ------------------------------------------------------------------------------------------------ helpers


def assert_one_line(result, pattern: str) -> str:
    code, _, err = result
    assert code not in (0, None), err
    lines = [ln for ln in err.splitlines() if not ln.startswith(("reading ", "counting ", "tokenizing "))]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert re.search(pattern, lines[0]), err
    return lines[0]


def tree(root: Path) -> dict[str, str]:
    """Every entry under root (relative path -> sha256 of a file, 'dir', or the target of a symbolic link)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link->" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def bert_dir(path: Path) -> Path:
    """A tiny BERT checkpoint folder (config.json + model.safetensors) written with the safetensors library."""
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    sd = {"embeddings.word_embeddings.weight": torch.randn(24, 16, generator=g)}
    for i in range(2):
        for p in ("query", "key", "value"):
            sd[f"encoder.layer.{i}.attention.self.{p}.weight"] = torch.randn(16, 16, generator=g)
    save_file(sd, path / "model.safetensors")
    cfg = {
        "model_type": "bert",
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 32,
        "vocab_size": 24,
        "max_position_embeddings": 16,
    }
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def prefetch(src, out, *extra):
    return cli(["prefetch-qk", src, "--out", out, "--no-progress", *extra])


def is_prefetch_output(out: Path) -> bool:
    return out.is_dir() and {"config.json", "model.safetensors", PREFETCH_MARKER} <= {p.name for p in out.iterdir()}


# -------------------------------------------------------------------------------- prefetch-qk --out paths


@pytest.mark.parametrize("where", ["source", "inside", "holds"])
def test_prefetch_refuses_an_out_that_is_inside_or_holds_its_source(tmp_path, where):
    src = bert_dir(tmp_path / "models" / "base")
    out = {"source": src, "inside": src / "qk", "holds": tmp_path / "models"}[where]
    before = tree(tmp_path)
    assert_one_line(prefetch(src, out), r"source")
    assert_one_line(prefetch(src, out, "--force"), r"source")  # never, even with --force
    assert tree(tmp_path) == before


def test_prefetch_refuses_a_folder_of_other_files_and_a_file(tmp_path):
    src = bert_dir(tmp_path / "base")
    w = tmp_path / "w"
    w.mkdir()
    (w / "notes.txt").write_text("x")
    f = tmp_path / "file.csv"
    f.write_text("a,b\n")
    before = tree(tmp_path)
    assert_one_line(prefetch(src, w), r"w: .*not a previous prefetch-qk output.*--force")
    assert_one_line(prefetch(src, f), r"file.csv: .*file.*--force")
    assert tree(tmp_path) == before
    assert prefetch(src, w, "--force")[0] == 0 and is_prefetch_output(w) and not (w / "notes.txt").exists()
    assert prefetch(src, f, "--force")[0] == 0 and is_prefetch_output(f)


def test_prefetch_replaces_its_own_previous_output_and_fills_an_empty_folder(tmp_path):
    src = bert_dir(tmp_path / "base")
    out = tmp_path / "qk"
    out.mkdir()
    assert prefetch(src, out)[0] == 0 and is_prefetch_output(out)
    marker = json.loads((out / PREFETCH_MARKER).read_text())
    assert marker["tensors"] == 4 and marker["origin"] == str(src)
    (out / ".snakemake_timestamp").write_text("")  # what Snakemake adds to a directory output
    assert prefetch(src, out)[0] == 0 and is_prefetch_output(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "qk"]


def test_prefetch_to_the_current_folder_is_one_line(tmp_path, monkeypatch):
    src = bert_dir(tmp_path / "base")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    before = tree(tmp_path)
    assert_one_line(prefetch(src, "."), r"current folder")
    assert_one_line(prefetch(src, "..", "--force"), r"current folder|source")
    assert tree(tmp_path) == before


def test_prefetch_under_a_file_is_one_line(tmp_path):
    src = bert_dir(tmp_path / "base")
    (tmp_path / "afile").write_text("x")
    before = tree(tmp_path)
    assert_one_line(prefetch(src, tmp_path / "afile" / "qk"), r"cannot write there")
    assert tree(tmp_path) == before


# ------------------------------------------------------------------------ the atomic writer: one line each


def test_join_parts_onto_an_existing_folder_is_one_line(tmp_path):
    (tmp_path / "a").write_bytes(b"abc")
    digest = hashlib.sha256(b"abc").hexdigest()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("k")
    before = tree(tmp_path)
    assert_one_line(
        cli(["join-parts", tmp_path / "a", "--sha256", digest, "--out", tmp_path / "d"]), r"d: is a directory"
    )
    assert tree(tmp_path) == before


def test_join_parts_onto_one_of_its_parts_is_one_line(tmp_path):
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "b").write_bytes(b"def")
    digest = hashlib.sha256(b"abcdef").hexdigest()
    before = tree(tmp_path)
    argv = ["join-parts", tmp_path / "a", tmp_path / "b", "--sha256", digest, "--out", tmp_path / "b"]
    assert_one_line(cli(argv), r"b: .*one of the parts")
    assert tree(tmp_path) == before


def test_an_out_below_a_dangling_link_is_one_line(tmp_path):
    # the nearest existing folder is writable (the check passes), but the link cannot become a folder
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    (tmp_path / "p").write_bytes(b"abc")
    before = tree(tmp_path)
    out = tmp_path / "link" / "o.csv"
    assert_one_line(cli(["concat-tables", table, "--out", out]), rf"{re.escape(str(out))}: cannot write")
    digest = hashlib.sha256(b"abc").hexdigest()
    assert_one_line(cli(["join-parts", tmp_path / "p", "--sha256", digest, "--out", out]), r"cannot write")
    assert tree(tmp_path) == before


def test_a_long_output_name_is_written(tmp_path):
    # a name that fits the file system's limit, whose temporary name (a dot, a suffix) would not
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    out = tmp_path / ("x" * 240 + ".csv")
    code, _, err = cli(["concat-tables", table, "--out", out])
    assert code == 0, err
    assert out.read_text() == "a,b\n1,2\n" and sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "t.csv"])


@pytest.mark.parametrize(
    "exc", [FileNotFoundError(2, "No such file or directory"), PermissionError(13, "Permission denied")]
)
def test_table_writer_errors_are_one_line(tmp_path, monkeypatch, exc):
    import pandas as pd

    from attention_geometry.formats import files

    def fail(self, path, *a, **k):
        raise exc

    monkeypatch.setattr(pd.DataFrame, "to_csv", fail)
    with pytest.raises(UserError, match=r"o.csv: cannot write") as e:
        files.atomic_write_table(pd.DataFrame({"a": [1]}), tmp_path / "o.csv")
    assert "\n" not in str(e.value) and list(tmp_path.iterdir()) == []

    def no_rename(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(UserError, match=r"b.bin: cannot write .*Permission denied"):
        files.atomic_write_bytes(tmp_path / "b.bin", b"x")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------- concat-tables keys


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


LOSS = TABLE_COLUMNS["training_loss"]


def loss_row(run, step):
    return [run, "tiny", "w", "encoder", "standard", "1", str(step), "7.5", "", "0.001"]


def test_concat_tables_refuses_the_same_input_twice(tmp_path):
    a = _write(tmp_path / "a.csv", LOSS, [loss_row("r1", 0)])
    (tmp_path / "sub").mkdir()
    for other in (a, tmp_path / "sub" / ".." / "a.csv"):
        assert_one_line(
            cli(["concat-tables", a, other, "--out", tmp_path / "o.csv", "--kind", "training_loss"]),
            r"a.csv.* given twice",
        )
    assert not (tmp_path / "o.csv").exists()


def test_concat_tables_refuses_duplicate_key_rows(tmp_path):
    a = _write(tmp_path / "a.csv", LOSS, [loss_row("r1", 0), loss_row("r1", 10)])
    b = _write(tmp_path / "b.csv", LOSS, [loss_row("r2", 0), loss_row("r1", 10)])  # r1 step 10 again
    c = _write(tmp_path / "c.csv", LOSS, [loss_row("r3", 0), loss_row("r3", 0)])  # within one file
    for kind in (["--kind", "training_loss"], []):  # the kind given, or known from the columns
        assert_one_line(
            cli(["concat-tables", a, b, "--out", tmp_path / "o.csv", *kind]), r"b.csv:3: .*run=r1, step=10.*a.csv:3"
        )
        assert_one_line(cli(["concat-tables", c, "--out", tmp_path / "o.csv", *kind]), r"c.csv:3: .*run=r3, step=0")
    assert not (tmp_path / "o.csv").exists()
    assert cli(["concat-tables", a, c.with_name("a.csv"), "--out", tmp_path / "o.csv"])[0] == 2
    good = _write(tmp_path / "g.csv", LOSS, [loss_row("r2", 0)])
    assert cli(["concat-tables", a, good, "--out", tmp_path / "o.csv", "--kind", "training_loss"])[0] == 0


def test_concat_tables_refuses_an_out_that_is_an_input(tmp_path):
    a = _write(tmp_path / "a.csv", LOSS, [loss_row("r1", 0)])
    b = _write(tmp_path / "b.csv", LOSS, [loss_row("r2", 0)])
    before = tree(tmp_path)
    assert_one_line(cli(["concat-tables", a, b, "--out", a]), r"a.csv: .*one of the input")
    assert tree(tmp_path) == before


# ------------------------------------------------------------------------------ prepare-corpus --out paths


def write_corpus_inputs(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True)
    for i in range(12):
        (docs / f"d{i}.txt").write_text(f"word{i} other thing more text here " * 20 + "\n")
    conf = root / "C.yaml"
    conf.write_text(
        f"dataset: text_files\nname: toy\npaths: [{docs}]\nblock_len: 16\n"
        "tokenizer: {kind: wordpiece, vocab_size: 64, min_frequency: 1}\nheldout_fraction: 0.2\n"
    )
    return conf


@pytest.mark.parametrize("where", ["inputs", "inside", "holds", "config"])
def test_prepare_corpus_never_replaces_its_inputs(tmp_path, where):
    conf = write_corpus_inputs(tmp_path / "in")
    out = {
        "inputs": tmp_path / "in" / "docs",
        "inside": tmp_path / "in" / "docs" / "corpus",
        "holds": tmp_path / "in",
        "config": conf,
    }[where]
    before = tree(tmp_path)
    assert_one_line(cli(["prepare-corpus", "--config", conf, "--out", out, "--force"]), r"source|input|config")
    assert tree(tmp_path) == before


def test_prepare_corpus_to_the_current_folder_or_under_a_file_is_one_line(tmp_path, monkeypatch):
    conf = write_corpus_inputs(tmp_path / "in")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    before = tree(tmp_path)
    assert_one_line(cli(["prepare-corpus", "--config", conf, "--out", ".", "--force"]), r"current folder")
    assert_one_line(cli(["prepare-corpus", "--config", conf, "--out", tmp_path / "afile" / "c"]), r"cannot write")
    assert tree(tmp_path) == before


# ------------------------------------------------------------------------------- property: any --out at all

COMMANDS = ["prefetch-qk", "join-parts", "concat-tables", "prepare-corpus"]
TARGETS = [
    "new",  # a fresh name
    "new-nested",  # below folders that do not exist yet
    "file",  # an existing regular file
    "empty-dir",
    "full-dir",  # a folder with the user's files
    "source",  # what the command reads
    "inside-source",
    "holds-source",
    "under-file",
    "dangling-link",
    "link-to-dir",
    "previous",  # this command's own earlier output
    "cwd",
]


# what a folder command may replace without --force (a file command replaces a file, as any writer does)
REPLACEABLE = {
    "prefetch-qk": {"new", "new-nested", "empty-dir", "previous"},
    "prepare-corpus": {"new", "new-nested", "previous", "dangling-link"},  # a link to nothing: nothing there
}
READ_FOLDERS = ("src/model/", "corpus-in/docs/")  # the folders prefetch-qk and prepare-corpus read


def _setup(root: Path) -> dict:
    bert_dir(root / "src" / "model")
    (root / "parts").mkdir()
    (root / "parts" / "p0").write_bytes(b"first part ")
    (root / "parts" / "p1").write_bytes(b"second part")
    (root / "tables").mkdir()
    _write(root / "tables" / "a.csv", LOSS, [loss_row("r1", 0)])
    _write(root / "tables" / "b.csv", LOSS, [loss_row("r2", 0)])
    conf = write_corpus_inputs(root / "corpus-in")
    (root / "keep").mkdir()
    (root / "keep" / "notes.txt").write_text("the user's notes")
    (root / "keep" / "sub").mkdir()
    (root / "keep" / "sub" / "more.txt").write_text("more")
    (root / "empty").mkdir()
    (root / "afile.csv").write_text("not a table of ours\n")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "linkdir").symlink_to(root / "keep")
    (root / "cwd").mkdir()
    return {
        "prefetch-qk": (root / "src" / "model", root / "src"),
        "join-parts": (root / "parts" / "p1", root / "parts"),
        "concat-tables": (root / "tables" / "a.csv", root / "tables"),
        "prepare-corpus": (root / "corpus-in" / "docs", root / "corpus-in"),
        "conf": conf,
    }


def _argv(command: str, root: Path, paths: dict, out, force: bool) -> list:
    if command == "prefetch-qk":
        argv = ["prefetch-qk", root / "src" / "model", "--out", out, "--no-progress"]
    elif command == "join-parts":
        digest = hashlib.sha256(b"first part second part").hexdigest()
        argv = ["join-parts", root / "parts" / "p0", root / "parts" / "p1", "--sha256", digest, "--out", out]
    elif command == "concat-tables":
        argv = ["concat-tables", root / "tables" / "a.csv", root / "tables" / "b.csv", "--out", out]
    else:
        argv = ["prepare-corpus", "--config", paths["conf"], "--out", out]
    return argv + (["--force"] if force and command in ("prefetch-qk", "prepare-corpus") else [])


def _target(command: str, target: str, root: Path, paths: dict, name: str):
    file_out = command in ("join-parts", "concat-tables")
    suffix = ".csv" if command == "concat-tables" else ""
    source, holder = paths[command]
    return {
        "new": root / f"{name}{suffix}",
        "new-nested": root / name / "deeper" / f"out{suffix}",
        "file": root / "afile.csv",
        "empty-dir": root / "empty",
        "full-dir": root / "keep",
        "source": source,
        "inside-source": (source.parent if file_out else source) / f"{name}{suffix}",
        "holds-source": holder,
        "under-file": root / "afile.csv" / f"{name}{suffix}",
        "dangling-link": root / "dangling",
        "link-to-dir": root / "linkdir",
        "previous": root / f"prev{suffix}",
        "cwd": ".",
    }[target]


def _intended(command: str, out: Path) -> bool:
    if command == "prefetch-qk":
        return is_prefetch_output(out)
    if command == "join-parts":
        return out.is_file() and out.read_bytes() == b"first part second part"
    if command == "concat-tables":
        return (
            out.is_file()
            and out.read_text()
            == ",".join(LOSS) + "\n" + "\n".join(",".join(loss_row(r, 0)) for r in ("r1", "r2")) + "\n"
        )
    return (out / "manifest.json").is_file() and (out / "train.npy").is_file()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    command=st.sampled_from(COMMANDS),
    target=st.sampled_from(TARGETS),
    force=st.booleans(),
    name=st.text(alphabet="abcxyz-_.", min_size=1, max_size=12).filter(lambda s: s not in (".", "..")),
)
def test_any_out_ends_in_the_output_or_one_line_with_nothing_changed(command, target, force, name):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        paths = _setup(root)
        if target == "previous":
            first = _target(command, "previous", root, paths, name)
            assert cli(_argv(command, root, paths, first, False))[0] == 0
        out = _target(command, target, root, paths, name)
        cwd = os.getcwd()
        os.chdir(root / "cwd")
        try:
            before = tree(root)
            result = cli(_argv(command, root, paths, out, force))
            after = tree(root)
        finally:
            os.chdir(cwd)
        code, _, err = result
        if code != 0:
            assert_one_line(result, ".")
            assert after == before, (command, target, force, err)
            return
        out = Path(os.path.abspath(root / "cwd" / out))
        rel = out.relative_to(root).as_posix()
        assert _intended(command, out), (command, target, force, err)
        if command in REPLACEABLE and not force:  # a folder command replaced only what it may without --force
            assert target in REPLACEABLE[command], (command, target, err)
        inputs = ("src/", "parts/", "tables/", "corpus-in/")
        for k, v in before.items():  # what the command read, and everything beside its output, is unchanged
            if k.startswith(inputs) or not (k == rel or k.startswith(rel + "/")):
                assert after.get(k) == v, (command, target, force, k)
        new = [k for k in after if k not in before]
        assert not [k for k in new if k.startswith(READ_FOLDERS)], (command, target, new)  # nothing into a source
        new = [k for k in new if not (k == rel or k.startswith(rel + "/"))]
        assert all(rel.startswith(k + "/") for k in new), (command, target, new)  # only the folders above out


# ------------------------------------------------------------------- outputs inside a run (issue 59.3)


def _fake_run(root: Path) -> Path:
    """A run folder's own files (the out check runs before anything is read)."""
    run = root / "run"
    (run / "checkpoints" / "step-0000100").mkdir(parents=True)
    (run / "run.yaml").write_text("corpus: c\n")
    (run / "loss.csv").write_text("run,step,train_loss\nr,0,7.0\n")
    (run / "checkpoints" / "step-0000100" / "config.json").write_text("{}")
    (root / "trainer" / "checkpoint-500").mkdir(parents=True)
    return run


@pytest.mark.parametrize(
    "where",
    [
        "run/loss.csv",
        "run/provenance.csv",
        "run/extra.csv",
        "run/checkpoints/step-0000100/extra.csv",
        "trainer/checkpoint-500/scores.csv",
    ],
)
def test_score_checkpoints_refuses_an_out_inside_a_run_or_snapshot(tmp_path, where):
    run = _fake_run(tmp_path)
    before = tree(tmp_path)
    source = str(run) if where.startswith("run") else str(tmp_path / "trainer")
    assert_one_line(cli(["score-checkpoints", source, "--out", str(tmp_path / where)]), r"lies inside|inside the")
    assert tree(tmp_path) == before  # the loss log untouched, nothing added


def test_a_config_named_run_yaml_beside_the_output_is_not_a_run_folder(tmp_path):
    """A user's own config called run.yaml (what `train --config run.yaml --out out/` reads) makes its folder no run
    folder: only a run.yaml with what a run writes beside it (train.log, loss.csv, checkpoints/, state/) does."""
    from attention_geometry.formats.rundir import owning_folder

    run = _fake_run(tmp_path)
    (tmp_path / "run.yaml").write_text("corpus: c\n")
    assert owning_folder(tmp_path / "ok.csv") is None
    assert owning_folder(run / "extra.csv") == run.resolve()
    (run / "loss.csv").unlink()
    (run / "train.log").write_text("")
    assert owning_folder(run / "extra.csv") == run.resolve()  # a run that has started but not ended
    code, _, err = cli(["score-checkpoints", str(run), "--out", str(tmp_path / "ok.csv")])
    assert "inside the run" not in err  # it fails later, on the fake snapshot's missing weights


def test_score_refuses_an_out_inside_a_snapshot_and_the_workflows_own_tables_pass_the_check(tmp_path):
    run = _fake_run(tmp_path)
    snap = run / "checkpoints" / "step-0000100"
    before = tree(tmp_path)
    assert_one_line(cli(["score", str(snap), "--out", str(snap / "extra.csv")]), r"inside the run or snapshot")
    assert_one_line(cli(["score", str(snap), "--out", str(run / "loss.csv")]), r"inside the run or snapshot")
    assert tree(tmp_path) == before
    # the workflow's own score table in the run folder is not refused by the out check (it fails later, on the
    # fake snapshot's missing weights, for another reason)
    code, _, err = cli(["score-checkpoints", str(run), "--out", str(run / "scores.csv")])
    assert code != 0 and "lies inside" not in err and "inside the run" not in err, err
