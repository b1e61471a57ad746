"""Image sets (`attention-geometry prepare-images`, attention_geometry.data.images, formats.corpus.load_images):
the fixed stratified held-out split, the digits reader on a stand-in of scikit-learn's digits.csv.gz (and on the
real file where scikit-learn is installed), the CIFAR-10 reader on a local stand-in of the hub dataset's parquet
files (columns `img` {bytes, path} and `label`), the manifest's hashes and the refusal of a changed source, the
reader's checks, and the config (validator, config/schema.yaml's `images`, config/paper.yaml's entries)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import run_cli

from attention_geometry.data import image_config as icfg
from attention_geometry.data import images as images_mod
from attention_geometry.data.image_config import image_config_from_dict
from attention_geometry.data.images import (
    digits_path,
    images_status,
    prepare_images,
    read_digits,
    stratified_split,
)
from attention_geometry.formats.corpus import (
    IMAGE_FILES,
    CorpusError,
    images_sha256,
    is_image_set,
    load_corpus,
    load_images,
)
from attention_geometry.formats.files import file_sha256

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
IMAGES_SCHEMA = SCHEMA["properties"]["images"]["additionalProperties"]["properties"]


# ------------------------------------------------------------------------------------------ stand-ins


def write_digits_csv(path: Path, n_per_class: int = 30, seed: int = 0, noise: int = 3) -> Path:
    """A stand-in of scikit-learn's digits.csv.gz: rows of 64 pixel counts 0..16 and the class (as floats,
    the way the real file writes them), ten noisy prototypes; classes interleaved."""
    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 17, size=(10, 64))
    labels = np.tile(np.arange(10), n_per_class)
    pix = np.clip(protos[labels] + rng.integers(-noise, noise + 1, size=(len(labels), 64)), 0, 16)
    with gzip.open(path, "wt", encoding="ascii") as fh:
        for p, c in zip(pix, labels):
            fh.write(",".join(f"{float(v):.18e}" for v in [*p, c]) + "\n")
    return path


@pytest.fixture
def fake_digits(tmp_path, monkeypatch):
    """digits_path() -> a stand-in digits.csv.gz (scikit-learn need not be installed)."""
    f = write_digits_csv(tmp_path / "digits.csv.gz")
    monkeypatch.setattr(images_mod, "digits_path", lambda: f)
    return f


def png(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def write_cifar_standin(root: Path, n_train: int = 40, n_test: int = 20, seed: int = 0) -> dict[str, tuple]:
    """A local stand-in of uoft-cs/cifar10: plain_text/{train,test}-00000-of-00001.parquet with columns `img`
    (datasets Image: {bytes, path}, PNG) and `label` (ClassLabel of the ten CIFAR names), written by `datasets`
    as the hub's parquet files are. Returns split -> (images uint8 [n, 32, 32, 3], labels)."""
    from datasets import ClassLabel, Dataset, Features, Image

    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        arr = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        labels = np.arange(n) % 10
        ds = Dataset.from_dict(
            {"img": [{"bytes": png(a), "path": None} for a in arr], "label": labels.tolist()},
            features=Features({"img": Image(), "label": ClassLabel(names=names)}),
        )
        (root / "plain_text").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(root / "plain_text" / f"{split}-00000-of-00001.parquet"))
        out[split] = (arr, labels)
    return out


def cifar_config(root: Path, **kw) -> dict:
    hub = {
        "path": str(root),
        "name": None,
        "data_files": {"train": "plain_text/train-*.parquet", "test": "plain_text/test-*.parquet"},
        **kw.pop("hub", {}),
    }
    return {"dataset": "cifar10", "hub": hub, **kw}


# ---------------------------------------------------------------------------------------------- split


def test_the_split_is_stratified_and_stable():
    labels = np.repeat(np.arange(4), [10, 7, 5, 3])
    train, held = stratified_split(labels, 0.2, seed=0)
    # the same indices on every machine: a function of the labels and the seed only (numpy's Generator)
    assert held.tolist() == [4, 6, 11, 21, 24]
    assert sorted([*train.tolist(), *held.tolist()]) == list(range(len(labels)))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(held) > 0)
    # per class: round_half_up(0.2 * n_c), at least one, at most n_c - 1
    assert np.bincount(labels[held]).tolist() == [2, 1, 1, 1]
    again, held_again = stratified_split(labels, 0.2, seed=0)
    assert np.array_equal(held, held_again) and np.array_equal(train, again)
    assert not np.array_equal(stratified_split(labels, 0.2, seed=1)[1], held)
    # the class's draw does not depend on the other classes (nor on where its images are)
    shuffled = np.random.default_rng(5).permutation(len(labels))
    _, held_s = stratified_split(labels[shuffled], 0.2, seed=0)
    for c in range(4):
        ranks = np.flatnonzero(labels == c).tolist()
        ranks_s = np.flatnonzero(labels[shuffled] == c).tolist()
        assert [ranks.index(i) for i in held if labels[i] == c] == sorted(
            ranks_s.index(i) for i in held_s if labels[shuffled][i] == c
        )


def test_digits_split_proportions():
    """The digits' class sizes (scikit-learn's 1797 images): 20 % held out per class, rounded half up."""
    sizes = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    labels = np.repeat(np.arange(10), sizes)
    _, held = stratified_split(labels, 0.2, seed=0)
    assert np.bincount(labels[held]).tolist() == [36, 36, 35, 37, 36, 36, 36, 36, 35, 36]
    assert len(held) == 359


# --------------------------------------------------------------------------------------------- digits


def test_read_digits_maps_counts_to_bytes(tmp_path):
    f = write_digits_csv(tmp_path / "d.csv.gz", n_per_class=2)
    images, labels = read_digits(f)
    assert images.shape == (20, 1, 8, 8) and images.dtype == np.uint8
    assert labels.tolist() == list(range(10)) * 2
    with gzip.open(f, "rt") as fh:
        counts = np.loadtxt(fh, delimiter=",")[:, :64].reshape(-1, 1, 8, 8)
    assert np.array_equal(images, np.floor(counts * 255 / 16 + 0.5).astype(np.uint8))
    assert set(np.unique((images.astype(int) * 16 + 127) // 255).tolist()) <= set(range(17))  # invertible
    (tmp_path / "bad.csv.gz").write_bytes(gzip.compress(b"1,2,3\n"))
    with pytest.raises(CorpusError, match="64 pixel counts"):
        read_digits(tmp_path / "bad.csv.gz")


def test_prepare_digits(tmp_path, fake_digits):
    cfg = image_config_from_dict({"dataset": "digits"})
    out = prepare_images(cfg, tmp_path / "digits")
    m = json.loads((out / "manifest.json").read_text())
    assert m["kind"] == "images" and m["name"] == "digits" and m["num_classes"] == 10
    assert (m["image_size"], m["num_channels"], m["n_train"], m["n_heldout"]) == (8, 1, 240, 60)
    assert m["train_class_counts"] == [24] * 10 and m["heldout_class_counts"] == [6] * 10
    assert m["split"] == {"kind": "stratified", "heldout_fraction": 0.2, "seed": 0}
    assert m["sources"][0]["sha256"] == file_sha256(fake_digits)
    assert m["files_sha256"] == {name: file_sha256(out / name) for name in IMAGE_FILES}
    s = load_images(out)
    assert s.dataset == "digits" and s.class_names == [str(c) for c in range(10)]
    x = np.asarray(s.train, dtype=np.float64) / 255
    assert s.mean == [pytest.approx(x.mean(), abs=1e-6)] and s.std == [pytest.approx(x.std(), abs=1e-6)]
    # the held-out images are exactly the split's, in source order
    images, labels = read_digits(fake_digits)
    train_idx, held_idx = stratified_split(labels, 0.2, 0)
    assert np.array_equal(s.heldout, images[held_idx]) and np.array_equal(s.train_labels, labels[train_idx])
    # the same config and input: nothing to do; another folder: byte-identical files
    assert images_status(cfg, out) == "current"
    again = prepare_images(cfg, tmp_path / "again")
    for name in [*IMAGE_FILES, "manifest.json"]:
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    assert images_sha256(load_images(again)) == images_sha256(s)


def test_a_changed_digits_file_is_refused(tmp_path, fake_digits):
    cfg = image_config_from_dict({"dataset": "digits"})
    out = prepare_images(cfg, tmp_path / "digits")
    before = (out / "train_images.npy").read_bytes()
    write_digits_csv(fake_digits, seed=1)
    assert images_status(cfg, out) == "changed"
    with pytest.raises(CorpusError, match=r"changed since \(the content of .*digits.csv.gz changed \(sha256\)\)"):
        prepare_images(cfg, out)
    assert (out / "train_images.npy").read_bytes() == before
    prepare_images(cfg, out, force=True)
    assert (out / "train_images.npy").read_bytes() != before and images_status(cfg, out) == "current"
    with pytest.raises(CorpusError, match="another image set config"):
        prepare_images(image_config_from_dict({"dataset": "digits", "seed": 3}), out)


def test_real_digits_match_load_digits():
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits

    images, labels = read_digits(digits_path())
    ref = load_digits()
    assert images.shape == (1797, 1, 8, 8)
    assert np.array_equal(labels, ref.target)
    assert np.array_equal(images[:, 0], np.floor(ref.images * 255 / 16 + 0.5).astype(np.uint8))


def test_digits_without_scikit_learn_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(images_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CorpusError, match="needs scikit-learn"):
        digits_path()


# ---------------------------------------------------------------------------------------------- CIFAR


def test_cifar_reader_on_a_parquet_standin(tmp_path):
    data = write_cifar_standin(tmp_path / "hub")
    cfg = image_config_from_dict(cifar_config(tmp_path / "hub"))
    assert (cfg.hub.image_field, cfg.hub.label_field, cfg.hub.heldout_split) == ("img", "label", "test")
    out = prepare_images(cfg, tmp_path / "cifar")
    s = load_images(out)
    assert s.class_names[:3] == ["airplane", "automobile", "bird"] and s.num_classes == 10
    assert (s.image_size, s.num_channels) == (32, 3)
    for split, images, labels in (("train", s.train, s.train_labels), ("test", s.heldout, s.heldout_labels)):
        arr, lab = data[split]
        assert np.array_equal(images, arr.transpose(0, 3, 1, 2)), split  # PNG is lossless
        assert np.array_equal(labels, lab), split
    m = s.manifest
    assert m["split"] == {"kind": "source", "train": "train", "heldout": "test"}
    hub_sources = [x for x in m["sources"] if "hub_id" in x]
    assert [x["split"] for x in hub_sources] == ["train", "test"] and hub_sources[0]["n_images_read"] == 40
    # the local parquet files are inputs: hashed, and a change is refused (one line through the CLI)
    files = [x for x in m["sources"] if "path" in x]
    assert {Path(x["path"]).name for x in files} == {"train-00000-of-00001.parquet", "test-00000-of-00001.parquet"}
    assert images_status(cfg, out) == "current"
    write_cifar_standin(tmp_path / "hub", seed=1)
    assert images_status(cfg, out) == "changed"
    (tmp_path / "cifar.yaml").write_text(yaml.safe_dump(cifar_config(tmp_path / "hub")))
    r = run_cli("prepare-images", "--config", str(tmp_path / "cifar.yaml"), "--out", str(out), "--no-progress")
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "changed since" in r.stderr and "-00000-of-00001.parquet changed (sha256)" in r.stderr


def test_cifar_without_a_heldout_split_is_split_stratified(tmp_path):
    data = write_cifar_standin(tmp_path / "hub", n_train=50)
    cfg = image_config_from_dict(
        cifar_config(tmp_path / "hub", hub={"heldout_split": None, "n_images": 40}, channels=1, image_size=16)
    )
    s = load_images(prepare_images(cfg, tmp_path / "cifar"))
    assert s.manifest["n_train"] + s.manifest["n_heldout"] == 40 and s.manifest["heldout_class_counts"] == [1] * 10
    assert s.train.shape[1:] == (1, 16, 16)
    _, held = stratified_split(data["train"][1][:40], 0.2, 0)
    assert np.array_equal(s.heldout_labels, data["train"][1][held])


def test_cifar_fetched_from_the_hub_is_prepared_offline_as_from_a_local_copy(tmp_path, monkeypatch):
    """fetch-hub-data downloads the two splits' parquet files of a stand-in of uoft-cs/cifar10 (served by
    tests/fakehub.py), and prepare-images --hub-data, with the hub offline, writes the arrays a prepare from a
    local copy of the same files writes."""
    import fakehub
    from huggingface_hub import constants

    from attention_geometry.data.hub_data import fetch_hub_data

    repo = tmp_path / "repo"
    data = write_cifar_standin(repo)
    (repo / "README.md").write_text("---\nconfigs: []\n---\n")
    raw = {"dataset": "cifar10", "hub": {"path": "org/cifar", "revision": "main"}}
    cfg = image_config_from_dict(raw)
    with fakehub.serve({"datasets/org/cifar": repo}) as (hub, url):
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        fetch_hub_data(icfg.hub_inputs(cfg), tmp_path / "fetched")
        parts = {f"datasets/org/cifar/plain_text/{s}-00000-of-00001.parquet" for s in ("train", "test")}
        assert sorted(hub.downloads()) == sorted(parts)
        asked = len(hub.requests)
        (tmp_path / "cifar.yaml").write_text(yaml.safe_dump(raw))
        offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_ENDPOINT": url}
        args = ["--config", str(tmp_path / "cifar.yaml"), "--hub-data", str(tmp_path / "fetched"), "--no-progress"]
        r = run_cli("prepare-images", *args, "--out", str(tmp_path / "hub-set"), env=offline)
        assert r.returncode == 0, r.stderr[-2000:]
        assert len(hub.requests) == asked  # nothing asked of the hub
    s = load_images(tmp_path / "hub-set")
    local = load_images(prepare_images(image_config_from_dict(cifar_config(repo)), tmp_path / "local-set"))
    assert s.manifest["files_sha256"] == local.manifest["files_sha256"]
    assert np.array_equal(s.train, data["train"][0].transpose(0, 3, 1, 2))
    hub_sources = [x for x in s.manifest["sources"] if "hub_id" in x]
    assert [(x["split"], x["commit"], x["n_images_read"]) for x in hub_sources] == [
        ("train", fakehub.COMMIT, 40),
        ("test", fakehub.COMMIT, 20),
    ]
    assert hub_sources[1]["files"][0]["sha256"] == file_sha256(repo / "plain_text" / "test-00000-of-00001.parquet")


# --------------------------------------------------------------------------------------------- reader


def test_the_readers_refuse_the_other_kind_and_damage(tmp_path, fake_digits):
    from helpers import write_random_corpus

    out = prepare_images(image_config_from_dict({"dataset": "digits"}), tmp_path / "digits")
    text = write_random_corpus(tmp_path / "text")
    assert is_image_set(out) and not is_image_set(text) and not is_image_set(tmp_path / "nothing")
    with pytest.raises(CorpusError, match="is a prepared image set .* not a text corpus"):
        load_corpus(out)
    with pytest.raises(CorpusError, match="is not a prepared image set"):
        load_images(text)
    np.save(out / "heldout_labels.npy", np.full(60, 10, dtype="<u2"))
    with pytest.raises(CorpusError, match="heldout_labels.npy: class ids outside 0..9"):
        load_images(out)
    np.save(out / "heldout_images.npy", np.zeros((60, 1, 4, 4), np.uint8))
    with pytest.raises(CorpusError, match=r"heldout_images.npy: expected uint8 images \[n, 1, 8, 8\]"):
        load_images(out)
    (out / "train_labels.npy").unlink()
    with pytest.raises(CorpusError, match="train_labels.npy is missing"):
        load_images(out)


# --------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"dataset": "mnist"}, "unknown `dataset`"),
        ({"dataset": "digits", "seeds": 1}, r"unknown key `seeds` \(did you mean `seed`\?\)"),
        ({"dataset": "digits", "hub": {"path": "x"}}, "`hub` is for the hub datasets"),
        ({"dataset": "digits", "channels": 3}, "digits are grayscale"),
        ({"dataset": "cifar10", "channels": 2}, "`channels` must be 1, 3 or null"),
        ({"dataset": "digits", "heldout_fraction": 1.0}, r"`heldout_fraction` must be in \[0, 1\)"),
        ({"dataset": "cifar10", "hub": {"n_images": 0}}, "`hub.n_images` must be >= 1 or null"),
        ({"dataset": "cifar10", "hub": {"revison": "x"}}, r"unknown key `hub.revison` \(did you mean `hub.revision`"),
        ({"dataset": "digits", "image_size": "8"}, "`image_size` must be null or an integer"),
    ],
)
def test_bad_image_configs_are_one_line(raw, message):
    with pytest.raises(CorpusError, match=message):
        image_config_from_dict(raw)


def test_the_schema_states_the_image_config():
    """config/schema.yaml's `images` entry: the ImageConfig keys (name: set to the key), the same enums,
    bounds and types as the validator."""
    assert set(IMAGES_SCHEMA) | {"name"} == {f.name for f in dataclasses.fields(icfg.ImageConfig)}
    hub = IMAGES_SCHEMA["hub"]["properties"]
    assert set(hub) == {f.name for f in dataclasses.fields(icfg.ImageHubConfig)}
    assert set(IMAGES_SCHEMA["dataset"]["enum"]) == set(icfg.IMAGE_DATASETS)
    assert set(IMAGES_SCHEMA["channels"]["enum"]) == {*icfg.CHANNELS, None}
    flat = {**IMAGES_SCHEMA, **{f"hub.{k}": v for k, v in hub.items()}}
    bounds = {k: {b: p[b] for b in ("minimum", "exclusiveMaximum") if b in p} for k, p in flat.items()}
    expected = {k: {"minimum": m} for k, m in icfg.IMAGE_MINIMUMS.items()}
    expected["heldout_fraction"]["exclusiveMaximum"] = 1
    assert {k: v for k, v in bounds.items() if v} == expected
    kinds = {**icfg.IMAGE_TYPES, **{f"hub.{k}": v for k, v in icfg.IMAGE_HUB_TYPES.items()}}
    json_type = {"str": "string", "int": "integer", "number": "number"}
    for key, prop in flat.items():
        if "type" in prop and prop["type"] != "object":
            types = set(prop["type"]) if isinstance(prop["type"], list) else {prop["type"]}
            kind = kinds[key]
            assert types - {"null"} == {json_type[kind.removeprefix("opt_")]}, key
            assert ("null" in types) <= kind.startswith("opt_"), key


def test_paper_config_image_entries():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    entries = cfg["images"]
    assert set(entries) == {"cifar10"}
    c = image_config_from_dict({**entries["cifar10"], "name": "cifar10"})
    assert c.hub.path == "uoft-cs/cifar10" and c.hub.heldout_split == "test" and c.hub.image_field == "img"
    assert len(c.hub.revision) == 40 and int(c.hub.revision, 16) >= 0  # a pinned commit, not a branch
