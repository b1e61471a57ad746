"""The on-disk formats' own modules: the atomic writer and YAML reader (files), the contract columns
(contract), the run directory (rundir) and the prepared-corpus reader (corpus). No torch needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import SPECIAL

from attention_geometry.errors import UserError
from attention_geometry.formats import columns as contract
from attention_geometry.formats import rundir
from attention_geometry.formats.corpus import SPECIAL_TOKENS, CorpusError, load_corpus, read_json_object
from attention_geometry.formats.files import (
    atomic_write_bytes,
    atomic_write_table,
    atomic_write_text,
    read_yaml,
    replace_dir,
)


def test_format_modules_import_neither_torch_nor_pandas():
    code = (
        "import sys; import attention_geometry.formats.rundir, attention_geometry.formats.columns, "
        "attention_geometry.formats.corpus, "
        "attention_geometry.formats.files; print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------------------- files


def test_atomic_writes_replace_whole_and_leave_nothing_on_failure(tmp_path):
    p = tmp_path / "sub" / "a.csv"
    atomic_write_text(p, "x,y\r\n1,2\r\n")
    assert p.read_bytes() == b"x,y\r\n1,2\r\n"  # characters as given: no newline translation
    atomic_write_bytes(p, b"new")
    assert p.read_bytes() == b"new"

    class Boom:
        def to_csv(self, path, **kw):
            Path(path).write_text("partial")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_write_table(Boom(), p)
    assert p.read_bytes() == b"new" and sorted(x.name for x in p.parent.iterdir()) == ["a.csv"]
    with pytest.raises(UserError, match="use .csv or .parquet"):
        atomic_write_table(Boom(), tmp_path / "a.txt")


def test_replace_dir_swaps_a_whole_folder(tmp_path):
    final = tmp_path / "out"
    for content in ("one", "two"):
        tmp = tmp_path / f".tmp-out-{content}"
        tmp.mkdir()
        (tmp / "f.txt").write_text(content)
        replace_dir(tmp, final)
        assert (final / "f.txt").read_text() == content and not tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old folder is gone


def test_read_yaml_names_the_file(tmp_path):
    with pytest.raises(UserError, match="thing not found: .*nope.yaml"):
        read_yaml(tmp_path / "nope.yaml", "thing")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    with pytest.raises(UserError, match="bad.yaml: not valid YAML") as e:
        read_yaml(bad, "thing")
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------- contract


def test_contract_tables_are_built_from_one_run_identity():
    assert contract.RUN_COLUMNS == ["run", "size", "dataset", "objective", "init", "seed", "step"]
    assert contract.TRAINING_COLUMNS == contract.SCORE_COLUMNS + contract.RUN_COLUMNS
    assert contract.LOSS_COLUMNS[:7] == contract.RUN_COLUMNS
    assert contract.UPDATE_COLUMNS[-2:] == contract.SCORES == ["symmetry", "directionality"]
    for cols in contract.TABLE_COLUMNS.values():
        assert len(set(cols)) == len(cols)


# ---------------------------------------------------------------------------------------------- rundir


def test_snapshot_names_round_trip():
    assert rundir.snapshot_name(250) == "step-0000250"
    assert rundir.parse_snapshot("step-0000250") == 250
    for name in ("step-250", "step-0000250.tmp", ".tmp-step-0000250-123", "step-00002500"):
        assert rundir.parse_snapshot(name) is None
    with pytest.raises(UserError):
        rundir.snapshot_name(rundir.MAX_STEP + 1)
    assert rundir.run_name("tiny", "wiki_offline", "encoder", "standard", 2) == "tiny-wiki_offline-encoder-standard-s2"


def test_snapshot_steps_is_one_rule():
    assert rundir.snapshot_steps(None, 250, 1000) == [0, 250, 500, 750, 1000]
    assert rundir.snapshot_steps(None, 300, 1000) == [0, 300, 600, 900, 1000]  # the last step always
    assert rundir.snapshot_steps([500, 100], None, 1000) == [0, 100, 500, 1000]  # 0 always
    assert rundir.snapshot_steps([], None, 10) == rundir.snapshot_steps(None, None, 10) == [0, 10]
    assert rundir.snapshot_steps([5], None, 10, include_zero=False) == [5, 10]
    with pytest.raises(UserError, match=r"snapshot_steps: step\(s\) \[1500\] outside \[0, max_steps = 1000\]"):
        rundir.snapshot_steps([0, 1500], None, 1000)
    with pytest.raises(UserError, match="eval_steps"):
        rundir.snapshot_steps([-1], None, 1000, key="eval_steps")


def test_list_snapshots_has_one_idea_of_complete(tmp_path):
    with pytest.raises(UserError, match="missing"):
        rundir.list_snapshots(tmp_path)
    assert rundir.list_snapshots(tmp_path, must_exist=False) == {}
    for step in (0, 100, 200):
        d = rundir.snapshot_dir(tmp_path, step)
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        if step != 200:  # step 200: weights not there (not a complete snapshot)
            (d / "model.safetensors").write_bytes(b"")
    (tmp_path / "checkpoints" / ".tmp-step-0000300-1").mkdir()
    (tmp_path / "checkpoints" / "step-0000400.tmp").mkdir()
    assert list(rundir.list_snapshots(tmp_path)) == [0, 100]
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(UserError, match="no step-XXXXXXX snapshot folders"):
        rundir.list_snapshots(empty)


def test_read_run_yaml(tmp_path):
    with pytest.raises(UserError, match="run.yaml: missing"):
        rundir.read_run_yaml(tmp_path)
    (tmp_path / "run.yaml").write_text("size: tiny\ndataset: d\nobjective: encoder\n")
    with pytest.raises(UserError, match=r"run.yaml: missing key\(s\) init, seed"):
        rundir.read_run_yaml(tmp_path)
    assert rundir.read_run_yaml(tmp_path, ["size"])["dataset"] == "d"


def test_find_state_prefers_state_then_a_left_old_one(tmp_path):
    assert rundir.find_state(tmp_path) is None
    old = tmp_path / ".old-state-123"
    old.mkdir()
    (old / "state.json").write_text(json.dumps({"step": 5}))
    assert rundir.find_state(tmp_path) == old and rundir.state_step(old) == 5
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text(json.dumps({"step": 9}))
    assert rundir.state_step(rundir.find_state(tmp_path)) == 9


# ---------------------------------------------------------------------------------------------- corpus


def write_corpus(d: Path, n_train=4, n_heldout=2, width=8, **manifest) -> Path:
    """A corpus dir with blocks [n, width]; `manifest` entries replace the manifest's (None: left out)."""
    d.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", n_train), ("heldout", n_heldout)):
        np.save(d / f"{name}.npy", np.full((n, width), 7, dtype=np.uint16))
    m = {
        "format_version": 1,
        "dataset": "text_files",
        "name": "toy",
        "block_len": width,
        "vocab_size": 50,
        "special_tokens": dict(SPECIAL),
        "n_train_blocks": n_train,
        "n_heldout_blocks": n_heldout,
    }
    m.update(manifest)
    (d / "manifest.json").write_text(json.dumps({k: v for k, v in m.items() if v is not None}))
    return d


def test_load_corpus_reads_the_format(tmp_path):
    c = load_corpus(write_corpus(tmp_path / "c"))
    assert c.train.shape == (4, 8) and c.heldout.shape == (2, 8) and c.block_len == 8 and c.vocab_size == 50
    assert c.special_tokens == SPECIAL and set(SPECIAL) == set(SPECIAL_TOKENS) and c.dataset == "toy"
    assert not c.train.flags.writeable
    with pytest.raises(CorpusError, match="tokenizer.json is missing"):
        _ = c.tokenizer


@pytest.mark.parametrize(
    "change, match",
    [
        ({"n_train": 0}, "has no blocks"),
        ({"n_train": 0, "n_train_blocks": None}, "has no blocks"),
        ({"special_tokens": {"pad": 0, "cls": 2, "sep": 3, "mask": 4}}, "special_tokens.unk"),
        ({"block_len": None}, "'block_len' is missing"),
        ({"format_version": 2}, "--force"),
        ({"n_heldout_blocks": 3}, "does not match the manifest"),
        ({"vocab_size": "big"}, "vocab_size"),
    ],
)
def test_load_corpus_refuses_what_no_reader_can_use(tmp_path, change, match):
    n_train = change.pop("n_train", 4)
    d = write_corpus(tmp_path / "c", n_train=n_train, **change)
    with pytest.raises(CorpusError, match=match) as e:
        load_corpus(d, key="corpus")
    assert str(e.value).startswith("corpus: ") and "\n" not in str(e.value)


def test_load_corpus_missing_pieces(tmp_path):
    with pytest.raises(CorpusError, match="corpus directory not found"):
        load_corpus(tmp_path / "nope")
    with pytest.raises(CorpusError, match="no manifest.json"):
        load_corpus(tmp_path)
    d = write_corpus(tmp_path / "c")
    (d / "heldout.npy").unlink()
    with pytest.raises(CorpusError, match="heldout.npy is missing"):
        load_corpus(d)
    np.save(d / "heldout.npy", np.zeros((2, 9), dtype=np.uint16))
    with pytest.raises(CorpusError, match=r"expected integer blocks \[n, 8\]"):
        load_corpus(d)


def test_read_json_object_returns_the_object_or_names_what_is_wrong(tmp_path):
    f = tmp_path / "m.json"
    f.write_text('{"a": [1, 2]}', encoding="utf-8")
    assert read_json_object(f, "unreadable", "expected") == {"a": [1, 2]}
    f.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"^X: expected an object, got list$"):
        read_json_object(f, "X: unreadable", "X: expected an object")
    f.write_text("{not json", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"^X: unreadable \(Expecting property name"):
        read_json_object(f, "X: unreadable", "X: expected an object")
    f.write_bytes(b"\xff\xfe{}")
    with pytest.raises(CorpusError, match=r"^X: unreadable \(.*codec can't decode"):
        read_json_object(f, "X: unreadable", "X: expected an object")
    with pytest.raises(CorpusError, match=r"^X: unreadable \(.*No such file"):
        read_json_object(tmp_path / "missing.json", "X: unreadable", "X: expected an object")
