"""The input side of fault handling: a bad value in what a command reads (an image set's labels and config, a
Trainer output folder, a corpus's documents, a table's keys, a run's corpus) ends in the right result or one
`error:` line, never in a silently wrong result (a 65536-way classifier, a skipped checkpoint, a held-out
document the model trained on, rows counted twice), and the inputs are left as they were."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from helpers import cli_in_process as cli
from helpers import tiny_bert, write_heldout_corpus, write_random_corpus, write_snapshot_run
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from attention_geometry.data.image_config import image_config_from_dict
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import TABLE_COLUMNS
from attention_geometry.formats.corpus import CorpusError, corpus_sha256, load_corpus, load_images
from attention_geometry.formats.rundir import list_trainer_checkpoints

# ------------------------------------------------------------------------------------------------ helpers


def assert_one_line(result, pattern: str) -> str:
    code, _, err = result
    assert code not in (0, None), err
    # what is left of each line after progress bars (datasets' own, on when it was imported before the CLI ran)
    lines = [ln.split("\r")[-1] for ln in err.split("\n")]
    lines = [
        ln
        for ln in lines
        if ln and not re.search(r"(examples|img|it|ba)/s\]$|^(reading|counting|tokenizing|hashing) ", ln)
    ]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert re.search(pattern, lines[0]), err
    return lines[0]


def tree(root: Path) -> dict[str, str]:
    """Every file under root (relative path -> sha256)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ----------------------------------------------------------------------------------------------- image sets


def png(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def write_hub_images(root: Path, labels, label_feature=None, n_test: int = 0, seed: int = 0) -> Path:
    """A local stand-in of a hub image dataset: plain_text/train-00000-of-00001.parquet (and a test split of
    n_test images of classes 0, 1, ...) with an `img` column of 8x8 RGB PNGs and a `label` column of `labels`
    (plain int64 unless `label_feature` is given), written by `datasets` as the hub's files are."""
    from datasets import Dataset, Features, Image, Value

    rng = np.random.default_rng(seed)
    for split, labs in (("train", list(labels)), ("test", [i % 2 for i in range(n_test)])):
        if not labs:
            continue
        arr = rng.integers(0, 256, size=(len(labs), 8, 8, 3), dtype=np.uint8)
        features = Features({"img": Image(), "label": label_feature or Value("int64")})
        ds = Dataset.from_dict(
            {"img": [{"bytes": png(a), "path": None} for a in arr], "label": labs}, features=features
        )
        (root / "plain_text").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(root / "plain_text" / f"{split}-00000-of-00001.parquet"))
    return root


def hub_config(root: Path, path: Path, **kw) -> Path:
    """IMAGES.yaml for the stand-in at `root` (no held-out split of its own: a stratified one)."""
    hub = {
        "path": str(root),
        "name": None,
        "heldout_split": None,
        "data_files": {"train": "plain_text/train-*.parquet"},
        **kw.pop("hub", {}),
    }
    path.write_text(yaml.safe_dump({"dataset": "cifar10", "hub": hub, "heldout_fraction": 0.25, **kw}))
    return path


def prepare_images(cfg: Path, out: Path, *extra):
    return cli(["prepare-images", "--config", cfg, "--out", out, "--no-progress", *extra])


@pytest.mark.parametrize(
    "bad, pattern", [(-1, r"row 3 has class id -1, outside 0\.\.65535 .*unlabelled"), (70000, "70000")]
)
def test_a_label_that_is_no_class_id_is_one_line(tmp_path, bad, pattern):
    """A -1 (the hub's mark of an unlabelled image) was stored as uint16 65535, and `train` built a 65536-way
    classifier from it: every label is checked before it is stored."""
    hub = write_hub_images(tmp_path / "hub", [0, 1, 0, bad, 1, 0, 1, 0])
    cfg = hub_config(hub, tmp_path / "c.yaml")
    before = tree(tmp_path)
    assert_one_line(prepare_images(cfg, tmp_path / "set"), pattern)
    assert tree(tmp_path) == before and not (tmp_path / "set").exists()


def test_class_names_bound_the_labels(tmp_path):
    from attention_geometry.data.images import class_ids

    with pytest.raises(CorpusError, match=r"row 1 has class id 3, outside 0\.\.2"):
        class_ids([0, 3, 1], ["a", "b", "c"], "w")
    with pytest.raises(CorpusError, match="not whole numbers"):
        class_ids([0.5, 1.0], None, "w")
    with pytest.raises(CorpusError, match="not class ids"):
        class_ids([0, None], None, "w")
    assert class_ids([2, 0, 1], ["a", "b", "c"], "w").tolist() == [2, 0, 1]


@pytest.mark.parametrize("size", [4, 100000, 0])
def test_digits_of_another_size_are_refused_not_recorded(tmp_path, size):
    """`{dataset: digits, image_size: 4}` kept the 8x8 images while the manifest's config said 4."""
    with pytest.raises(CorpusError, match=r"`image_size`: the digits are 8x8 and are not resized; set 8 or null"):
        image_config_from_dict({"dataset": "digits", "image_size": size})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"dataset": "digits", "image_size": size}))
    assert_one_line(prepare_images(tmp_path / "c.yaml", tmp_path / "set"), "the digits are 8x8")
    assert not (tmp_path / "set").exists()
    for ok in (8, None):
        assert image_config_from_dict({"dataset": "digits", "image_size": ok}).image_size == ok


def test_a_label_field_naming_the_image_column_is_one_line(tmp_path):
    hub = write_hub_images(tmp_path / "hub", [0, 1] * 4)
    with pytest.raises(CorpusError, match="`hub.label_field` and `hub.image_field` name the same column 'img'"):
        image_config_from_dict({"dataset": "cifar10", "hub": {"path": str(hub), "label_field": "img"}})
    before = tree(tmp_path)
    assert_one_line(
        prepare_images(hub_config(hub, tmp_path / "c.yaml", hub={"label_field": "img"}), tmp_path / "o"), "same column"
    )
    assert tree(tmp_path) == {**before, "c.yaml": tree(tmp_path)["c.yaml"]}


def test_a_label_column_of_text_is_one_line(tmp_path):
    from datasets import Value

    hub = write_hub_images(tmp_path / "hub", ["cat", "dog"] * 4, label_feature=Value("string"))
    cfg = hub_config(hub, tmp_path / "c.yaml")
    assert_one_line(prepare_images(cfg, tmp_path / "o"), r"`hub.label_field` 'label' is a column of Value \(string\)")


def test_a_one_class_image_set_is_refused_at_prepare_and_at_train(tmp_path):
    """A ViT on images of one class trained 'silently' (loss 0, accuracy 1 from the start)."""
    hub = write_hub_images(tmp_path / "hub", [1] * 8)
    assert_one_line(
        prepare_images(hub_config(hub, tmp_path / "c.yaml"), tmp_path / "one"),
        r"every train image is of class '1' \(2 class\(es\) named\): a classifier needs at least two classes",
    )
    # a set prepared before prepare-images refused it: its train labels made one class by hand
    hub2 = write_hub_images(tmp_path / "hub2", [0, 1] * 6)
    assert prepare_images(hub_config(hub2, tmp_path / "c2.yaml"), tmp_path / "two")[0] == 0
    np.save(tmp_path / "two" / "train_labels.npy", np.zeros(len(load_images(tmp_path / "two").train), np.uint16))
    from attention_geometry.training.run_config import resolve_run, run_config_from_dict

    cfg = run_config_from_dict(
        {"corpus": str(tmp_path / "two"), "size": "vit-tiny", "objective": "classifier", "overrides": {"patch_size": 4}}
    )
    with pytest.raises(UserError, match="every train image is of one class"):
        resolve_run(cfg, load_images(tmp_path / "two"))


def test_a_full_disk_while_reading_the_parquet_files_says_so(tmp_path, monkeypatch):
    """datasets wraps the ENOSPC of writing its cache in its own error: that was reported as an unreadable
    input."""
    import datasets

    hub = write_hub_images(tmp_path / "hub", [0, 1] * 4)

    def full(*a, **k):
        try:
            raise OSError(28, "No space left on device")
        except OSError as exc:
            raise RuntimeError("An error occurred while generating the dataset") from exc

    monkeypatch.setattr(datasets, "load_dataset", full)
    line = assert_one_line(prepare_images(hub_config(hub, tmp_path / "c.yaml"), tmp_path / "o"), "No space left")
    assert "cannot write the dataset's cache" in line and "cannot read" not in line


# ------------------------------------------------------------------------------------------------ corpora


@pytest.mark.parametrize("lowercase", [True, False])
def test_documents_that_differ_only_in_case_never_straddle_the_split(tmp_path, lowercase):
    """Documents the lowercasing tokenizer makes identical (they differ in case only) were compared as text, and
    landed on both sides of the split: the held-out loss then measured memorization. Compared as token ids,
    they are refused as repeats; with a tokenizer that keeps case they are different documents."""
    from test_data import make_docs, text_cfg, write_files

    from attention_geometry.data.prepare import prepare_corpus

    docs = make_docs(20, seed=3)
    folder = write_files(tmp_path / "docs", docs + [d.upper() for d in docs])
    cfg = text_cfg(
        [folder], heldout_fraction=0.3, tokenizer={"vocab_size": 300, "min_frequency": 1, "lowercase": lowercase}
    )
    if not lowercase:
        assert load_corpus(prepare_corpus(cfg, tmp_path / "c")).manifest["n_documents"] == 40
        return
    with pytest.raises(CorpusError, match=r"training document\(s\) encode to the same tokens as a held-out document"):
        prepare_corpus(cfg, tmp_path / "c")
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------------- Trainer checkpoints


def trainer_folder(root: Path, steps=(10, 20), bin_steps=(), state: dict | None = None) -> Path:
    """A Hugging Face Trainer output folder: checkpoint-N/ with the weights (safetensors, or pytorch_model.bin
    for bin_steps), config.json and trainer_state.json (global_step N unless `state` maps N to another)."""
    for i, step in enumerate(steps):
        folder = root / f"checkpoint-{step}"
        model = tiny_bert("encoder", seed=40 + i, hidden=12, layers=1, heads=2)
        if step in bin_steps:  # as older transformers saved (torch.save of the state dict)
            model.config.save_pretrained(folder)
            torch.save(model.state_dict(), folder / "pytorch_model.bin")
        else:
            model.save_pretrained(folder)
        value = (state or {}).get(step, step)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": value, "log_history": []}))
    return root


LABELS = [f"--label={k}={v}" for k, v in {"size": "s", "dataset": "d", "objective": "encoder", "init": "i"}.items()]
LABELS += ["--label=seed=0"]


def score_checkpoints(folder: Path, out: Path, *extra):
    return cli(["score-checkpoints", folder, "--out", out, "--quiet", *extra])


def test_a_checkpoint_of_pytorch_model_bin_is_scored(tmp_path):
    """checkpoint-20/ holding pytorch_model.bin was skipped (step 20 missing, exit 0) while `score` read it."""
    from attention_geometry.scoring.scorer import score_model

    folder = trainer_folder(tmp_path / "out", bin_steps=(20,))
    assert (folder / "checkpoint-20" / "pytorch_model.bin").is_file()
    code, _, err = score_checkpoints(folder, tmp_path / "t.csv", *LABELS)
    assert code == 0, err
    df = pd.read_csv(tmp_path / "t.csv")
    assert sorted(set(df.step)) == [10, 20]
    alone = score_model(folder / "checkpoint-20", progress=False)
    got = df[df.step == 20].sort_values("layer")
    np.testing.assert_allclose(got.symmetry, alone.symmetry, rtol=0, atol=1e-12)
    assert set(df.seed) == {0} and set(df.init) == {"i"}


@pytest.mark.parametrize("value", ["abc", None, 10.7, 10.0, True, -10, [10]])
def test_a_global_step_that_is_no_whole_number_is_one_line(tmp_path, value):
    folder = trainer_folder(tmp_path / "out", steps=(10,), state={10: value})
    assert_one_line(
        score_checkpoints(folder, tmp_path / "t.csv", *LABELS),
        rf"checkpoint-10/trainer_state.json: global_step {re.escape(json.dumps(value))} is not a whole number",
    )
    assert not (tmp_path / "t.csv").exists()


def test_two_folders_of_one_step_are_one_line(tmp_path):
    folder = trainer_folder(tmp_path / "out", steps=(20,))
    trainer_folder(tmp_path / "other", steps=(20,))
    os.rename(tmp_path / "other" / "checkpoint-20", folder / "checkpoint-020")
    (folder / "checkpoint-020" / "trainer_state.json").unlink()
    assert_one_line(
        score_checkpoints(folder, tmp_path / "t.csv", *LABELS), r"checkpoint-020 and checkpoint-20 are both step 20"
    )


def test_a_checkpoint_without_weights_is_one_line_not_skipped(tmp_path):
    folder = trainer_folder(tmp_path / "out")
    (folder / "checkpoint-20" / "model.safetensors").unlink()
    assert_one_line(
        score_checkpoints(folder, tmp_path / "t.csv", *LABELS), r"checkpoint-20: a Trainer checkpoint without"
    )


@pytest.mark.parametrize("kind", ["dangling", "loop", "file"])
def test_a_checkpoint_name_that_is_no_folder_is_one_line_not_skipped(tmp_path, kind):
    """A dangling or looping checkpoint-N link, or a file of that name, used to be skipped silently while a folder
    without weights was an error: one rule for both."""
    folder = trainer_folder(tmp_path / "out")
    odd = folder / "checkpoint-30"
    if kind == "dangling":
        odd.symlink_to(tmp_path / "nowhere")
    elif kind == "loop":
        odd.symlink_to(odd)
    else:
        odd.write_text("x")
    assert_one_line(
        score_checkpoints(folder, tmp_path / "t.csv", *LABELS),
        r"checkpoint-30: a Trainer checkpoint that is not a folder",
    )


def test_checkpoint_steps_are_ascii_digits_only(tmp_path):
    folder = trainer_folder(tmp_path / "out", steps=(10,))
    os.rename(folder / "checkpoint-10", folder / "checkpoint-\u0663")  # ARABIC-INDIC DIGIT THREE: no step
    assert list_trainer_checkpoints(folder) == {}


def test_labels_a_trainer_folder_takes_and_a_run_folder_refuses(tmp_path):
    """A Trainer folder scores without --label (the keys not given stay empty); a bad --label is one line, and so
    is a --label on one of our run folders, whose keys are its run.yaml's."""
    folder = trainer_folder(tmp_path / "out", steps=(10,))
    assert score_checkpoints(folder, tmp_path / "t.csv")[0] == 0
    df = pd.read_csv(tmp_path / "t.csv", dtype=str, keep_default_na=False)
    assert set(df.run) == set(df.model) == {"out"}
    assert all(set(df[k]) == {""} for k in ("size", "dataset", "objective", "init", "seed"))
    assert score_checkpoints(folder, tmp_path / "t.csv", *LABELS[:2])[0] == 0
    df = pd.read_csv(tmp_path / "t.csv", dtype=str, keep_default_na=False)
    assert (set(df["size"]), set(df.dataset), set(df.objective), set(df.seed)) == ({"s"}, {"d"}, {""}, {""})
    (tmp_path / "t.csv").unlink()
    assert_one_line(
        score_checkpoints(folder, tmp_path / "t.csv", *LABELS, "--label=seed=x"), "a seed is a whole number"
    )
    assert_one_line(score_checkpoints(folder, tmp_path / "t.csv", *LABELS, "--label=seed=1"), "seed: given twice")
    assert_one_line(score_checkpoints(folder, tmp_path / "t.csv", "--label=size="), r"expected KEY=VALUE .*and a value")
    corpus = write_heldout_corpus(tmp_path / "corpus", np.full((4, 8), 5))
    run = write_snapshot_run(
        tmp_path / "run", "encoder", {0: tiny_bert("encoder", 0, hidden=12, layers=1, heads=2)}, corpus
    )
    assert_one_line(
        score_checkpoints(run, tmp_path / "t.csv", "--label=seed=3"), r"--label is for a Trainer output folder"
    )
    assert not (tmp_path / "t.csv").exists()
    assert score_checkpoints(run, tmp_path / "t.csv")[0] == 0


def test_a_trainer_folder_without_labels_says_which_keys_are_empty(tmp_path, monkeypatch):
    """No flag needed for one's own run: the rows, named after the folder (also when it is given as `.`), one
    stderr line naming the empty keys (none with --quiet); --label narrows it to the keys still missing."""
    folder = trainer_folder(tmp_path / "my-run", steps=(10, 20))
    code, _, err = cli(["score-checkpoints", folder, "--out", tmp_path / "t.csv"])
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "left empty" in ln]
    assert len(lines) == 1 and "run key(s) size, dataset, objective, init, seed left empty" in lines[0]
    assert cli(["score-checkpoints", folder, "--out", tmp_path / "t.csv", "--quiet"]) == (0, "", "")
    monkeypatch.chdir(folder)
    code, out, err = cli(["score-checkpoints", ".", "--out", "-", "--label=seed=3", "--label", "size=tiny"])
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "left empty" in ln]
    assert len(lines) == 1 and "run key(s) dataset, objective, init left empty" in lines[0]
    assert "--label KEY=VALUE" in lines[0] and "labels=" not in lines[0]
    df = pd.read_csv(io.StringIO(out), dtype=str, keep_default_na=False)
    assert set(df.run) == set(df.model) == {"my-run"} and sorted(set(df.step)) == ["10", "20"]
    assert (set(df.seed), set(df["size"]), set(df.dataset)) == ({"3"}, {"tiny"}, {""})


def test_score_checkpoints_in_python_needs_no_labels_and_names_no_flag(tmp_path, capsys):
    """score_checkpoints(folder) is the plain call; its messages name `labels=`, never the CLI's --label."""
    from attention_geometry.scoring.scorer import score_checkpoints as score_in_python

    folder = trainer_folder(tmp_path / "out", steps=(10,))
    df = score_in_python(folder)
    err = capsys.readouterr().err
    assert "run key(s) size, dataset, objective, init, seed left empty" in err and "--label" not in err
    assert "labels={KEY: VALUE}" in err
    assert df[["size", "dataset", "objective", "init", "seed"]].isna().all().all() and set(df.run) == {"out"}
    assert score_in_python(folder, progress=False, labels={"seed": 2, "size": None})["seed"].tolist() == [2]
    assert capsys.readouterr().err == ""
    for labels, pattern in (
        ({"lr": 1}, r"labels= 'lr' is not a run key"),
        ({"seed": "x"}, r"labels= seed 'x': a seed is a whole number"),
        ({"seed": True}, "a seed is a whole number"),
    ):
        with pytest.raises(UserError, match=pattern) as e:
            score_in_python(folder, progress=False, labels=labels)
        assert "--label" not in str(e.value)
    corpus = write_heldout_corpus(tmp_path / "corpus", np.full((4, 8), 5))
    run = write_snapshot_run(
        tmp_path / "run", "encoder", {0: tiny_bert("encoder", 0, hidden=12, layers=1, heads=2)}, corpus
    )
    with pytest.raises(UserError, match=r"labels= is for a Trainer output folder") as e:
        score_in_python(run, progress=False, labels={"seed": 3})
    assert "--label" not in str(e.value)


def test_concat_tables_asks_for_the_run_keys_a_trainer_folder_left_empty(tmp_path):
    """Rows without run keys do not join the workflow's tables: concat-tables names the empty keys and the flag."""
    folder = trainer_folder(tmp_path / "out", steps=(10,))
    assert score_checkpoints(folder, tmp_path / "bare.csv")[0] == 0
    before = tree(tmp_path)
    line = assert_one_line(
        cli(["concat-tables", tmp_path / "bare.csv", "--out", tmp_path / "o.csv", "--kind", "training_scores"]),
        r"bare.csv:2: empty size, dataset, objective, init, seed: every training_scores row names its run's keys",
    )
    assert "score-checkpoints --label KEY=VALUE" in line and tree(tmp_path) == before
    assert score_checkpoints(folder, tmp_path / "labelled.csv", *LABELS)[0] == 0
    assert cli(["concat-tables", tmp_path / "labelled.csv", "--out", tmp_path / "o.csv"])[0] == 0


# ----------------------------------------------------------------------------------------- score-updates


def test_score_updates_refuses_another_corpus_of_the_same_vocabulary(tmp_path):
    """--corpus was never compared with run.yaml's corpus_sha256: another corpus of the same vocabulary size
    gave gradients of the wrong data."""
    own = write_random_corpus(tmp_path / "own", n_train=8, n_heldout=8, vocab=61, seed=0)
    other = write_random_corpus(tmp_path / "other", n_train=8, n_heldout=8, vocab=61, seed=1)
    run = write_snapshot_run(
        tmp_path / "run", "encoder", {0: tiny_bert("encoder", 0, hidden=12, layers=1, heads=2)}, own
    )
    raw = yaml.safe_load((run / "run.yaml").read_text())
    raw["corpus_sha256"] = corpus_sha256(load_corpus(own))
    (run / "run.yaml").write_text(yaml.safe_dump(raw))
    argv = ["score-updates", run, "--out", tmp_path / "u.csv", "--batches", "1", "--batch-size", "2"]
    assert_one_line(cli([*argv, "--corpus", other]), r"--corpus .*other: not the corpus run .* trained on")
    assert not (tmp_path / "u.csv").exists()
    os.rename(own, tmp_path / "moved")  # the same corpus elsewhere is the same corpus
    assert cli([*argv, "--corpus", tmp_path / "moved"])[0] == 0


# ------------------------------------------------------------------------------------------ concat-tables


def _table(path: Path, kind: str, rows: list[dict]) -> Path:
    cols = TABLE_COLUMNS[kind]
    pd.DataFrame([{c: r.get(c, "x") for c in cols} for r in rows], columns=cols).to_csv(path, index=False)
    return path


SCORE = {"model": "m", "component": "encoder", "layer": "0", "head": "all", "symmetry": "0.5", "directionality": "0.1"}


@pytest.mark.parametrize(
    "second, pattern",
    [
        ({"layer": "0.0"}, r"a second pretrained_scores row for model=m, component=encoder, layer=0, head=all"),
        ({"layer": " 0"}, "a second pretrained_scores row"),
        ({"layer": "1", "model": ""}, r"b.csv:2: empty model"),
        ({"layer": "1", "symmetry": "nan"}, r"b.csv:2: symmetry is 'nan', not a number"),
        ({"layer": "1", "directionality": ""}, r"directionality is '', not a number"),
        ({"layer": "1", "directionality": "inf"}, r"directionality is 'inf'"),
    ],
)
def test_concat_tables_compares_keys_by_value_and_refuses_empty_keys_and_nan_scores(tmp_path, second, pattern):
    a = _table(tmp_path / "a.csv", "pretrained_scores", [SCORE])
    b = _table(tmp_path / "b.csv", "pretrained_scores", [{**SCORE, **second}])
    before = tree(tmp_path)
    assert_one_line(cli(["concat-tables", a, b, "--out", tmp_path / "o.csv"]), pattern)
    assert tree(tmp_path) == before
    c = _table(tmp_path / "c.csv", "pretrained_scores", [{**SCORE, "layer": "1.0"}])
    assert cli(["concat-tables", a, c, "--out", tmp_path / "o.csv"])[0] == 0
    assert pd.read_csv(tmp_path / "o.csv", dtype=str).layer.tolist() == ["0", "1.0"]  # values copied as text


# ----------------------------------------------------------------------------------- SIGTERM and markers


def test_a_kept_term_signal_outlives_its_block_and_an_outer_one_is_inherited():
    from attention_geometry.training.budget import TermSignal, is_process_command

    before = signal.getsignal(signal.SIGTERM)
    try:
        with TermSignal(keep=True) as outer:
            os.kill(os.getpid(), signal.SIGTERM)  # before the loop's own handler is set (loading, imports)
            time.sleep(0.01)
            with TermSignal() as inner:
                assert inner.received  # the loop stops before its first update
        os.kill(os.getpid(), signal.SIGTERM)  # after the block: still handled, the process lives on
        time.sleep(0.01)
        assert outer.received and signal.getsignal(signal.SIGTERM) == outer._handle
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not is_process_command("train")  # pytest's command line: the CLI run in-process holds nothing


@pytest.mark.slow
def test_sigterm_just_after_a_finished_run_exits_0(tmp_path):
    """SIGTERM right after `trained to step N` (the run done, the process printing and exiting) exited 143,
    a finished run reported as killed."""
    from helpers import write_run_config_file

    corpus = write_random_corpus(tmp_path / "c")
    cfg = write_run_config_file(tmp_path / "run.yaml", corpus, max_steps=4, snapshot_every=4, eval_every=4)
    proc = subprocess.Popen(
        [sys.executable, "-m", "attention_geometry.cli", "train", "--config", cfg, "--out", tmp_path / "out"]
        + ["--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if ": trained to step 4 in " in line:
            proc.send_signal(signal.SIGTERM)
            break
    lines += proc.stderr.readlines()
    assert proc.wait(timeout=120) == 0, "".join(lines)[-3000:]


def test_a_deleted_final_snapshot_makes_its_run_train_again(tmp_path, monkeypatch):
    """Only train.done is a declared output: with the final snapshot of a finished run deleted, `snakemake -n`
    planned nothing. The parse removes such a marker (workflow.records.drop_unfinished_markers)."""
    from helpers import config_plan, validated_config

    from attention_geometry.workflow.records import drop_unfinished_markers

    monkeypatch.chdir(tmp_path)
    cfg = validated_config()
    cfg["results"] = "res"
    plan = config_plan(cfg)
    runs = sorted(plan.runs)[:3]
    for run in runs:
        final = Path(plan.final_snapshot(run))
        final.mkdir(parents=True)
        for name in ("model.safetensors", "config.json"):
            (final / name).write_text("x")
        Path(plan.train_done(run)).touch()
    assert drop_unfinished_markers(plan) == []  # finished runs (and runs never trained) keep what they have
    (Path(plan.final_snapshot(runs[0])) / "model.safetensors").unlink()  # incomplete
    os.rename(plan.final_snapshot(runs[1]), Path(plan.final_snapshot(runs[1])).with_name("step-x"))  # gone
    gone = [plan.train_done(runs[0]), plan.train_done(runs[1])]
    assert drop_unfinished_markers(plan, dry_run=True) == gone  # a dry run names them and changes nothing
    assert all(os.path.exists(plan.train_done(r)) for r in runs)
    assert drop_unfinished_markers(plan) == gone
    assert [os.path.exists(plan.train_done(r)) for r in runs] == [False, False, True]
    assert drop_unfinished_markers(plan) == []


@pytest.mark.workflow
def test_a_dry_run_keeps_the_markers_it_would_drop(tmp_path):
    """`snakemake -n` removed the train.done of a run without its final snapshot: a dry run changed state. Now it
    names them and keeps them; a real parse (here one that lists the rules and runs nothing) removes them."""
    from helpers import config_plan, copy_workflow, snakemake, validated_config

    wf = copy_workflow(tmp_path / "wf")
    cfg = validated_config("config.yaml")
    cfg["results"] = "res"
    plan = config_plan(cfg)
    marker = wf / plan.train_done(sorted(plan.runs)[0])
    marker.parent.mkdir(parents=True)
    marker.touch()  # marked trained, no final snapshot
    dry = snakemake("-n", "--cores", "1", "--config", "results=res", cwd=wf, check=False)
    assert dry.returncode == 0 and "this dry run changed nothing" in dry.stderr, dry.stderr[-3000:]
    assert marker.exists()
    real = snakemake("--cores", "1", "--config", "results=res", "--list-target-rules", cwd=wf, check=False)
    assert "their train.done is removed" in real.stderr, real.stderr[-3000:]
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- messages


def llama_dir(path: Path, kv_heads) -> Path:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    sd = {}
    for i in range(2):
        for name, rows in (("q_proj", 16), ("k_proj", 8)):
            sd[f"model.layers.{i}.self_attn.{name}.weight"] = torch.randn(rows, 16, generator=g)
    path.mkdir(parents=True)
    save_file(sd, path / "model.safetensors")
    cfg = {
        "model_type": "llama",
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": kv_heads,
        "head_dim": 4,
        "vocab_size": 10,
    }
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_zero_key_value_heads_names_the_config_field(tmp_path):
    line = assert_one_line(cli(["score", llama_dir(tmp_path / "m", 0), "--out", tmp_path / "s.csv"]), "num_key_value")
    assert "config field num_key_value_heads (number of key/value heads) must be an integer >= 1, got 0" in line
    assert "_kv_heads" not in line.replace("num_key_value_heads", "")


def test_an_fp8_scale_error_names_the_source(tmp_path):
    from test_faults_weights import fp8_dir

    dirs = fp8_dir(
        tmp_path, edit=lambda sd: sd.update({"model.layers.0.self_attn.q_proj.weight_scale_inv": torch.ones(2, 2)})
    )
    line = assert_one_line(cli(["score", dirs["fp8"], "--out", tmp_path / "s.csv"]), "scale of shape")
    assert f"{dirs['fp8']}: tensor model.layers.0.self_attn.q_proj.weight_scale_inv: scale of shape" in line


def test_a_one_by_one_matrix_scores_without_a_warning():
    from attention_geometry.scoring.measures import directionality, scores

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s, d = scores(torch.full((3, 1, 1), 2.0))
        assert s.tolist() == [1.0] * 3 and d.tolist() == [0.0] * 3
        assert directionality(torch.tensor([[[-1.5]]])).tolist() == [0.0]


def test_a_prefetched_folder_is_labelled_with_its_origin(tmp_path):
    """A prefetch-qk folder scored alone was labelled with its folder's name, not the model it holds."""
    from safetensors.torch import save_file

    from attention_geometry.scoring.scorer import score_model
    from attention_geometry.weights.safetensors_io import ORIGIN_KEY

    model = tiny_bert("encoder", 0, hidden=12, layers=1, heads=2)
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if "attention.self" in k}
    for origin, label in (("org/tiny-bert@" + "a" * 40, "org/tiny-bert"), ("/some/local/dir", "folder")):
        folder = tmp_path / "folder"
        folder.mkdir(exist_ok=True)
        model.config.save_pretrained(folder)
        save_file(sd, folder / "model.safetensors", metadata={ORIGIN_KEY: origin})
        assert set(score_model(folder, progress=False).model) == {label}


# -------------------------------------------------------------------------------------- property tests

FUZZ = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _truncate(path: Path, fraction: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


@pytest.mark.slow
@settings(max_examples=30, **FUZZ)
@given(
    labels=st.lists(st.integers(-2, 3), min_size=4, max_size=10),
    change=st.sampled_from(["none", "truncate", "label_field", "image_field", "numbers"]),
    fraction=st.floats(0.0, 0.99),
    field=st.sampled_from(["label", "img", "nope"]),
    numbers=st.fixed_dictionaries(
        {
            "heldout_fraction": st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0, -0.1]),
            "image_size": st.sampled_from([None, 0, 1, 4, 8, 12]),
            "channels": st.sampled_from([None, 1, 2, 3]),
        }
    ),
)
def test_prepare_images_on_damaged_inputs_is_right_or_one_line(labels, change, fraction, field, numbers):
    """Labels of any sign, a truncated parquet file, a field naming another column, bad numbers: prepare-images
    writes an image set whose labels are the input's (each a class id, at least two classes) or prints one
    `error:` line; the input folder and the config are unchanged either way."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hub = write_hub_images(root / "in" / "hub", labels)
        kw: dict = {}
        if change == "truncate":
            _truncate(hub / "plain_text" / "train-00000-of-00001.parquet", fraction)
        elif change in ("label_field", "image_field"):
            kw["hub"] = {change: field}
        elif change == "numbers":
            kw = {k: v for k, v in numbers.items() if v is not None}
        cfg = hub_config(hub, root / "in" / "c.yaml", **kw)
        before = tree(root / "in")
        result = prepare_images(cfg, root / "out")
        assert tree(root / "in") == before
        if result[0] != 0:
            assert_one_line(result, ".")
            assert not (root / "out").exists()
            return
        s = load_images(root / "out")
        got = sorted(np.concatenate([s.train_labels, s.heldout_labels]).tolist())
        assert got == sorted(labels) and min(labels) >= 0, result
        assert len(set(s.train_labels.tolist())) >= 2 and s.num_classes == max(labels) + 1
        assert s.image_size == (kw.get("image_size") or 8) and s.num_channels == (kw.get("channels") or 3)


@pytest.mark.slow
@settings(max_examples=40, **FUZZ)
@given(
    change=st.sampled_from(["none", "truncate", "remove", "global_step", "rename", "labels"]),
    step=st.sampled_from([10, 20]),
    name=st.sampled_from(["config.json", "trainer_state.json", "weights"]),
    fraction=st.floats(0.0, 0.99),
    value=st.one_of(st.none(), st.integers(-5, 30), st.floats(allow_nan=True), st.text(max_size=3), st.booleans()),
    new_name=st.sampled_from(["checkpoint-010", "checkpoint-20", "checkpoint-x", "checkpoint-", "ckpt-10"]),
    keep=st.lists(st.integers(0, 4), max_size=5, unique=True),
)
def test_score_checkpoints_on_damaged_trainer_folders_is_right_or_one_line(
    change, step, name, fraction, value, new_name, keep
):
    """A Trainer output folder with a file truncated or removed, a global_step of any JSON value, a folder
    renamed, run keys left out: score-checkpoints scores exactly the intact checkpoints, by their steps, with
    the keys given, or prints one `error:` line; the folder is unchanged either way."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = trainer_folder(root / "out", bin_steps=(20,))
        ckpt = folder / f"checkpoint-{step}"
        target = (
            ckpt / ("pytorch_model.bin" if step == 20 else "model.safetensors") if name == "weights" else ckpt / name
        )
        labels = LABELS
        expected = {10: 10, 20: 20}  # step -> the step of the checkpoint whose weights it has
        ok = True  # whether the folder is still one to score
        if change == "truncate":
            _truncate(target, fraction)
            ok = False
        elif change == "remove":
            target.unlink()  # without trainer_state.json the step is the folder's
            ok = name == "trainer_state.json"
        elif change == "global_step":
            (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": value}))
            ok = type(value) is int and value == step
        elif change == "rename":
            assume(not (folder / new_name).exists())
            (ckpt / "trainer_state.json").unlink()
            os.rename(ckpt, folder / new_name)
            expected.pop(step)
            if m := re.fullmatch(r"checkpoint-(\d+)", new_name):
                ok = int(m.group(1)) not in expected
                expected[int(m.group(1))] = step
        elif change == "labels":  # any subset of the keys: the ones not given stay empty (issue 40.2)
            labels = [LABELS[i] for i in keep]
        before = tree(root)
        result = score_checkpoints(folder, root / "t.csv", *labels)
        after = tree(root)
        after.pop("t.csv", None)
        assert after == before
        if not ok:
            assert_one_line(result, ".")
            assert not (root / "t.csv").exists()
            return
        assert result[0] == 0, result
        df = pd.read_csv(root / "t.csv", dtype=str, keep_default_na=False)
        assert sorted(int(s) for s in set(df.step)) == sorted(expected), (change, result)
        assert len(df) == len(expected)  # one layer each, head `all`
        given = dict(flag.removeprefix("--label=").split("=", 1) for flag in labels)
        for col in ("size", "dataset", "objective", "init", "seed"):
            assert set(df[col]) == {given.get(col, "")}, (col, labels)
        ref = {s: trainer_reference(seed) for s, seed in ((10, 40), (20, 41))}
        for s, origin in expected.items():
            got = df[df.step == str(s)].symmetry.astype(float).to_numpy()
            np.testing.assert_allclose(got, ref[origin], rtol=0, atol=1e-12)


def trainer_reference(seed: int) -> np.ndarray:
    """The symmetry of the one layer of trainer_folder's model of `seed`, from its own q and k weights."""
    m = tiny_bert("encoder", seed, hidden=12, layers=1, heads=2)
    att = m.bert.encoder.layer[0].attention.self
    M = att.query.weight.detach().double().T @ att.key.weight.detach().double()
    return np.array([float((M * M.T).sum() / (M * M).sum())])


# ---------------------------------------------------------------------------- YAML alias bombs (issue 59.4)
# nine levels of nine aliases: 9^9 = 387 M strings once expanded, 437 bytes on disk
BOMB_LEVELS = "\n".join(
    ["  a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    + [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def test_a_run_yaml_alias_bomb_is_one_line_fast(tmp_path):
    import time

    from attention_geometry.formats.files import expanded_size

    for where in ("run", "overrides"):
        text = f"corpus: c\nbomb:\n{BOMB_LEVELS}\n" + ("run: *a8\n" if where == "run" else "overrides: {lr: *a8}\n")
        path = tmp_path / f"{where}.yaml"
        path.write_text(text)
        t0 = time.monotonic()
        out = tmp_path / f"out-{where}"
        assert_one_line(
            cli(["train", "--config", str(path), "--out", str(out)]), r"expands to more than 100,000 values"
        )
        assert not out.exists()
        assert time.monotonic() - t0 < 20
    import yaml

    data = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert expanded_size(data, limit=10**12) > 9**9  # counted, not expanded (9^9 strings, plus the lists)
    # an ordinary config's anchors (study 3's pilots use one) stay fine
    # by hand: the mapping, its keys a and b, [1, 2] (3), {c: [1, 2]} (1 + key + 3)
    assert expanded_size({"a": [1, 2], "b": {"c": [1, 2]}}) == 1 + 2 + 3 + 5


def test_a_long_bad_value_is_cut_in_the_message(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("corpus: c\nmax_steps: [" + ", ".join(["1"] * 5000) + "]\n")
    line = assert_one_line(cli(["train", "--config", str(path), "--out", str(tmp_path / "o")]), r"max_steps")
    assert len(line) < 400


@pytest.mark.workflow
def test_a_workflow_config_alias_bomb_stops_the_parse_with_one_line(tmp_path):
    """The same bomb as the `results:` of a Snakemake configfile: one line before the schema check walks it
    (it reached a MemoryError there after 70 s)."""
    import subprocess
    import time

    from helpers import REPO, SNAKEMAKE, env

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"bombs:\n{BOMB_LEVELS}\nresults: *a8\n")
    t0 = time.monotonic()
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "1", "--configfile", str(bomb)],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and time.monotonic() - t0 < 120
    out = proc.stdout + proc.stderr
    assert "expands to more than 100,000 values through YAML aliases" in out and "MemoryError" not in out


def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path):
    """Issue 59.6: a non-UTF-8 path (its undecodable bytes arrive as lone surrogates) is one line, and nothing is
    written: `train --out` wrote run.yaml, loss.csv and a snapshot before failing, every retry the same."""
    import os

    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9")
    before = sorted(p.name for p in tmp_path.iterdir())
    line = assert_one_line(cli(["train", "--config", str(tmp_path / "x.yaml"), "--out", bad]), r"not valid UTF-8")
    assert "\\udce9" in line or "\\xe9" in line
    assert_one_line(cli(["score", bad, "--out", "-"]), r"not valid UTF-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_subcommand_typo_suggests_the_closest_command():
    code, _, err = cli(["scroe"])
    assert code == 2 and "did you mean 'score'?" in err


def test_a_run_plan_that_cannot_fit_the_disk_is_refused_before_anything_is_written(tmp_path):
    """Issue 59.8: max_steps 1000000 with snapshot_every 1 plans a million snapshots; the trainer refuses it in one
    line before writing anything (run.yaml was 104 MB and copied into every snapshot until the disk filled)."""
    from helpers import write_random_corpus, write_run_config_file

    corpus = write_random_corpus(tmp_path / "c")
    cfg = write_run_config_file(tmp_path / "r.yaml", corpus, max_steps=1_000_000, snapshot_every=1, eval_every=10**6)
    out = tmp_path / "run"
    assert_one_line(cli(["train", "--config", str(cfg), "--out", str(out)]), r"plans 1,000,001 more snapshot\(s\)")
    assert not out.exists()


def test_a_batch_larger_than_the_corpus_trains_with_a_warning(tmp_path):
    """Issue 59 (LOW): batch_size 3000 against 2566 blocks trained without a word; now it says every batch repeats
    blocks (and trains as before)."""
    from helpers import write_random_corpus, write_run_config_file

    corpus = write_random_corpus(tmp_path / "c", n_train=20)
    cfg = write_run_config_file(tmp_path / "r.yaml", corpus, max_steps=2, overrides={"batch_size": 24})
    code, _, err = cli(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == 0, err
    assert "warning: batch_size 24 is larger than the 20 training blocks of the corpus" in err
