"""ViT image classifiers (objective `classifier`, attention_geometry.training.vit) through the trainer: the four
inits at step 0 (defined as for the BERT models), a run's directory, loss.csv with the held-out accuracy, the
run.yaml keys, bitwise resume after an interruption, scoring with the `vit` family, snapshots that load with
AutoModelForImageClassification / AutoImageProcessor and classify a held-out digit, and the config checks.
The image set is prepared from a stand-in of scikit-learn's digits file (tests/test_vision_data.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import fresh_linear_std
from test_vision_data import write_digits_csv

from attention_geometry.data import images as images_mod
from attention_geometry.data.image_config import image_config_from_dict
from attention_geometry.data.images import prepare_images
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import IMAGE_LOSS_COLUMNS
from attention_geometry.formats.corpus import load_images
from attention_geometry.scoring.scorer import score_checkpoints
from attention_geometry.training.hyper import IMAGE_ONLY_FIELDS, OMITTED_AT_DEFAULT, TEXT_ONLY_FIELDS, Hyper
from attention_geometry.training.loop import Trainer, train
from attention_geometry.training.models import symmetry_penalty
from attention_geometry.training.run_config import load_run_config, run_config_from_dict
from attention_geometry.training.vit import build_vit, pixel_batch, qk_layers, vit_attentions

SMALL = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, batch_size=16, warmup_steps=5)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A prepared image set from a stand-in digits.csv.gz: 10 noisy prototypes, 40 images per class."""
    d = tmp_path_factory.mktemp("digits")
    f = write_digits_csv(d / "digits.csv.gz", n_per_class=40, noise=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(images_mod, "digits_path", lambda: f)
        return prepare_images(image_config_from_dict({"dataset": "digits"}), d / "set")


def write_run(path: Path, data: Path, **kw) -> Path:
    cfg = {
        "corpus": str(data),
        "size": "vit-tiny",
        "objective": "classifier",
        "init": "standard",
        "seed": 900,
        "max_steps": 12,
        "snapshot_every": 6,
        "eval_every": 4,
        "state_every": 3,
        "threads": 1,
        "overrides": dict(SMALL),
    }
    cfg["overrides"].update(kw.pop("overrides", {}))
    for kind in ("snapshot", "eval"):
        if f"{kind}_steps" in kw:
            cfg.pop(f"{kind}_every")
    cfg.update(kw)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _vit(init="standard", seed=0, **kw):
    return build_vit("vit-tiny", init, seed, image_size=8, num_channels=1, **{**SMALL, **kw})


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------------------------- inits


def test_standard_init_is_the_stock_vit_under_the_seed():
    from transformers import ViTForImageClassification

    m = _vit("standard", seed=3)
    torch.manual_seed(3)
    ref = ViTForImageClassification(m.config)
    for k, v in ref.state_dict().items():
        assert torch.equal(v, m.state_dict()[k]), k
    for att in vit_attentions(m):
        assert not torch.equal(att.q_proj.weight, att.k_proj.weight)
        assert abs(att.k_proj.weight.std().item() - 0.02) < 0.003  # truncated normal(0, 0.02)
        assert torch.count_nonzero(att.q_proj.bias) == 0
    c = m.config
    assert c.model_type == "vit" and (c.image_size, c.patch_size, c.num_channels) == (8, 2, 1)


def test_symmetric_init_ties_wq_to_wk_and_changes_nothing_else():
    std = _params(_vit("standard", seed=5))
    m = _vit("symmetric", seed=5)
    for att in vit_attentions(m):
        assert torch.equal(att.q_proj.weight, att.k_proj.weight)
        assert att.q_proj.weight.data_ptr() != att.k_proj.weight.data_ptr()  # a copy, not a shared parameter
    for k, v in _params(m).items():
        if k.endswith("attention.q_proj.weight"):
            assert torch.equal(v, std[k.replace("q_proj", "k_proj")])
        else:
            assert torch.equal(v, std[k]), k
    assert symmetry_penalty(m, qk_layers(m)).item() == pytest.approx(2.0, abs=1e-5)  # 1 per symmetric layer


def test_fresh_inits_follow_pytorch_default_linear_init():
    """As for the BERT models (tests/test_training.py): PyTorch's default nn.Linear init for q, k and v,
    std 1 / sqrt(3 fan_in), non-zero biases; symmetric-fresh = the same draws, then W_q := W_k."""
    fresh, symf = _vit("fresh", seed=7), _vit("symmetric-fresh", seed=7)
    std = _params(_vit("standard", seed=7))
    fan_in = SMALL["hidden_size"]
    bound = 1 / math.sqrt(fan_in)
    for att_f, att_s in zip(vit_attentions(fresh), vit_attentions(symf)):
        for lin in (att_f.q_proj, att_f.k_proj, att_f.v_proj):
            w = lin.weight.detach()
            assert w.std().item() == pytest.approx(fresh_linear_std(fan_in), rel=0.1)
            assert w.abs().max().item() <= bound and lin.bias.abs().max().item() <= bound
            assert lin.bias.std().item() > 0.02
        assert not torch.equal(att_f.q_proj.weight, att_f.k_proj.weight)
        assert torch.equal(att_s.q_proj.weight, att_s.k_proj.weight)
        assert torch.equal(att_s.k_proj.weight, att_f.k_proj.weight)
        assert torch.equal(att_s.v_proj.weight, att_f.v_proj.weight)
        assert torch.equal(att_s.q_proj.bias, att_f.q_proj.bias)
    for k, v in _params(fresh).items():
        if not any(f".attention.{n}." in k for n in ("q_proj", "k_proj", "v_proj")):
            assert torch.equal(v, std[k]), k
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _vit("symmetric-fresh", seed=11)
    assert torch.equal(torch.get_rng_state(), before)


# ------------------------------------------------------------------------------------------------ runs


def _rows(out: Path) -> list[dict]:
    with open(out / "loss.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_vit_run(tmp_path, digits):
    """Run dir, run.yaml, loss.csv with the held-out accuracy, snapshots scored with the `vit` family."""
    out = tmp_path / "run"
    s = train(load_run_config(write_run(tmp_path / "run.yaml", digits, init="symmetric-fresh")), out, progress=False)
    assert s["status"] == "trained" and s["step"] == 12
    resolved = yaml.safe_load((out / "run.yaml").read_text())
    assert resolved["run"] == "vit-tiny-digits-classifier-symmetric-fresh-s900"
    assert resolved["n_train_images"] == 320 and resolved["eval_blocks"] == 80
    assert resolved["corpus_manifest"]["image_size"] == 8 and resolved["corpus_manifest"]["num_classes"] == 10
    assert resolved["hyper"]["patch_size"] == 2 and not set(TEXT_ONLY_FIELDS) & set(resolved["hyper"])
    rows = _rows(out)
    assert list(rows[0]) == IMAGE_LOSS_COLUMNS
    assert [int(r["step"]) for r in rows] == list(range(13))
    assert [int(r["step"]) for r in rows if r["eval_accuracy"]] == [0, 4, 8, 12]
    assert [int(r["step"]) for r in rows if r["eval_loss"]] == [0, 4, 8, 12]
    assert abs(float(rows[0]["eval_loss"]) - math.log(10)) < 0.5  # chance at init
    assert all(0 <= float(r["eval_accuracy"]) <= 1 for r in rows if r["eval_accuracy"])
    snaps = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert snaps == ["step-0000000", "step-0000006", "step-0000012"]
    card = (out / "checkpoints" / "step-0000012" / "README.md").read_text()
    assert "pipeline_tag: image-classification" in card and "ViT" in card
    assert "\nlicense: " in card and "datasets:" not in card  # the digits are not a hub dataset
    # the card states the step's held-out loss and accuracy, as loss.csv has them (step 12 is an eval step)
    last = next(r for r in rows if int(r["step"]) == 12)
    assert f"Held-out loss at this step: **{last['eval_loss']}** nats" in card
    assert f"accuracy {last['eval_accuracy']})" in card and float(last["eval_loss"]) > 0
    assert "Held-out loss" not in (out / "checkpoints" / "step-0000006" / "README.md").read_text()  # not an eval step
    scores = score_checkpoints(out)
    assert set(scores["model_type"]) == {"vit"} and set(scores["modality"]) == {"vision"}
    assert sorted(set(scores["step"])) == [0, 6, 12] and set(scores["layer"]) == {0, 1}
    assert set(scores["objective"]) == {"classifier"} and set(scores["init"]) == {"symmetric-fresh"}
    at0 = scores[(scores["step"] == 0) & (scores["head"] == "all")]
    assert np.allclose(at0["symmetry"], 1.0)  # W_q = W_k at init: M = W_q^T W_q


def test_a_snapshot_loads_with_the_auto_classes_and_classifies_a_heldout_digit(tmp_path, digits):
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    out = tmp_path / "run"
    cfg = write_run(tmp_path / "run.yaml", digits, max_steps=40, snapshot_steps=[40], eval_steps=[40], state_every=None)
    train(load_run_config(cfg), out, progress=False)
    snap = out / "checkpoints" / "step-0000040"
    model = AutoModelForImageClassification.from_pretrained(snap).eval()
    processor = AutoImageProcessor.from_pretrained(snap)
    data = load_images(digits)
    heldout = [Image.fromarray(np.asarray(data.heldout[i, 0]), mode="L") for i in range(len(data.heldout))]
    inputs = processor(images=heldout, return_tensors="pt")
    # the processor normalizes as training does
    assert torch.allclose(inputs["pixel_values"], pixel_batch(data.heldout, data.mean, data.std), atol=1e-5)
    with torch.no_grad():
        pred = model(**inputs).logits.argmax(-1).numpy()
    accuracy = float((pred == data.heldout_labels).mean())
    assert accuracy == pytest.approx(float(_rows(out)[-1]["eval_accuracy"]))  # the trainer's own number
    assert accuracy > 0.5  # the stand-in's classes are well apart: learned in 40 steps
    first = int(np.flatnonzero(pred == data.heldout_labels)[0])
    assert model.config.id2label[int(pred[first])] == str(int(data.heldout_labels[first]))


def test_resume_after_an_interruption_is_bitwise_equal(tmp_path, digits, monkeypatch):
    cfg = load_run_config(write_run(tmp_path / "run.yaml", digits, init="fresh", max_steps=20, snapshot_every=10))
    ref = tmp_path / "ref"
    train(cfg, ref, progress=False)

    out = tmp_path / "out"
    real = Trainer.checkpoint

    def interrupt_after_state(run, step, is_snap, is_state, *held_out):  # killed right after the state of step 9
        real(run, step, is_snap, is_state, *held_out)
        if step == 9:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "checkpoint", interrupt_after_state)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, progress=False)
    monkeypatch.setattr(Trainer, "checkpoint", real)
    torch.manual_seed(999)  # the resumed run restores the RNG from the state
    assert train(cfg, out, progress=False)["status"] == "resumed"
    assert "at step 9" in (out / "train.log").read_text()
    assert (out / "loss.csv").read_bytes() == (ref / "loss.csv").read_bytes()
    for snap in ("step-0000000", "step-0000010", "step-0000020"):
        a = (out / "checkpoints" / snap / "model.safetensors").read_bytes()
        assert a == (ref / "checkpoints" / snap / "model.safetensors").read_bytes(), snap


def test_regularizer_on_a_vit_run(tmp_path, digits):
    cfg = write_run(tmp_path / "r.yaml", digits, max_steps=6, regularizer={"lambda": 0.5}, eval_steps=[])
    out = tmp_path / "reg"
    train(load_run_config(cfg), out, progress=False)
    assert yaml.safe_load((out / "run.yaml").read_text())["regularizer"] == {"lambda": 0.5}


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "change, message",
    [
        ({"size": "tiny"}, "size: unknown size 'tiny' for objective classifier .*other kind of model"),
        ({"objective": "encoder"}, "size: unknown size 'vit-tiny' for objective encoder"),
        ({"overrides": {"vocab_size": 50}}, "overrides.vocab_size: only a text model has it"),
        ({"overrides": {"patch_size": 0}}, r"overrides.patch_size: must be >= 1"),
        ({"overrides": {"capture": "compile"}}, "overrides.capture: compile is not supported for objective classifier"),
        ({"objective": "regression"}, "objective: unknown objective 'regression'"),
    ],
)
def test_bad_vit_run_configs_are_one_line(tmp_path, digits, change, message):
    raw = yaml.safe_load(write_run(tmp_path / "run.yaml", digits).read_text())
    overrides = change.pop("overrides", {})
    raw.update(change)
    raw["overrides"].update(overrides)
    with pytest.raises(UserError, match=message):
        run_config_from_dict(raw)


def test_text_runs_take_no_patch_size_and_the_data_must_fit(tmp_path, digits):
    from helpers import write_random_corpus, write_run_config_file

    text = write_random_corpus(tmp_path / "text")
    raw = yaml.safe_load(write_run_config_file(tmp_path / "t.yaml", text).read_text())
    with pytest.raises(UserError, match="overrides.patch_size: only an image classifier has it"):
        run_config_from_dict({**raw, "overrides": {"patch_size": 2}})
    with pytest.raises(UserError, match="is a prepared image set .* not a text corpus"):
        train(run_config_from_dict({**raw, "corpus": str(digits)}), tmp_path / "x", progress=False)
    vit = yaml.safe_load(write_run(tmp_path / "v.yaml", digits).read_text())
    with pytest.raises(UserError, match="is not a prepared image set"):
        train(run_config_from_dict({**vit, "corpus": str(text)}), tmp_path / "y", progress=False)
    with pytest.raises(UserError, match="patch_size: 3 does not divide the images' size 8"):
        train(
            run_config_from_dict({**vit, "overrides": {**vit["overrides"], "patch_size": 3}}),
            tmp_path / "z",
            progress=False,
        )
    assert not (tmp_path / "z").exists() and not (tmp_path / "x").exists()


def test_a_text_run_yaml_has_no_vision_fields(tmp_path):
    """A text run's run.yaml `hyper` is what it was before ViTs: every Hyper field but patch_size, in order (and
    but the authors' recipe fields and the device path's, which run.yaml leaves out at their defaults:
    hyper.OMITTED_AT_DEFAULT)."""
    from helpers import write_random_corpus, write_run_config_file

    from attention_geometry.formats.corpus import load_corpus
    from attention_geometry.training.run_config import resolve_run

    text = write_random_corpus(tmp_path / "text")
    cfg = load_run_config(write_run_config_file(tmp_path / "t.yaml", text))
    hyper = resolve_run(cfg, load_corpus(cfg.corpus)).as_run_yaml()["hyper"]
    omitted = set(IMAGE_ONLY_FIELDS) | set(OMITTED_AT_DEFAULT)
    assert list(hyper) == [f for f in Hyper.__dataclass_fields__ if f not in omitted]
    assert "n_train_blocks" in resolve_run(cfg, load_corpus(cfg.corpus)).as_run_yaml()
