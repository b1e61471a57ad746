"""The prepared-corpus format (docs/data.md): the one reader, and the names and layout its writer
(`attention_geometry.data`, `attention-geometry prepare-corpus`) follows.

    DIR/manifest.json    sources with hashes, sizes, special-token ids, the resolved config, versions, and
                         files_sha256: the sha256 of the three files below
    DIR/train.npy        uint16 (vocab <= 65536) or int32 [n_train_blocks, block_len]
    DIR/heldout.npy      the same, held-out split (split by document)
    DIR/tokenizer.json   the `tokenizers` Tokenizer

Each block is [CLS] + block_len - 2 ids of the split's document stream (documents separated by [SEP]) +
[SEP]. Arrays are memory-mapped and never unpickled. The trainer, the update scores and the tests read a
corpus only through `load_corpus`. A corpus is identified by its content, not its path (`corpus_sha256`):
a run resumes on a byte-identical corpus moved elsewhere.

A prepared image set (the writer: `attention_geometry.data.images`, `attention-geometry prepare-images`) is
the same contract for images: a folder with a manifest (`kind: images`, the sources with their hashes, the
normalization, files_sha256) and arrays, read only through `load_images`, identified by `images_sha256`:

    DIR/manifest.json                          kind "images", image_size, num_channels, num_classes, ...
    DIR/train_images.npy, heldout_images.npy   uint8 [n, num_channels, image_size, image_size], 0..255
    DIR/train_labels.npy, heldout_labels.npy   uint16 [n], class ids 0..num_classes-1
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from attention_geometry.errors import UserError
from attention_geometry.formats.files import atomic_write_text, csv_text, file_sha256

__all__ = [
    "FORMAT_VERSION",
    "SPECIAL_TOKENS",
    "MANIFEST",
    "TOKENIZER",
    "SPLITS",
    "CorpusError",
    "Corpus",
    "block_dtype",
    "read_manifest",
    "write_manifest",
    "load_corpus",
    "CONTENT_FILES",
    "content_sha256",
    "corpus_sha256",
    "IMAGES_KIND",
    "IMAGE_FILES",
    "IMAGE_SPLIT_FILES",
    "ImageSet",
    "is_image_set",
    "load_images",
    "images_sha256",
]

FORMAT_VERSION = 1
# role -> token string; the order is also the id order of a trained WordPiece vocabulary (0..4)
SPECIAL_TOKENS: dict[str, str] = {
    "pad": "[PAD]",
    "unk": "[UNK]",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
SPLITS = ("train", "heldout")  # DIR/{split}.npy
CONTENT_FILES = ("train.npy", "heldout.npy", TOKENIZER)  # what a run reads; their sha256 identify the corpus
# the manifest fields every reader needs (a corpus written by prepare-corpus has all of them)
REQUIRED_FIELDS = ("dataset", "block_len", "vocab_size", "special_tokens")


class CorpusError(UserError):
    """A corpus config, input or prepared corpus that cannot be used (one line naming the key or path)."""


def block_dtype(vocab_size: int) -> np.dtype:
    """The dtype of the block arrays: little-endian uint16 when every id fits, else int32."""
    import numpy as np  # lazily: the workflow's parse reads corpus configs without numpy

    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<i4")


@dataclass
class Corpus:
    """A prepared corpus: the manifest and the train / held-out blocks ([n_blocks, block_len], read-only
    memory maps). The tokenizer is read from tokenizer.json when first asked for."""

    path: Path
    manifest: dict[str, Any]
    train: np.ndarray
    heldout: np.ndarray
    _tokenizer: Any = field(default=None, repr=False, compare=False)

    @property
    def block_len(self) -> int:
        return int(self.manifest["block_len"])

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @property
    def special_tokens(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.manifest["special_tokens"].items()}

    @property
    def dataset(self) -> str:
        """The corpus name (the `{dataset}` part of run names): the manifest's name, else its dataset kind."""
        return str(self.manifest.get("name") or self.manifest["dataset"])

    @property
    def tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer` of DIR/tokenizer.json."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            f = self.path / TOKENIZER
            if not f.is_file():
                raise CorpusError(f"{self.path}: {TOKENIZER} is missing")
            try:
                self._tokenizer = Tokenizer.from_file(str(f))
            except Exception as exc:
                raise CorpusError(f"{f}: not a readable tokenizer ({exc})") from None
        return self._tokenizer


def read_manifest(path: str | os.PathLike, key: str = "corpus") -> dict[str, Any]:
    """DIR/manifest.json as a dict; CorpusError (naming `key` and the file) when missing or not JSON."""
    p = Path(path)
    mf = p / MANIFEST
    if not mf.is_file():
        raise CorpusError(
            f"{key}: {p} is not a prepared corpus (no {MANIFEST}): run `attention-geometry prepare-corpus` first"
        )
    return read_json_object(mf, f"{key}: {mf}: unreadable manifest", f"{key}: {mf}: expected a JSON object")


def read_json_object(path: Path, unreadable: str, expected: str) -> dict:
    """The JSON object a UTF-8 file holds (a manifest, the packaged wiki_offline summaries); otherwise a
    CorpusError: `{unreadable} ({the error})` when the file cannot be read or parsed, `{expected}, got {type}`
    when it holds another JSON value."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{unreadable} ({exc})") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{expected}, got {type(data).__name__}")
    return data


def write_manifest(path: str | os.PathLike, manifest: dict[str, Any]) -> Path:
    """Write DIR/manifest.json (indented JSON; the folder is written under a temporary name and swapped in
    whole by the writer, so no atomic write is needed here)."""
    mf = Path(path) / MANIFEST
    mf.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return mf


def _check_version_and_fields(
    manifest: dict[str, Any], mf: Path, key: str, required: Iterable[str], what: str, command: str
) -> None:
    """What every prepared folder's manifest (a corpus's, an image set's) holds: this package's format_version
    (else: prepare `what` again with `command`) and each of the `required` fields."""
    version = manifest.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise CorpusError(
            f"{key}: {mf}: format_version {version!r}, this package reads {FORMAT_VERSION}: "
            f"prepare {what} again (`attention-geometry {command} --force`)"
        )
    for k in required:
        if k not in manifest:
            raise CorpusError(f"{key}: {mf}: field {k!r} is missing")


def _positive_int(manifest: dict[str, Any], k: str, mf: Path, key: str) -> int:
    v = manifest[k]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise CorpusError(f"{key}: {mf}: {k} must be a positive integer, got {v!r}")
    return v


def _check_manifest(manifest: dict[str, Any], mf: Path, key: str) -> None:
    if manifest.get("kind") == IMAGES_KIND:
        raise CorpusError(
            f"{key}: {mf.parent} is a prepared image set (prepare-images), not a text corpus: "
            "it trains with objective classifier"
        )
    _check_version_and_fields(manifest, mf, key, REQUIRED_FIELDS, "the corpus", "prepare-corpus")
    for k in ("block_len", "vocab_size"):
        _positive_int(manifest, k, mf, key)
    special = manifest["special_tokens"]
    if not isinstance(special, dict):
        raise CorpusError(f"{key}: {mf}: special_tokens must be a mapping role -> id, got {special!r}")
    for role in SPECIAL_TOKENS:
        v = special.get(role)
        if isinstance(v, bool) or not isinstance(v, int):
            raise CorpusError(f"{key}: {mf}: special_tokens.{role} must be an integer id, got {v!r}")


def _load_blocks(p: Path, split: str, manifest: dict[str, Any], key: str) -> np.ndarray:
    import numpy as np  # lazily: the workflow's parse reads corpus configs without numpy

    f = p / f"{split}.npy"
    if not f.is_file():
        raise CorpusError(f"{key}: {f} is missing")
    try:
        a = np.load(f, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorpusError(f"{key}: {f}: not a plain numpy array ({exc})") from None
    block_len = manifest["block_len"]
    if a.ndim != 2 or a.shape[1] != block_len or a.dtype.kind not in "iu":
        raise CorpusError(f"{key}: {f}: expected integer blocks [n, {block_len}], got {a.dtype} {a.shape}")
    n_key = f"n_{split}_blocks"
    if n_key in manifest and a.shape[0] != manifest[n_key]:
        raise CorpusError(f"{key}: {f}: shape {a.shape} does not match the manifest ({manifest[n_key]}, {block_len})")
    return a


def load_corpus(path: str | os.PathLike, key: str = "corpus") -> Corpus:
    """Open a corpus written by prepare-corpus. Anything missing or inconsistent (no folder, no or a bad
    manifest, a missing special token, a missing split, blocks of another width or count than the manifest
    says, an empty train split) raises one CorpusError line naming `key` and the file."""
    p = Path(path)
    if not p.is_dir():
        raise CorpusError(f"{key}: corpus directory not found: {p}")
    manifest = read_manifest(p, key)
    _check_manifest(manifest, p / MANIFEST, key)
    train, heldout = (_load_blocks(p, split, manifest, key) for split in SPLITS)
    if train.shape[0] == 0:
        raise CorpusError(f"{key}: {p / 'train.npy'} has no blocks (the corpus has no text)")
    return Corpus(p, manifest, train, heldout)


def content_sha256(path: str | os.PathLike, names: tuple[str, ...] = CONTENT_FILES) -> dict[str, str]:
    """file name -> sha256 of each of `names` present in DIR (the manifest's files_sha256; CONTENT_FILES for a
    corpus, IMAGE_FILES for an image set)."""
    p = Path(path)
    return {name: file_sha256(p / name) for name in names if (p / name).is_file()}


def corpus_sha256(corpus: Corpus) -> str:
    """The corpus's identity by content: the sha256 of its files' sha256 (the manifest's files_sha256,
    computed now for a corpus prepared before they were recorded) with block_len, vocab_size and the
    special-token ids. The same for a byte-identical copy anywhere; what a run's run.yaml records."""
    files = corpus.manifest.get("files_sha256")
    if not isinstance(files, dict) or not files:
        files = content_sha256(corpus.path)
    ident = {"files_sha256": files, **{k: corpus.manifest[k] for k in ("block_len", "vocab_size", "special_tokens")}}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode("utf-8")).hexdigest()


CORPUS_RECORD_COLUMNS = (
    "corpus",
    "manifest_sha256",
    "documents_sha256",
    "n_documents",
    "n_tokens",
    "n_train_blocks",
    "n_heldout_blocks",
    "block_len",
    "vocab_size",
)


def write_corpus_record(corpus_dir: str, corpus: str, out: str) -> None:
    """Rule record_corpus: the prepared corpus's manifest sha256 and counts (no machine paths) as one CSV row."""
    manifest = read_manifest(corpus_dir, corpus)
    row = {
        "corpus": corpus,
        "manifest_sha256": file_sha256(os.path.join(corpus_dir, MANIFEST)),
        **{k: manifest.get(k, "") for k in CORPUS_RECORD_COLUMNS[2:]},
    }
    atomic_write_text(out, csv_text([row], CORPUS_RECORD_COLUMNS))


# ------------------------------------------------------------------------------------------- image sets

IMAGES_KIND = "images"  # the manifest's `kind` of a prepared image set (a text corpus has no `kind`)
# split -> (images file, labels file); their sha256 identify the image set
IMAGE_SPLIT_FILES = {split: (f"{split}_images.npy", f"{split}_labels.npy") for split in SPLITS}
IMAGE_FILES = tuple(name for split in SPLITS for name in IMAGE_SPLIT_FILES[split])
# the manifest fields every reader of an image set needs (prepare-images writes all of them)
IMAGE_REQUIRED_FIELDS = ("dataset", "image_size", "num_channels", "num_classes", "class_names", "normalization")


@dataclass
class ImageSet:
    """A prepared image set: the manifest, the images (`train`, `heldout`: uint8 [n, C, H, W] memory maps,
    0..255) and their class ids (`train_labels`, `heldout_labels`: [n])."""

    path: Path
    manifest: dict[str, Any]
    train: np.ndarray
    train_labels: np.ndarray
    heldout: np.ndarray
    heldout_labels: np.ndarray

    @property
    def dataset(self) -> str:
        """The image set's name (the `{dataset}` part of run names): the manifest's name, else its dataset."""
        return str(self.manifest.get("name") or self.manifest["dataset"])

    @property
    def image_size(self) -> int:
        return int(self.manifest["image_size"])

    @property
    def num_channels(self) -> int:
        return int(self.manifest["num_channels"])

    @property
    def num_classes(self) -> int:
        return int(self.manifest["num_classes"])

    @property
    def class_names(self) -> list[str]:
        return [str(c) for c in self.manifest["class_names"]]

    @property
    def mean(self) -> list[float]:
        """Per-channel mean of the train images scaled to [0, 1] (what training subtracts)."""
        return [float(x) for x in self.manifest["normalization"]["mean"]]

    @property
    def std(self) -> list[float]:
        """Per-channel standard deviation of the train images scaled to [0, 1] (what training divides by)."""
        return [float(x) for x in self.manifest["normalization"]["std"]]


def is_image_set(path: str | os.PathLike) -> bool:
    """True when DIR's manifest says it is a prepared image set (False for a text corpus or no manifest)."""
    try:
        return read_manifest(path).get("kind") == IMAGES_KIND
    except CorpusError:
        return False


def _check_image_manifest(manifest: dict[str, Any], mf: Path, key: str) -> None:
    if manifest.get("kind") != IMAGES_KIND:
        raise CorpusError(
            f"{key}: {mf.parent} is not a prepared image set (its manifest has no `kind: {IMAGES_KIND}`): "
            "run `attention-geometry prepare-images` first"
        )
    _check_version_and_fields(manifest, mf, key, IMAGE_REQUIRED_FIELDS, "the image set", "prepare-images")
    for k in ("image_size", "num_channels", "num_classes"):
        _positive_int(manifest, k, mf, key)
    names = manifest["class_names"]
    if not isinstance(names, list) or len(names) != manifest["num_classes"]:
        raise CorpusError(f"{key}: {mf}: class_names must be a list of num_classes names, got {names!r}")
    norm = manifest["normalization"]
    for k in ("mean", "std"):
        v = norm.get(k) if isinstance(norm, dict) else None
        ok = isinstance(v, list) and len(v) == manifest["num_channels"]
        if not ok or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise CorpusError(f"{key}: {mf}: normalization.{k} must be one number per channel, got {v!r}")
        if k == "std" and not all(x > 0 for x in v):
            raise CorpusError(f"{key}: {mf}: normalization.std must be positive, got {v!r}")


def _load_array(f: Path, key: str) -> np.ndarray:
    import numpy as np  # lazily: the workflow's parse reads corpus configs without numpy

    if not f.is_file():
        raise CorpusError(f"{key}: {f} is missing")
    try:
        return np.load(f, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorpusError(f"{key}: {f}: not a plain numpy array ({exc})") from None


def _load_image_split(p: Path, split: str, manifest: dict[str, Any], key: str) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np  # lazily: the workflow's parse reads corpus configs without numpy

    fi, fl = (p / name for name in IMAGE_SPLIT_FILES[split])
    images, labels = _load_array(fi, key), _load_array(fl, key)
    shape = (manifest["num_channels"], manifest["image_size"], manifest["image_size"])
    if images.ndim != 4 or images.shape[1:] != shape or images.dtype != np.uint8:
        raise CorpusError(
            f"{key}: {fi}: expected uint8 images [n, {', '.join(map(str, shape))}], got {images.dtype} {images.shape}"
        )
    if labels.ndim != 1 or labels.shape[0] != images.shape[0] or labels.dtype.kind not in "iu":
        raise CorpusError(
            f"{key}: {fl}: expected {images.shape[0]} integer labels (one per image), got {labels.dtype} {labels.shape}"
        )
    n_key = f"n_{split}"
    if n_key in manifest and images.shape[0] != manifest[n_key]:
        raise CorpusError(f"{key}: {fi}: {images.shape[0]} images, the manifest says {manifest[n_key]}")
    if labels.shape[0] and (int(labels.min()) < 0 or int(labels.max()) >= manifest["num_classes"]):
        raise CorpusError(f"{key}: {fl}: class ids outside 0..{manifest['num_classes'] - 1}")
    return images, labels


def load_images(path: str | os.PathLike, key: str = "corpus") -> ImageSet:
    """Open an image set written by prepare-images. Anything missing or inconsistent (no folder, no or a bad
    manifest, a text corpus, a missing array, images of another shape or count than the manifest says,
    labels that are not class ids, an empty train split) raises one CorpusError line naming `key` and the
    file."""
    p = Path(path)
    if not p.is_dir():
        raise CorpusError(f"{key}: image set directory not found: {p}")
    manifest = read_manifest(p, key)
    _check_image_manifest(manifest, p / MANIFEST, key)
    train, train_labels = _load_image_split(p, "train", manifest, key)
    heldout, heldout_labels = _load_image_split(p, "heldout", manifest, key)
    if train.shape[0] == 0:
        raise CorpusError(f"{key}: {p / IMAGE_SPLIT_FILES['train'][0]} has no images")
    return ImageSet(p, manifest, train, train_labels, heldout, heldout_labels)


def images_sha256(images: ImageSet) -> str:
    """The image set's identity by content (as corpus_sha256 for a corpus): the sha256 of its arrays' sha256
    with the image shape, the classes and the normalization. What an image run's run.yaml records."""
    files = images.manifest.get("files_sha256")
    if not isinstance(files, dict) or not files:
        files = content_sha256(images.path, IMAGE_FILES)
    ident = {
        "files_sha256": files,
        **{
            k: images.manifest[k] for k in ("image_size", "num_channels", "num_classes", "class_names", "normalization")
        },
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode("utf-8")).hexdigest()
