"""What a new user met, each fixed: checked here so that it stays fixed (the model card, the workflow's
report and dry run, and the SLURM profile have their own checks in tests/test_user_frictions_workflow.py)."""

from __future__ import annotations

import contextlib
import csv
import io

import pandas as pd
import yaml
from test_checkpoints_cli import fake_run, run_cli
from test_vision_training import digits, write_run  # noqa: F401  (digits: the fixture)

from attention_geometry.formats.columns import TRAINING_COLUMNS
from attention_geometry.formats.corpus import load_images
from attention_geometry.training.loop import train
from attention_geometry.training.model_card import DATA_TERMS, usage_section
from attention_geometry.training.run_config import load_run_config


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


# ------------------------------------------------------------------------------------------------ model cards


def _card_code(card: str) -> str:
    return card.split("```python\n", 1)[1].split("```", 1)[0]


def test_vit_snapshot_card_example_runs(tmp_path, digits, monkeypatch):  # noqa: F811  (the fixture)
    """The card's Python example of a one-channel ViT snapshot runs as written (it used pipeline(), which converts
    images to RGB and failed on the one-channel processor, and used PIL without importing it) and classifies a
    digit; the front matter names no free-text `datasets:` entry (digits are not a hub dataset) and has a
    model-index with the step's held-out loss and accuracy as loss.csv has them."""
    from PIL import Image

    cfg = write_run(tmp_path / "run.yaml", digits, max_steps=2, snapshot_steps=[2], eval_steps=[2], state_every=None)
    out = tmp_path / "run"
    train(load_run_config(cfg), out, progress=False)
    snap = out / "checkpoints" / "step-0000002"
    card = (snap / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert "datasets" not in front and front["license"] == "cc-by-4.0"
    row = next(r for r in csv.DictReader(open(out / "loss.csv")) if r["step"] == "2")
    (result,) = front["model-index"][0]["results"]
    assert front["model-index"][0]["name"].startswith("vit-tiny-digits-classifier")
    assert result["task"]["type"] == "image-classification" and result["dataset"]["split"] == "held-out"
    metrics = {m["type"]: m["value"] for m in result["metrics"]}
    assert metrics == {"loss": float(row["eval_loss"]), "accuracy": float(row["eval_accuracy"])}
    images = load_images(digits)
    Image.fromarray(images.heldout[0, 0]).save(tmp_path / "digit.png")
    monkeypatch.chdir(tmp_path)
    code = _card_code(card).replace("path/to/this/folder", str(snap))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    assert printed.getvalue().strip() in images.manifest["class_names"]


def test_rgb_card_example_imports_what_it_uses():
    code = _card_code(usage_section("image-classification", "AutoModelForImageClassification", "AutoImageProcessor", 3))
    assert "from PIL import Image" in code and 'pipeline("image-classification"' in code
    compile(code, "README.md", "exec")


def test_card_datasets_are_hub_ids():
    """`datasets:` in a card is a hub dataset id or absent (the hub reads it as one)."""
    for _licence, hub_id, _what in DATA_TERMS.values():
        assert hub_id is None or (hub_id.count("/") == 1 and " " not in hub_id), hub_id
