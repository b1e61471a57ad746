"""`prepare_images`: read an image dataset, split it (a fixed stratified held-out split where the source has
none of its own), and write it in the prepared image-set format (attention_geometry.formats.corpus,
`load_images`; docs/data.md "Image sets"), and the `prepare-images` CLI.

Sources: `digits` (scikit-learn's 8x8 handwritten digits, read offline from the file scikit-learn ships,
sklearn/datasets/data/digits.csv.gz, exactly as `sklearn.datasets.load_digits` reads it) and the hub datasets
`cifar10` / `imagenet1k` (their parquet files at a pinned revision, fetched from the hub by data.hub_data, or in
a local folder, read offline with datasets' parquet builder; the image column's encoded bytes are decoded with
PIL). Pixels are stored as uint8 0..255 [n, C, H, W]: the digits'
0..16 counts as round(v * 255 / 16) (an exact, invertible map). As for corpora, the prepare runs in
OUT.tmp-<pid> and is swapped in whole; the same config and inputs give byte-identical files; a local input
that changed since OUT was prepared stops it with one line (`--force` prepares it again).
"""

from __future__ import annotations

import argparse
import errno
import fnmatch
import gzip
import hashlib
import importlib.util
import io
import logging
import os
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from attention_geometry.data.hub_data import FetchedData, check_hub_data, fetch_now
from attention_geometry.data.image_config import (
    HUB_IMAGE_DATASETS,
    ImageConfig,
    hub_inputs,
    hub_local_dir,
    load_image_config,
    split_files,
)
from attention_geometry.data.prepare import (
    _versions,
    already_prepared,
    prepared_status,
    recorded_input_changes,
    refuse_replacing,
    start_prepare_cli,
    write_prepared,
)
from attention_geometry.data.sources import file_source
from attention_geometry.formats.corpus import (
    FORMAT_VERSION,
    IMAGE_FILES,
    IMAGE_SPLIT_FILES,
    IMAGES_KIND,
    CorpusError,
    content_sha256,
    read_manifest,
)
from attention_geometry.formats.files import check_out_location

__all__ = [
    "DIGITS_FILE",
    "digits_path",
    "read_digits",
    "class_ids",
    "stratified_split",
    "image_inputs",
    "image_input_changes",
    "images_status",
    "prepare_images",
    "run_prepare_images",
]

log = logging.getLogger("attention_geometry.data")

DIGITS_FILE = ("datasets", "data", "digits.csv.gz")  # inside the sklearn package
LABEL_DTYPE = np.dtype("<u2")  # class ids (ImageNet's 1000 fit)
DIGIT_NAMES = [str(c) for c in range(10)]


# ---------------------------------------------------------------------------------------------- digits


def digits_path() -> Path:
    """sklearn/datasets/data/digits.csv.gz of the installed scikit-learn, found without importing it."""
    spec = importlib.util.find_spec("sklearn")
    for loc in list(spec.submodule_search_locations or []) if spec is not None else []:
        p = Path(loc).joinpath(*DIGITS_FILE)
        if p.is_file():
            return p
    raise CorpusError(
        "dataset 'digits' needs scikit-learn (pip install scikit-learn): sklearn/datasets/data/digits.csv.gz not found"
    )


def read_digits(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, 1, 8, 8] 0..255, labels [n]) of a digits.csv.gz: one row per image, 64 pixel counts
    0..16 then the class, as `sklearn.datasets.load_digits` reads it (np.loadtxt, comma-separated)."""
    try:
        with gzip.open(path, "rt", encoding="ascii") as fh:
            data = np.loadtxt(fh, delimiter=",")
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: cannot read the digits ({exc})") from None
    if data.ndim != 2 or data.shape[1] != 65 or not np.array_equal(data, np.round(data)):
        raise CorpusError(f"{path}: expected rows of 64 pixel counts and a class, got shape {data.shape}")
    counts = data[:, :64].astype(np.int64)
    if counts.min() < 0 or counts.max() > 16:
        raise CorpusError(f"{path}: pixel counts outside 0..16")
    pixels = ((counts * 255 + 8) // 16).astype(np.uint8)  # round(v * 255 / 16), half up
    return pixels.reshape(-1, 1, 8, 8), class_ids(data[:, 64], DIGIT_NAMES, str(path))


def class_ids(labels, names: list[str] | None, where: str) -> np.ndarray:
    """`labels` as int64 class ids, checked before they are stored as LABEL_DTYPE (where a -1, the hub's mark
    of an unlabelled image, would wrap to 65535 and make a 65536-way classifier): every id in 0..N-1, N the
    number of class names where the source names its classes, else what LABEL_DTYPE holds."""
    try:
        ids = np.asarray(labels, dtype=np.int64)
        exact = np.array_equal(ids, np.asarray(labels, dtype=np.float64))
    except (TypeError, ValueError, OverflowError) as exc:
        raise CorpusError(f"{where}: the labels are not class ids ({type(exc).__name__}: {exc})") from None
    if ids.ndim != 1 or not exact:
        raise CorpusError(f"{where}: the labels are not whole numbers (one class id per image)")
    top = len(names) - 1 if names is not None else int(np.iinfo(LABEL_DTYPE).max)
    bad = np.flatnonzero((ids < 0) | (ids > top))
    if bad.size:
        i = int(bad[0])
        unlabelled = " (-1 marks an unlabelled image: read a labelled split)" if ids[i] == -1 else ""
        raise CorpusError(
            f"{where}: row {i} has class id {int(ids[i])}, outside 0..{top}{unlabelled}; {bad.size} row(s) in all"
        )
    return ids


# ---------------------------------------------------------------------------------------------- split


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, held-out indices), each sorted: of every class c (in increasing order), the first
    round_half_up(fraction * n_c) of its indices in the order of `default_rng([seed, c]).permutation(n_c)` are
    held out, at least one where fraction > 0 and at most n_c - 1. A function of the labels and the seed
    only: the same split on every machine."""
    labels = np.asarray(labels)
    held = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        k = int(np.floor(fraction * len(idx) + 0.5))
        if fraction > 0:
            k = max(k, 1)
        k = min(k, len(idx) - 1)
        held.append(idx[np.random.default_rng([seed, int(c)]).permutation(len(idx))[:k]])
    heldout = np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)
    mask = np.ones(len(labels), dtype=bool)
    mask[heldout] = False
    return np.flatnonzero(mask), heldout


# ------------------------------------------------------------------------------------------------- hub


def _to_array(data: bytes, cfg: ImageConfig, mode: str, where: str) -> np.ndarray:
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(data))
        img = img.convert(mode)
    except Exception as exc:  # PIL raises many kinds on a damaged image
        raise CorpusError(f"{where}: an image cannot be decoded ({type(exc).__name__}: {exc})") from None
    if cfg.image_size is not None and img.size != (cfg.image_size, cfg.image_size):
        w, h = img.size
        scale = cfg.image_size / min(w, h)
        img = img.resize((max(cfg.image_size, round(w * scale)), max(cfg.image_size, round(h * scale))), Image.BICUBIC)
        w, h = img.size
        left, top = (w - cfg.image_size) // 2, (h - cfg.image_size) // 2
        img = img.crop((left, top, left + cfg.image_size, top + cfg.image_size))
    a = np.asarray(img, dtype=np.uint8)
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def _split_paths(cfg: ImageConfig, split: str, fetched: FetchedData | None) -> tuple[list[Path], dict[str, Any]]:
    """The parquet files of one split, and what the manifest records of where they came from: from the fetched
    hub data (its commit and files), or matched in the local folder `hub.path`."""
    if fetched is not None:
        return fetched.paths("dataset", split), fetched.record("dataset", split)
    local = hub_local_dir(cfg)
    assert local is not None  # prepare_images fetches a hub id's files first
    names = [p.relative_to(local).as_posix() for p in image_inputs(cfg)]
    for alternative in split_files(cfg)[split]:
        found = sorted(n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in alternative))
        if found:
            return [local / n for n in found], {}
    tried = " or ".join(", ".join(a) for a in split_files(cfg)[split])
    raise CorpusError(f"{local}: no file matches {tried} (split {split}; set `hub.data_files`)")


def _disk_full(exc: BaseException) -> str | None:
    """The strerror of a full disk or quota anywhere in `exc`'s chain (datasets wraps the OSError of a write in
    its own error), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc.strerror or os.strerror(exc.errno)
        exc = exc.__cause__ or exc.__context__
    return None


def _feature_kind(feature: Any) -> str:
    dtype = getattr(feature, "dtype", None)
    return f"{type(feature).__name__} ({dtype})" if isinstance(dtype, str) else type(feature).__name__


def _read_hub_split(
    cfg: ImageConfig, split: str, tmp: Path, out_images: Path, fetched: FetchedData | None
) -> dict[str, Any]:
    """Read one split of a hub dataset (its parquet files, fetched or in a local folder, read offline) into
    OUT_IMAGES (.npy, uint8 [n, C, H, W]); returns its labels, class names and source record."""
    from datasets import ClassLabel, Value, load_dataset
    from datasets import Image as ImageFeature

    hub = cfg.hub
    where = f"{hub.path} (split {split})"
    if not hub.revision and fetched is not None:
        log.warning("%s: no revision pinned; the dataset may change under the same config", hub.path)
    files, origin = _split_paths(cfg, split, fetched)
    try:  # the packaged parquet builder on local files (its cache lives and dies with the temporary folder)
        ds = load_dataset(
            "parquet", data_files={"train": [str(p) for p in files]}, split="train", cache_dir=str(tmp / "hf-cache")
        )
    except Exception as exc:  # datasets raises many kinds (a damaged file, files of different columns)
        if (full := _disk_full(exc)) is not None:  # its cache, written into the temporary folder
            raise CorpusError(f"{where}: cannot write the dataset's cache in {tmp} ({full})") from None
        raise CorpusError(f"{where}: cannot read the parquet files ({type(exc).__name__}: {exc})") from None
    for col in (hub.image_field, hub.label_field):
        if col not in ds.column_names:
            raise CorpusError(f"{where}: no column {col!r} (columns: {', '.join(ds.column_names)})")
    if hub.n_images is not None and len(ds) > hub.n_images:
        ds = ds.select(range(hub.n_images))
    feature = ds.features[hub.label_field]
    names = list(feature.names) if isinstance(feature, ClassLabel) else None
    if names is None and not (isinstance(feature, Value) and feature.dtype.startswith(("int", "uint"))):
        raise CorpusError(
            f"{where}: `hub.label_field` {hub.label_field!r} is a column of {_feature_kind(feature)}, not class ids "
            "(integers)"
        )
    labels = class_ids(ds[hub.label_field], names, where)
    ds = ds.select_columns([hub.image_field]).cast_column(hub.image_field, ImageFeature(decode=False))
    mode = "L" if (cfg.channels or 3) == 1 else "RGB"
    h = hashlib.sha256()
    images = None
    n = len(ds)
    from tqdm.auto import tqdm

    with tqdm(total=n, desc=f"decoding {split}", unit="img") as bar:
        i = 0
        for batch in ds.iter(batch_size=1000):
            for cell in batch[hub.image_field]:
                data = cell.get("bytes") if isinstance(cell, dict) else None
                if data is None and isinstance(cell, dict) and cell.get("path"):
                    data = Path(cell["path"]).read_bytes()
                if data is None:
                    raise CorpusError(f"{where}: row {i} has no image bytes")
                h.update(len(data).to_bytes(8, "little") + data)
                a = _to_array(data, cfg, mode, where)
                if images is None:
                    if a.shape[1] != a.shape[2]:
                        raise CorpusError(
                            f"{where}: images of {a.shape[2]}x{a.shape[1]} are not square: set image_size"
                        )
                    images = np.lib.format.open_memmap(out_images, mode="w+", dtype=np.uint8, shape=(n, *a.shape))
                elif a.shape != images.shape[1:]:
                    raise CorpusError(
                        f"{where}: row {i} is {a.shape[2]}x{a.shape[1]}, earlier rows {images.shape[3]}x"
                        f"{images.shape[2]}: set image_size"
                    )
                images[i] = a
                i += 1
            bar.update(len(batch[hub.image_field]))
    if images is None:
        raise CorpusError(f"{where}: no images")
    images.flush()
    del images
    h.update(labels.astype("<i8").tobytes())
    source = {
        "hub_id": hub.path,
        "name": hub.name,
        "revision": hub.revision,
        **({"commit": origin["commit"]} if origin else {}),
        "split": split,
        "data_files": hub.data_files,
        **({"files": origin["files"]} if origin else {}),
        "n_images_read": n,
        "sha256": h.hexdigest(),
    }
    return {"labels": labels, "names": names, "source": source}


# --------------------------------------------------------------------------------------------- inputs


def image_inputs(cfg: ImageConfig) -> list[Path]:
    """The local files an image set is read from (hashed into the manifest's `sources` and compared when it
    is prepared again): digits' file; a hub dataset's files when `hub.path` is a local folder (every file
    under it but hidden ones, sorted); nothing for a hub id (its revision pins it)."""
    if cfg.dataset == "digits":
        return [digits_path()]
    local = hub_local_dir(cfg)
    if local is None:
        return []
    return sorted(
        p
        for p in local.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(local).parts)
    )


def image_input_changes(cfg: ImageConfig, manifest: dict[str, Any]) -> str | None:
    """None when the local files image set `cfg` reads are those its manifest's `sources` record, with the
    same sha256; else what changed, in words. The digits file is compared by content only (its path moves
    with the environment)."""
    try:
        current = image_inputs(cfg)
    except CorpusError as exc:
        return str(exc)
    return recorded_input_changes(manifest, current, same_paths=cfg.dataset != "digits", new_inputs=True)


def images_status(cfg: ImageConfig, out: str | os.PathLike) -> str:
    """ "missing" (no OUT), "current" (OUT holds this config prepared from the same inputs), "changed" (this
    config, but inputs that changed since: image_input_changes), "different" (another config or not an
    image set)."""
    return prepared_status(out, cfg.to_dict(), partial(image_input_changes, cfg), IMAGES_KIND)


# -------------------------------------------------------------------------------------------- prepare


def prepare_images(
    cfg: ImageConfig, out: str | os.PathLike, force: bool = False, hub_data: str | os.PathLike | None = None
) -> Path:
    """Read, split and write image set `cfg` to OUT (docs/data.md "Image sets"). Nothing is done when OUT
    already holds this config prepared from the same inputs; another image set at OUT, or inputs changed
    since (images_status), is an error unless force. A hub dataset's files come from `hub_data`, a folder
    fetched by `fetch-hub-data` for this config, read offline; without it, they are fetched now into the
    temporary folder."""
    out = Path(out)
    # never the current folder or one holding it, nor inside the sources
    check_out_location(out, [p for p in (hub_local_dir(cfg), hub_data) if p is not None])
    fetched = check_hub_data(hub_inputs(cfg), hub_data, "images")  # a wrong folder stops here
    status = images_status(cfg, out)
    if status == "current":
        log.info("%s already holds this image set: nothing to do", out)
        return out
    changes = partial(image_input_changes, cfg)
    refuse_replacing(out, status, force, changes, "image set config (or no image manifest)", "data")
    t0 = time.perf_counter()
    if fetched is not None:
        fetched.verify()  # a missing or changed file stops before any work
    manifest = write_prepared(out, lambda tmp: _prepare_into(cfg, tmp, fetched))
    log.info(
        "image set %s (%s) -> %s: %d train + %d held-out images of %dx%dx%d, %d classes (%.1f s)",
        cfg.name,
        cfg.dataset,
        out,
        manifest["n_train"],
        manifest["n_heldout"],
        manifest["num_channels"],
        manifest["image_size"],
        manifest["image_size"],
        manifest["num_classes"],
        time.perf_counter() - t0,
    )
    return out


def _save(path: Path, a: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(a), allow_pickle=False)


def _split_in_place(tmp: Path, images_file: Path, labels: np.ndarray, cfg: ImageConfig) -> None:
    """Write the stratified train / held-out split of one source split (images in IMAGES_FILE, removed)."""
    train_idx, held_idx = stratified_split(labels, cfg.heldout_fraction, cfg.seed)
    images = np.load(images_file, mmap_mode="r", allow_pickle=False)
    for split, idx in (("train", train_idx), ("heldout", held_idx)):
        fi, fl = IMAGE_SPLIT_FILES[split]
        _save(tmp / fi, images[idx])
        _save(tmp / fl, labels[idx].astype(LABEL_DTYPE))
    del images
    images_file.unlink()


def _prepare_into(cfg: ImageConfig, tmp: Path, fetched: FetchedData | None = None) -> dict[str, Any]:
    where = f"image set {cfg.name!r} (dataset {cfg.dataset})"
    sources: list[dict[str, Any]] = []
    names: list[str] | None
    if cfg.dataset == "digits":
        path = digits_path()
        sources.append({**file_source(path), "reader": "sklearn.datasets.load_digits's digits.csv.gz"})
        images, labels = read_digits(path)
        names = list(DIGIT_NAMES)
        _save(tmp / "source_images.npy", images)
        _split_in_place(tmp, tmp / "source_images.npy", labels, cfg)
        split = {"kind": "stratified", "heldout_fraction": cfg.heldout_fraction, "seed": cfg.seed}
    elif cfg.dataset in HUB_IMAGE_DATASETS:
        if fetched is None and hub_inputs(cfg):
            fetched = fetch_now(hub_inputs(cfg), tmp / "hub-data", "images")
        sources.extend(file_source(p) for p in image_inputs(cfg))
        train = _read_hub_split(cfg, cfg.hub.split, tmp, tmp / "source_images.npy", fetched)
        names = train["names"]
        sources.append(train["source"])
        if cfg.hub.heldout_split is None:
            labels = train["labels"]
            _split_in_place(tmp, tmp / "source_images.npy", labels, cfg)
            split = {"kind": "stratified", "heldout_fraction": cfg.heldout_fraction, "seed": cfg.seed}
        else:
            fi, fl = IMAGE_SPLIT_FILES["train"]
            os.replace(tmp / "source_images.npy", tmp / fi)
            _save(tmp / fl, train["labels"].astype(LABEL_DTYPE))
            held = _read_hub_split(cfg, cfg.hub.heldout_split, tmp, tmp / IMAGE_SPLIT_FILES["heldout"][0], fetched)
            if held["names"] != names:
                raise CorpusError(f"{where}: splits {cfg.hub.split} and {cfg.hub.heldout_split} name other classes")
            _save(tmp / IMAGE_SPLIT_FILES["heldout"][1], held["labels"].astype(LABEL_DTYPE))
            sources.append(held["source"])
            split = {"kind": "source", "train": cfg.hub.split, "heldout": cfg.hub.heldout_split}
    else:  # pragma: no cover - the config validator admits only the datasets above
        raise CorpusError(f"{where}: unknown dataset")
    shutil.rmtree(tmp / "hf-cache", ignore_errors=True)
    shutil.rmtree(tmp / "hub-data", ignore_errors=True)
    return _manifest(cfg, tmp, names, sources, split, where)


def _manifest(cfg: ImageConfig, tmp: Path, names, sources, split, where: str) -> dict[str, Any]:
    arrays = {name: np.load(tmp / name, mmap_mode="r", allow_pickle=False) for name in IMAGE_FILES}
    train, train_labels = (arrays[n] for n in IMAGE_SPLIT_FILES["train"])
    heldout_labels = arrays[IMAGE_SPLIT_FILES["heldout"][1]]
    all_labels = np.concatenate([np.asarray(train_labels), np.asarray(heldout_labels)])
    if train.shape[0] == 0:
        raise CorpusError(f"{where}: the train split has no images")
    num_classes = len(names) if names is not None else int(all_labels.max()) + 1
    if names is None:
        names = [str(c) for c in range(num_classes)]
    if int(all_labels.min()) < 0 or int(all_labels.max()) >= num_classes:
        raise CorpusError(f"{where}: class ids outside 0..{num_classes - 1}")
    present = np.unique(np.asarray(train_labels))
    if present.size < 2:
        # a classifier of one class has nothing to learn: loss 0 and accuracy 1 from the first update
        raise CorpusError(
            f"{where}: every train image is of class {names[int(present[0])]!r} ({num_classes} class(es) named): "
            "a classifier needs at least two classes"
        )
    # per-channel mean and std of the train images scaled to [0, 1], in float64, channel by channel
    mean, std = [], []
    for c in range(train.shape[1]):
        x = np.asarray(train[:, c], dtype=np.float64) / 255.0
        mean.append(round(float(x.mean()), 6))
        std.append(round(float(x.std()), 6))
    if not all(s > 0 for s in std):
        raise CorpusError(f"{where}: a channel has the same value in every train image (std 0)")

    def counts(labels):
        return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).tolist()

    manifest = {
        "format_version": FORMAT_VERSION,
        "kind": IMAGES_KIND,
        "dataset": cfg.dataset,
        "name": cfg.name,
        "image_size": int(train.shape[2]),
        "num_channels": int(train.shape[1]),
        "num_classes": num_classes,
        "class_names": names,
        "dtype": "uint8",
        "normalization": {"mean": mean, "std": std, "pixel_scale": "1/255"},
        "n_train": int(train.shape[0]),
        "n_heldout": int(heldout_labels.shape[0]),
        "train_class_counts": counts(train_labels),
        "heldout_class_counts": counts(heldout_labels),
        "split": split,
        "files_sha256": content_sha256(tmp, IMAGE_FILES),
        "sources": sources,
        "config": cfg.to_dict(),
        "versions": _versions(["datasets", "pillow"] if cfg.dataset in HUB_IMAGE_DATASETS else []),
    }
    del arrays, train, train_labels, heldout_labels
    return manifest


# ----------------------------------------------------------------------------------------------- CLI


def run_prepare_images(args: argparse.Namespace) -> int:
    start_prepare_cli(args)
    cfg = load_image_config(args.config)
    # never the config itself, nor the --hub-data folder (prepare_images checks the data it reads)
    check_out_location(args.out, [args.config, *([args.hub_data] if args.hub_data is not None else [])])
    if already_prepared(args, images_status(cfg, args.out), hub_inputs(cfg), "images", "image set"):
        return 0
    out = prepare_images(cfg, args.out, force=args.force, hub_data=args.hub_data)
    m = read_manifest(out)
    print(
        f"{out}: {m['n_train']} train + {m['n_heldout']} held-out images of {m['num_channels']}x{m['image_size']}x"
        f"{m['image_size']}, {m['num_classes']} classes"
    )
    return 0
