"""End-to-end tests of `attention-geometry train` on tiny random corpora: run dir contents, determinism,
bitwise resume after SIGKILL, 2-process DDP vs 1 process, and bad input rejected before training."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import TINY_SHAPE as TINY
from helpers import run_cli as _cli
from helpers import write_random_corpus as write_corpus
from helpers import write_run_config_file as write_run

from attention_geometry.data.corpus_config import corpus_config_from_dict
from attention_geometry.data.prepare import prepare_corpus
from attention_geometry.errors import UserError
from attention_geometry.training.loop import train
from attention_geometry.training.models import build_model
from attention_geometry.training.run_config import load_run_config


def _rows(out: Path) -> list[dict]:
    with open(out / "loss.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c")


# ----------------------------------------------------------------------------------------- contents


@pytest.mark.parametrize("objective, init", [("encoder", "symmetric-fresh"), ("decoder", "symmetric")])
def test_run_dir_contents(tmp_path, corpus, objective, init):
    cfg = load_run_config(write_run(tmp_path / "run.yaml", corpus, objective=objective, init=init, seed=4))
    out = tmp_path / "out"
    s = train(cfg, out, progress=False)
    assert s["status"] == "trained" and s["step"] == 12
    resolved = yaml.safe_load((out / "run.yaml").read_text())
    name = f"tiny-random-{objective}-{init}-s4"
    assert resolved["run"] == name and resolved["dataset"] == "random"
    assert resolved["hyper"]["hidden_size"] == 32 and resolved["hyper"]["lr"] == 1e-3
    assert resolved["hyper"]["vocab_size"] == 50 and resolved["hyper"]["seq_len"] == 16
    snaps = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert snaps == ["step-0000000", "step-0000006", "step-0000012"]
    for snap in snaps:
        assert {p.name for p in (out / "checkpoints" / snap).iterdir()} >= {
            "model.safetensors",
            "config.json",
            "run.yaml",
        }
    # step 0 is build_model's init, and a snapshot loads back as a stock transformers model
    from transformers import AutoModelForMaskedLM, BertLMHeadModel

    loader = AutoModelForMaskedLM if objective == "encoder" else BertLMHeadModel
    m0 = loader.from_pretrained(out / "checkpoints" / "step-0000000")
    ref = build_model("tiny", objective, init, 4, **{**TINY, "vocab_size": 50})
    for k, v in ref.state_dict().items():
        assert torch.equal(v, m0.state_dict()[k]), k
    assert m0.config.is_decoder == (objective == "decoder")
    sa = m0.bert.encoder.layer[0].attention.self
    assert torch.equal(sa.query.weight, sa.key.weight)
    m12 = loader.from_pretrained(out / "checkpoints" / "step-0000012")
    assert not torch.equal(m12.bert.encoder.layer[0].attention.self.query.weight, sa.query.weight)
    rows = _rows(out)
    assert [int(r["step"]) for r in rows] == list(range(13))
    assert list(rows[0]) == [
        "run",
        "size",
        "dataset",
        "objective",
        "init",
        "seed",
        "step",
        "train_loss",
        "eval_loss",
        "learning_rate",
    ]
    assert all(r["run"] == name and r["objective"] == objective and r["seed"] == "4" for r in rows)
    assert [int(r["step"]) for r in rows if r["eval_loss"]] == [0, 4, 8, 12]
    assert rows[0]["train_loss"] == "" and all(float(r["train_loss"]) > 0 for r in rows[1:])
    # near log(vocab) at init, and learning_rate is the warmup schedule
    assert abs(float(rows[0]["eval_loss"]) - np.log(50)) < 0.5
    assert float(rows[1]["learning_rate"]) == pytest.approx(1e-3 / 5)
    state = json.loads((out / "state" / "state.json").read_text())
    assert state["step"] == 12
    assert (out / "train.log").read_text().count("eval_loss") == 4
    # the same command again does nothing
    again = train(cfg, out, progress=False)
    assert again["status"] == "finished"
    assert _rows(out) == rows


def test_log_every_rows_are_window_means(tmp_path, corpus):
    out1, out5 = tmp_path / "o1", tmp_path / "o5"
    train(
        load_run_config(
            write_run(tmp_path / "a.yaml", corpus, max_steps=10, eval_steps=[], snapshot_steps=[], state_every=None)
        ),
        out1,
        progress=False,
    )
    train(
        load_run_config(
            write_run(
                tmp_path / "b.yaml",
                corpus,
                max_steps=10,
                eval_steps=[],
                snapshot_steps=[],
                state_every=None,
                log_every=5,
            )
        ),
        out5,
        progress=False,
    )
    r1 = {int(r["step"]): r for r in _rows(out1)}
    r5 = _rows(out5)
    assert [int(r["step"]) for r in r5] == [0, 5, 10]
    for r in r5[1:]:
        s = int(r["step"])
        assert float(r["train_loss"]) == pytest.approx(
            np.mean([float(r1[t]["train_loss"]) for t in range(s - 4, s + 1)])
        )


def test_regularizer_run_pulls_wqk_towards_symmetry(tmp_path, corpus):
    from attention_geometry.scoring.measures import symmetry

    def final_sym(out):
        from safetensors.torch import load_file

        sd = load_file(str(out / "checkpoints" / "step-0000012" / "model.safetensors"))
        q = sd["bert.encoder.layer.0.attention.self.query.weight"]
        k = sd["bert.encoder.layer.0.attention.self.key.weight"]
        return float(symmetry(q.T @ k))

    base = {"init": "standard", "eval_steps": [], "overrides": {"lr": 1e-2, "warmup_steps": 1}}
    train(load_run_config(write_run(tmp_path / "a.yaml", corpus, **base)), tmp_path / "a", progress=False)
    train(
        load_run_config(write_run(tmp_path / "b.yaml", corpus, regularizer={"lambda": 1.0}, **base)),
        tmp_path / "b",
        progress=False,
    )
    assert final_sym(tmp_path / "b") > final_sym(tmp_path / "a") + 0.1


# -------------------------------------------------------------------------------- determinism, resume


def test_same_config_and_seed_give_identical_loss_log(tmp_path, corpus):
    run = load_run_config(write_run(tmp_path / "run.yaml", corpus, objective="decoder", init="fresh"))
    train(run, tmp_path / "a", progress=False)
    train(run, tmp_path / "b", progress=False)
    assert (tmp_path / "a" / "loss.csv").read_bytes() == (tmp_path / "b" / "loss.csv").read_bytes()
    other = load_run_config(write_run(tmp_path / "r2.yaml", corpus, objective="decoder", init="fresh", seed=1))
    train(other, tmp_path / "c", progress=False)
    assert [r["train_loss"] for r in _rows(tmp_path / "a")] != [r["train_loss"] for r in _rows(tmp_path / "c")]


@pytest.mark.slow
def test_resume_after_sigkill_is_bitwise_equal(tmp_path, corpus):
    overrides = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32}
    cfg = write_run(
        tmp_path / "run.yaml",
        corpus,
        max_steps=150,
        snapshot_every=50,
        eval_every=25,
        state_every=5,
        overrides=overrides,
    )
    ref = tmp_path / "ref"
    train(load_run_config(cfg), ref, progress=False)

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attention_geometry.cli",
            "train",
            "--config",
            str(cfg),
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 120
    while not (out / "state" / "state.json").is_file():
        assert proc.poll() is None and time.time() < deadline, "training ended before a state was written"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = json.loads((out / "state" / "state.json").read_text())["step"]
    assert killed_at < 150
    # a half-written state or snapshot from the crash is never taken as complete
    (out / ".tmp-state-999").mkdir()
    (out / ".tmp-state-999" / "state.json").write_text('{"step": 145}')
    # the same command again (in-process here, to save a second interpreter start-up)
    assert train(load_run_config(cfg), out, progress=False)["status"] == "resumed"
    assert (
        f"resuming run tiny-random-encoder-standard-s0 from {out / 'state'} at step {killed_at}"
        in (out / "train.log").read_text()
    )
    assert (out / "loss.csv").read_bytes() == (ref / "loss.csv").read_bytes()
    for snap in ("step-0000000", "step-0000050", "step-0000150"):
        a = (out / "checkpoints" / snap / "model.safetensors").read_bytes()
        assert a == (ref / "checkpoints" / snap / "model.safetensors").read_bytes(), snap
    assert (out / "state" / "training.pt").is_file()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step-0000000",
        "step-0000050",
        "step-0000100",
        "step-0000150",
    ]


# --------------------------------------------------------------------------------------------- DDP


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path, corpus):
    cfg = write_run(
        tmp_path / "run.yaml",
        corpus,
        max_steps=8,
        snapshot_steps=[],
        eval_every=4,
        state_every=None,
        overrides={"batch_size": 8, "grad_accum": 2},
    )
    one = tmp_path / "one"
    train(load_run_config(cfg), one, progress=False)
    two = tmp_path / "two"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "attention_geometry.cli",
            "train",
            "--config",
            str(cfg),
            "--out",
            str(two),
            "--no-progress",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    r1, r2 = _rows(one), _rows(two)
    assert [r["step"] for r in r1] == [r["step"] for r in r2]
    for a, b in zip(r1, r2):
        for col in ("train_loss", "eval_loss"):
            if a[col]:
                assert float(b[col]) == pytest.approx(float(a[col]), rel=1e-4), (a["step"], col)
    assert yaml.safe_load((two / "run.yaml").read_text())["runtime"]["world_size"] == 2


# ------------------------------------------------------------------------------------------ bad input


def test_cli_bad_inputs_fail_before_training(tmp_path, corpus):
    empty = write_corpus(tmp_path / "empty", n_train=0)
    long_blocks = write_corpus(tmp_path / "long", block_len=600, n_train=2, n_heldout=1)
    cases = [
        (write_run(tmp_path / "a.yaml", corpus, size="huge"), "size"),
        (write_run(tmp_path / "b.yaml", tmp_path / "nope"), "corpus"),
        (write_run(tmp_path / "c.yaml", empty), "no blocks"),
        (write_run(tmp_path / "d.yaml", long_blocks), "max_position_embeddings"),
        (write_run(tmp_path / "e.yaml", corpus, overrides={"seq_len": 32}), "overrides.seq_len"),
        (write_run(tmp_path / "f.yaml", corpus, overrides={"vocab_size": 10}), "overrides.vocab_size"),
    ]
    for cfg, key in cases:
        out = tmp_path / ("out-" + cfg.stem)
        with pytest.raises(UserError, match=key.replace(".", r"\.")):
            train(load_run_config(cfg), out, progress=False)
        assert not out.exists()
    res = _cli("train", "--config", str(cases[0][0]), "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "size" in res.stderr


def _same_files(a: Path, b: Path, names=("loss.csv",)) -> None:
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    snaps = sorted(p.name for p in (a / "checkpoints").iterdir())
    assert snaps == sorted(p.name for p in (b / "checkpoints").iterdir())
    for snap in snaps:
        assert (a / "checkpoints" / snap / "model.safetensors").read_bytes() == (
            b / "checkpoints" / snap / "model.safetensors"
        ).read_bytes(), snap


def test_rerun_with_other_settings_keeps_the_old_run_aside_and_starts_afresh(tmp_path, corpus):
    out = tmp_path / "out"
    train(load_run_config(write_run(tmp_path / "a.yaml", corpus, max_steps=3, eval_steps=[])), out, progress=False)
    before = (out / "loss.csv").read_bytes()
    b = load_run_config(write_run(tmp_path / "b.yaml", corpus, max_steps=3, eval_steps=[], init="fresh"))
    summary = train(b, out, progress=False)
    assert summary["status"] == "trained"
    assert (tmp_path / "out.old-1" / "loss.csv").read_bytes() == before  # the old run, untouched
    assert "settings changed (init, run)" in (out / "train.log").read_text()
    train(b, tmp_path / "fresh", progress=False)
    _same_files(out, tmp_path / "fresh")
    # a run that never reached its first state restarts the same way with a corrected config
    train(
        load_run_config(write_run(tmp_path / "c.yaml", corpus, max_steps=3, eval_steps=[], seed=5)), out, progress=False
    )
    assert (tmp_path / "out.old-2").is_dir() and yaml.safe_load((out / "run.yaml").read_text())["seed"] == 5


def test_more_steps_under_a_constant_schedule_extend_the_run(tmp_path, corpus):
    kw = dict(snapshot_every=4, eval_every=4, state_every=4, overrides={"schedule": "constant"})
    out = tmp_path / "out"
    train(load_run_config(write_run(tmp_path / "a.yaml", corpus, max_steps=8, **kw)), out, progress=False)
    longer = load_run_config(write_run(tmp_path / "b.yaml", corpus, max_steps=16, **kw))
    assert train(longer, out, progress=False)["status"] == "resumed"
    assert not (tmp_path / "out.old-1").exists()
    assert "continuing from the newest state" in (out / "train.log").read_text()
    train(longer, tmp_path / "fresh", progress=False)
    _same_files(out, tmp_path / "fresh", names=("loss.csv", "run.yaml"))


def test_more_steps_under_the_linear_schedule_restart(tmp_path, corpus):
    # the linear decay ends at max_steps, so the first 8 steps of a 16-step run differ from an 8-step run
    out = tmp_path / "out"
    train(load_run_config(write_run(tmp_path / "a.yaml", corpus, max_steps=8, snapshot_every=4)), out, progress=False)
    longer = load_run_config(write_run(tmp_path / "b.yaml", corpus, max_steps=16, snapshot_every=4))
    assert train(longer, out, progress=False)["status"] == "trained"
    assert (tmp_path / "out.old-1" / "checkpoints" / "step-0000008").is_dir()
    train(longer, tmp_path / "fresh", progress=False)
    _same_files(out, tmp_path / "fresh")


@pytest.mark.parametrize(
    "damage, message",
    [
        ("delete loss.csv", "loss.csv: missing, but the run has a training state"),
        ("garbage loss.csv", "loss.csv: damaged loss log"),
        # in state/ and in the kept state.prev/ (one damaged state falls back: tests/test_faults_state.py)
        ("garbage state.json", "damaged training state: "),
        ("garbage run.yaml", "run.yaml"),
    ],
)
def test_a_damaged_run_dir_is_one_line_naming_the_file(tmp_path, corpus, damage, message):
    out = tmp_path / "out"
    cfg = write_run(
        tmp_path / "run.yaml",
        corpus,
        max_steps=6,
        state_every=3,
        snapshot_every=3,
        eval_every=3,
        overrides={"schedule": "constant"},
    )
    train(load_run_config(cfg), out, progress=False)
    # make it unfinished: a longer run of the same settings would resume from step 6 (constant schedule)
    cfg = write_run(
        tmp_path / "run.yaml",
        corpus,
        max_steps=9,
        state_every=3,
        snapshot_every=3,
        eval_every=3,
        overrides={"schedule": "constant"},
    )
    what, name = damage.split()
    targets = [out / "state/state.json", out / "state.prev/state.json"] if name == "state.json" else [out / name]
    for target in targets:
        if what == "delete":
            target.unlink()
        else:
            target.write_bytes(b"\x00\xff{not: [valid\n")
    r = _cli("train", "--config", str(cfg), "--out", str(out), "--no-progress")
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_a_snapshot_is_a_whole_hugging_face_model(tmp_path):
    """Weights, config, the corpus's tokenizer with the trained special tokens, and a model card: AutoTokenizer
    and pipeline() load a snapshot alone."""
    from transformers import AutoTokenizer, pipeline

    words = "the cat sat on a mat while dogs ran in parks near old trees and birds sang songs".split()
    rng = np.random.default_rng(0)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(60):
        (docs / f"d{i}.txt").write_text(" ".join(words[j] for j in rng.integers(0, len(words), 40)) + ".\n")
    cfg = corpus_config_from_dict(
        {
            "dataset": "text_files",
            "paths": [str(docs)],
            "block_len": 16,
            "tokenizer": {"vocab_size": 64, "min_frequency": 1},
            "heldout_fraction": 0.1,
        }
    )
    corpus = prepare_corpus(cfg, tmp_path / "corpus")
    vocab = json.loads((corpus / "manifest.json").read_text())["vocab_size"]
    for objective, task in (("encoder", "fill-mask"), ("decoder", "text-generation")):
        out = tmp_path / objective
        train(
            load_run_config(
                write_run(
                    tmp_path / f"{objective}.yaml",
                    corpus,
                    objective=objective,
                    max_steps=2,
                    snapshot_every=2,
                    eval_steps=[],
                    overrides={"vocab_size": None},
                )
            ),
            out,
            progress=False,
        )
        snap = out / "checkpoints" / "step-0000002"
        tok = AutoTokenizer.from_pretrained(snap)
        assert len(tok) == vocab and tok.mask_token == "[MASK]" and tok.pad_token_id == 0
        assert (
            tok.convert_tokens_to_ids("[MASK]")
            == json.loads((corpus / "manifest.json").read_text())["special_tokens"]["mask"]
        )
        card = (snap / "README.md").read_text()
        assert f"pipeline_tag: {task}" in card and "at step 2" in card
        front = yaml.safe_load(card.split("---")[1])
        assert front["license"] == "unknown" and "datasets" not in front  # local text files: no hub id, no terms
        assert f'pipeline("{task}"' in card
        # the tokenizer knows the trained length; a decoder's prompt has no trailing [SEP] (it ends a document)
        assert tok.model_max_length == 16
        ids = tok("the cat")["input_ids"]
        assert ids[0] == tok.cls_token_id
        assert (ids[-1] == tok.sep_token_id) == (objective == "encoder")
        pipe = pipeline(task, model=str(snap), device="cpu")
        if task == "fill-mask":
            assert len(pipe("the cat [MASK] on a mat")) == 5
        else:
            assert isinstance(pipe("the cat", max_new_tokens=3)[0]["generated_text"], str)


def test_dropout_runs_are_reproducible_and_resume_bit_for_bit(tmp_path, corpus):
    """A run with dropout > 0 (config/paper.yaml's 0.1) gives the same loss.csv and weights twice in one process
    (whatever the process's generator drew before), and a run extended from its state equals one trained straight
    through; its dropout is really applied (it differs from the same run without dropout)."""
    drop = {"schedule": "constant", "hidden_dropout": 0.1, "attention_dropout": 0.1}
    kw = dict(snapshot_every=4, eval_every=4, state_every=4)
    straight = load_run_config(write_run(tmp_path / "a.yaml", corpus, max_steps=12, overrides=drop, **kw))
    train(straight, tmp_path / "a", progress=False)
    torch.rand(1000)  # the process's generator moves on between the runs
    train(straight, tmp_path / "b", progress=False)
    _same_files(tmp_path / "a", tmp_path / "b", names=("loss.csv", "run.yaml"))
    for snap in ("step-0000004", "step-0000012"):
        a = (tmp_path / "a" / "checkpoints" / snap / "model.safetensors").read_bytes()
        assert a == (tmp_path / "b" / "checkpoints" / snap / "model.safetensors").read_bytes(), snap
    short = load_run_config(write_run(tmp_path / "s.yaml", corpus, max_steps=4, overrides=drop, **kw))
    train(short, tmp_path / "r", progress=False)
    torch.rand(1000)
    assert train(straight, tmp_path / "r", progress=False)["status"] == "resumed"
    _same_files(tmp_path / "a", tmp_path / "r", names=("loss.csv",))
    no_drop = {"schedule": "constant"}
    plain = load_run_config(write_run(tmp_path / "p.yaml", corpus, max_steps=12, overrides=no_drop, **kw))
    train(plain, tmp_path / "p", progress=False)
    assert [r["train_loss"] for r in _rows(tmp_path / "a")] != [r["train_loss"] for r in _rows(tmp_path / "p")]


def test_a_batch_without_labels_or_a_diverged_loss_stops_with_one_line(tmp_path, corpus, monkeypatch):
    """A batch with no labelled position used to log a loss of exactly 0.0, and a NaN loss trained on to the end
    with exit 0: both stop at that step with one line, rows before it kept."""
    few = write_run(tmp_path / "few.yaml", corpus, overrides={"mlm_probability": 0.0005})
    with pytest.raises(UserError, match=r"^step 1: the training loss is not finite: no position of its batch"):
        train(load_run_config(few), tmp_path / "few", progress=False)
    assert [r["step"] for r in _rows(tmp_path / "few")] == ["0"]  # step 0's evaluation only
    from attention_geometry.training.step import Step

    real = Step.accumulate

    def diverging(step, *a, **k):  # the loss turns NaN from the 4th update on
        s = real(step, *a, **k)
        return s * float("nan") if len(calls) >= 4 else s

    calls: list = []
    monkeypatch.setattr(Step, "accumulate", lambda *a, **k: (calls.append(1), diverging(*a, **k))[1])
    cfg = write_run(tmp_path / "nan.yaml", corpus, log_every=1)
    with pytest.raises(UserError, match=r"^step 4: the training loss is not finite: the loss is nan \(diverged\)"):
        train(load_run_config(cfg), tmp_path / "nan", progress=False)
    assert [r["step"] for r in _rows(tmp_path / "nan")] == ["0", "1", "2", "3"]


@pytest.mark.parametrize("kind", ["file", "fifo", "dangling", "folder"])
def test_train_out_must_be_new_empty_or_a_run(tmp_path, corpus, kind):
    """train --out on a non-empty folder that is not a run trained into it and removed its .tmp-* / .trash-*
    subfolders; an existing file, FIFO or dangling link was a FileExistsError traceback: each is one line now,
    and nothing in the folder is touched."""
    cfg = write_run(tmp_path / "run.yaml", corpus)
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("mine")
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "dangling":
        out.symlink_to(tmp_path / "nowhere")
    else:
        (out / ".tmp-mine").mkdir(parents=True)
        (out / ".trash-mine").mkdir()
        (out / "notes.txt").write_text("mine")
    r = _cli("train", "--config", str(cfg), "--out", str(out), "--no-progress")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {out}: "), r.stderr
    if kind == "folder":
        assert sorted(p.name for p in out.iterdir()) == [".tmp-mine", ".trash-mine", "notes.txt"]
        assert "not a run" in r.stderr
    # an empty folder and a new path are fine
    (tmp_path / "empty").mkdir()
    train(load_run_config(cfg), tmp_path / "empty", progress=False)
    assert (tmp_path / "empty" / "run.yaml").is_file()


def test_a_batch_that_cannot_fit_in_memory_is_refused_before_anything_is_written(tmp_path, corpus):
    """batch_size 100000 against a small corpus used to be killed by the kernel with a half-made run folder: one
    line now, naming the setting and the sizes, and no run folder."""
    from attention_geometry.formats.files import mem_available_bytes
    from attention_geometry.training.launch import cpu_batch_bytes

    avail = mem_available_bytes()
    if avail is None:
        pytest.skip("no /proc/meminfo here")
    cfg = load_run_config(write_run(tmp_path / "big.yaml", corpus, overrides={"batch_size": 2_000_000}))
    h = resolve_hyper_for(cfg, corpus)
    assert cpu_batch_bytes(h, 2_000_000) > avail  # the premise, computed independently of the refusal below
    with pytest.raises(UserError, match=r"^overrides.batch_size: one micro-batch of 2000000 sequences x 16 tokens"):
        train(cfg, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    # the logits term by hand: 3 fp32 arrays of micro x seq x vocab
    assert cpu_batch_bytes(h, 1) >= 3 * 4 * 16 * h.vocab_size


def resolve_hyper_for(cfg, corpus_dir):
    from attention_geometry.training.run_config import read_run_data, resolve_run

    return resolve_run(cfg, read_run_data(cfg.corpus, cfg.objective)).hyper


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage\n", b"a,b\n1,2\n"])
def test_a_damaged_provenance_record_on_resume_is_one_line(tmp_path, corpus, content):
    """A non-UTF-8 (or foreign) provenance.csv stopped a resume with a UnicodeDecodeError traceback."""
    kw = dict(snapshot_every=4, eval_every=4, state_every=4, overrides={"schedule": "constant"})
    out = tmp_path / "out"
    train(load_run_config(write_run(tmp_path / "a.yaml", corpus, max_steps=4, **kw)), out, progress=False)
    (out / "provenance.csv").write_bytes(content)
    longer = write_run(tmp_path / "b.yaml", corpus, max_steps=8, **kw)
    r = _cli("train", "--config", str(longer), "--out", str(out), "--no-progress")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "provenance.csv: " in r.stderr and ("unreadable" in r.stderr or "not a provenance record" in r.stderr)
    assert (out / "provenance.csv").read_bytes() == content  # nothing overwritten


def test_a_finished_run_without_its_provenance_record_says_how_to_restore_it(tmp_path, corpus):
    """A deleted provenance.csv of a finished run was a dead end: `train` said "nothing to do" and concat-tables
    "no such file". The record (commit and CPU of each start) cannot be remade from the run, so both say so and
    name the table that holds a copy of its rows, the run's own rows of which the hint's command selects."""
    from attention_geometry.workflow.concat import concat_tables

    kw = dict(snapshot_every=4, eval_every=4, overrides={"schedule": "constant"})
    config = write_run(tmp_path / "a.yaml", corpus, max_steps=4, run="run-a", **kw)
    out = tmp_path / "runs" / "run-a"  # the workflow's layout {results}/runs/{run}
    train(load_run_config(config), out, progress=False)
    kept = (out / "provenance.csv").read_text()
    # the workflow's gathered table, as concat-tables made it before the file was lost
    table = tmp_path / "tables" / "run_provenance.csv"
    table.parent.mkdir()
    concat_tables([out / "provenance.csv"], table, kind="run_provenance")
    (out / "provenance.csv").unlink()
    r = _cli("train", "--config", str(config), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "provenance.csv" in ln]
    assert len(lines) == 1 and "missing" in lines[0] and "run_provenance.csv" in lines[0], r.stderr
    assert not (out / "provenance.csv").exists()  # nothing made up
    with pytest.raises(UserError) as e:
        concat_tables([out / "provenance.csv"], tmp_path / "x.csv", kind="run_provenance")
    message = str(e.value)
    assert "\n" not in message and "cannot be remade" in message and "run_provenance.csv" in message
    # the hint's command, run as given against the gathered table, restores the run's rows exactly
    command = message.split("`")[1]
    assert str(table) in command
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)
    assert (out / "provenance.csv").read_text() == kept


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_an_emulated_precision_on_a_cpu_is_said(tmp_path, corpus, precision):
    """fp16 on a CPU trained silently at many times fp32's step time: one warning line now, none for fp32."""
    config = write_run(tmp_path / "a.yaml", corpus, max_steps=1, overrides={"precision": precision})
    r = _cli("train", "--config", str(config), "--out", str(tmp_path / "out"), "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: precision")]
    assert len(lines) == (precision == "fp16"), r.stderr
    if lines:
        assert "fp16 on a CPU" in lines[0] and "fp32" in lines[0]


def test_bf16_warns_only_on_a_cpu_without_bf16_units(monkeypatch):
    from attention_geometry.training import runtime

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: {"avx2", "fma"})
    assert "without AVX-512 BF16" in runtime.precision_warning("bf16", cpu)
    assert runtime.precision_warning("bf16", cuda) is None and runtime.precision_warning("fp32", cpu) is None
    for flags in ({"avx2", "avx512_bf16"}, {"amx_bf16"}, set()):  # a host that has them, or unknown flags
        monkeypatch.setattr(runtime, "_cpu_flags", lambda flags=flags: flags)
        assert runtime.precision_warning("bf16", cpu) is None
    assert runtime.precision_warning("fp16", cpu) is not None and runtime.precision_warning("fp16", cuda) is None
