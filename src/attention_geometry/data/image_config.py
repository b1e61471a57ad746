"""The image-set config (IMAGES.yaml, docs/data.md "Image sets"): its dataclasses, constants and the one
validator. The writer is attention_geometry.data.images (`attention-geometry prepare-images`); the format
attention_geometry.formats.corpus (`load_images`).

config/schema.yaml (`images`) states the same enums and bounds; tests/test_vision_data.py checks that it
agrees with the constants here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_geometry.data.hub_data import HUB_LOCATION_KINDS, NATIVE_PARQUET, HubInput, split_patterns
from attention_geometry.formats.corpus import CorpusError
from attention_geometry.formats.files import read_yaml
from attention_geometry.formats.value_kinds import check_minimums, checked_keys, checked_top

__all__ = [
    "IMAGE_DATASETS",
    "DIGITS_SIZE",
    "HUB_IMAGE_DATASETS",
    "CHANNELS",
    "IMAGE_MINIMUMS",
    "IMAGE_EXCLUSIVE_MAXIMUMS",
    "IMAGE_HUB_DEFAULTS",
    "IMAGE_TYPES",
    "IMAGE_HUB_TYPES",
    "ImageHubConfig",
    "ImageConfig",
    "image_config_from_dict",
    "load_image_config",
    "IMAGE_HUB_LAYOUTS",
    "hub_local_dir",
    "hub_inputs",
    "fetch_config",
]

# digits: scikit-learn's 8x8 handwritten digits (offline); the others: parquet files of a hub dataset
IMAGE_DATASETS = ("digits", "cifar10", "imagenet1k")
DIGITS_SIZE = 8  # the digits' side in pixels: the only image_size they have (null or 8)
HUB_IMAGE_DATASETS = ("cifar10", "imagenet1k")
CHANNELS = (1, 3)  # grayscale (PIL mode L) or RGB
# inclusive minimum of each numeric key (dotted: in `hub`); heldout_fraction also has an exclusive maximum
IMAGE_MINIMUMS: dict[str, int | float] = {
    "heldout_fraction": 0,
    "seed": 0,
    "image_size": 1,
    "hub.n_images": 1,
}
IMAGE_EXCLUSIVE_MAXIMUMS: dict[str, int | float] = {"heldout_fraction": 1}
IMAGE_OPTIONAL = ("image_size", "hub.n_images")  # may be null

# defaults of the hub datasets (a config may override each field)
IMAGE_HUB_DEFAULTS: dict[str, dict[str, Any]] = {
    "cifar10": {
        "path": "uoft-cs/cifar10",
        "name": "plain_text",
        "heldout_split": "test",
        "image_field": "img",
        "label_field": "label",
    },
    "imagenet1k": {
        "path": "ILSVRC/imagenet-1k",
        "heldout_split": "validation",
        "image_field": "image",
        "label_field": "label",
    },
}

# where a hub dataset keeps a split's parquet files when `hub.data_files` is null (data.hub_data): the
# push_to_hub layout, `{name}/{split}-NNNNN-of-NNNNN.parquet` (`data/...` without a config name)
IMAGE_HUB_LAYOUTS: dict[str, tuple[str, ...]] = {"cifar10": NATIVE_PARQUET, "imagenet1k": NATIVE_PARQUET}


@dataclass(frozen=True)
class ImageHubConfig:
    """The parquet files of hub dataset `path` (config `name`) at `revision` (`data_files`: a mapping split ->
    patterns, else IMAGE_HUB_LAYOUTS) for the train split (`split`) and the held-out split (`heldout_split`;
    null: a stratified `heldout_fraction` of `split`); `image_field` is the image column ({bytes, path}, decoded
    with PIL), `label_field` the class id column; at most `n_images` rows of each split are read (null: all).
    `path` may be a local folder of the dataset's files."""

    path: str | None = None
    name: str | None = None
    revision: str | None = None
    split: str = "train"
    heldout_split: str | None = None
    image_field: str | None = None
    label_field: str = "label"
    data_files: Any = None
    n_images: int | None = None


@dataclass(frozen=True)
class ImageConfig:
    """One image set. `heldout_fraction`: the stratified held-out share of each class (rounded half up),
    drawn with `seed`, where the source has no held-out split of its own (digits; a hub dataset without
    `hub.heldout_split`). `image_size`: null keeps the source's size (all images square and of one size);
    else each image is resized so its shorter side is image_size (PIL bicubic) and center-cropped (the digits
    are never resized: null or 8).
    `channels`: 1 (grayscale) or 3 (RGB); null: the source's (digits 1, hub datasets 3)."""

    dataset: str = "digits"
    name: str | None = None
    hub: ImageHubConfig = field(default_factory=ImageHubConfig)
    heldout_fraction: float = 0.2
    seed: int = 0
    image_size: int | None = None
    channels: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# the value kind of each key (attention_geometry.formats.value_kinds)
IMAGE_TYPES = {
    "dataset": "str",
    "name": "opt_str",
    "heldout_fraction": "number",
    "seed": "int",
    "image_size": "opt_int",
    "channels": "opt_int",
}
IMAGE_HUB_TYPES = {
    **HUB_LOCATION_KINDS,
    "heldout_split": "opt_str",
    "image_field": "opt_str",
    "label_field": "str",
    "n_images": "opt_int",
}


def image_config_from_dict(raw: Any, where: str = "image config") -> ImageConfig:
    """Validate a mapping (a parsed IMAGES.yaml or a workflow's params) into a resolved ImageConfig; any
    unknown key or value raises CorpusError naming it."""
    top, dataset = checked_top(raw, ImageConfig, IMAGE_TYPES, IMAGE_DATASETS, where, "image config", CorpusError)
    raw = dict(raw or {})
    hub_raw = checked_keys(raw.get("hub"), ImageHubConfig, IMAGE_HUB_TYPES, "hub.", where, "", CorpusError)
    if dataset == "digits" and hub_raw:
        raise CorpusError(f"{where}: `hub` is for the hub datasets ({', '.join(HUB_IMAGE_DATASETS)}), not digits")
    hub = {**IMAGE_HUB_DEFAULTS.get(dataset, {}), **hub_raw}
    channels = top.get("channels")
    if channels is not None and channels not in CHANNELS:
        raise CorpusError(f"{where}: `channels` must be 1, 3 or null, got {channels}")
    if dataset == "digits" and channels not in (None, 1):
        raise CorpusError(f"{where}: `channels`: digits are grayscale (1 channel), got {channels}")
    size = top.get("image_size")
    if dataset == "digits" and size is not None and size != DIGITS_SIZE:
        # the digits are kept as scikit-learn stores them (an exact map of its counts): never resampled
        raise CorpusError(
            f"{where}: `image_size`: the digits are {DIGITS_SIZE}x{DIGITS_SIZE} and are not resized; set "
            f"{DIGITS_SIZE} or null, got {size}"
        )
    top["heldout_fraction"] = float(top.get("heldout_fraction", ImageConfig.heldout_fraction))
    values = {**top, **{f"hub.{k}": v for k, v in hub.items()}}
    check_minimums(values, IMAGE_MINIMUMS, IMAGE_EXCLUSIVE_MAXIMUMS, IMAGE_OPTIONAL, where, CorpusError)
    if dataset in HUB_IMAGE_DATASETS and not hub.get("path"):
        raise CorpusError(f"{where}: `hub.path` is required for dataset {dataset!r}")
    if dataset in HUB_IMAGE_DATASETS and hub.get("label_field") == hub.get("image_field"):
        raise CorpusError(
            f"{where}: `hub.label_field` and `hub.image_field` name the same column {hub.get('label_field')!r}: "
            "the class ids and the images are two columns"
        )
    if top.get("name") is None:
        top["name"] = dataset
    return ImageConfig(**top, hub=ImageHubConfig(**hub))


def load_image_config(path: str | os.PathLike) -> ImageConfig:
    """Read IMAGES.yaml (keys: see ImageConfig); an empty file, a file that is not a mapping, unknown keys or
    values raise CorpusError naming them."""
    p = Path(path)
    raw = read_yaml(p, "image config", CorpusError)
    if not isinstance(raw, Mapping):
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise CorpusError(f"{p}: an image config is a mapping of keys (e.g. `dataset: digits`), got {got}")
    return image_config_from_dict(raw, where=str(p))


# ------------------------------------------------------------------------------------------- hub inputs


def hub_local_dir(cfg: ImageConfig) -> Path | None:
    """`hub.path` as a local folder of the dataset's files, where it is one (read in place, nothing fetched)."""
    p = Path(cfg.hub.path or "").expanduser()
    return p if cfg.hub.path and p.is_dir() else None


def _splits(cfg: ImageConfig) -> list[str]:
    return [cfg.hub.split] + ([cfg.hub.heldout_split] if cfg.hub.heldout_split is not None else [])


def split_files(cfg: ImageConfig) -> dict[str, list[list[str]]]:
    """split -> the alternative pattern lists of its parquet files (data.hub_data.split_patterns)."""
    where = f"image set {cfg.name!r}"
    layout = IMAGE_HUB_LAYOUTS[cfg.dataset]
    return {
        s: split_patterns(cfg.hub.data_files, s, cfg.hub.split, layout, cfg.hub.name, where, CorpusError)
        for s in _splits(cfg)
    }


def hub_inputs(cfg: ImageConfig) -> list[HubInput]:
    """What image set `cfg` reads from the hub: the parquet files of its train and held-out splits; [] for the
    digits and for a hub dataset whose `hub.path` is a local folder."""
    if cfg.dataset not in HUB_IMAGE_DATASETS or hub_local_dir(cfg) is not None:
        return []
    return [HubInput("dataset", cfg.hub.path, "dataset", cfg.hub.revision, split_files(cfg))]


def fetch_config(raw: Mapping) -> dict[str, Any] | None:
    """The part of image config `raw` that decides its hub inputs, itself a valid IMAGES.yaml with the same
    hub_inputs (what `attention-geometry fetch-hub-data` is given); None where it reads nothing from the hub or
    does not validate (prepare-images then says why)."""
    try:
        cfg = image_config_from_dict(raw)
        if not hub_inputs(cfg):
            return None
    except CorpusError:
        return None
    keys = ("path", "name", "revision", "split", "heldout_split", "data_files")
    return {"dataset": cfg.dataset, "hub": {k: getattr(cfg.hub, k) for k in keys}}
