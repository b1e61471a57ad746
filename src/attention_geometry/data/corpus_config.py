"""The corpus config (CORPUS.yaml, docs/data.md): its dataclasses, constants and the one validator.

The workflow's schema (config/schema.yaml, `corpora`) states the same enums and bounds; tests/test_schema.py
checks that it agrees with the constants here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_geometry.data.hub_data import (
    CONVERTED_PARQUET,
    HUB_LOCATION_KINDS,
    NATIVE_PARQUET,
    HubInput,
    split_patterns,
)
from attention_geometry.formats.corpus import CorpusError
from attention_geometry.formats.files import read_yaml
from attention_geometry.formats.value_kinds import check_choice, check_minimums, checked_keys, checked_top

__all__ = [
    "DATASETS",
    "TOKENIZER_KINDS",
    "LAYOUTS",
    "ONE_DOCUMENT_PER",
    "MIN_BLOCK_LEN",
    "MIN_VOCAB_SIZE",
    "MINIMUMS",
    "EXCLUSIVE_MAXIMUMS",
    "HUB_DEFAULTS",
    "HUB_LAYOUTS",
    "TYPES",
    "TOKENIZER_TYPES",
    "HUB_TYPES",
    "TokenizerConfig",
    "HubConfig",
    "CorpusConfig",
    "corpus_config_from_dict",
    "load_corpus_config",
    "tokenizer_on_hub",
    "hub_inputs",
    "fetch_config",
]

DATASETS = ("wiki_offline", "wikitext2", "text_files", "wikipedia", "red_pajama", "jigsaw")
TOKENIZER_KINDS = ("wordpiece", "pretrained")
ONE_DOCUMENT_PER = ("file", "line")
# `packed`: one stream of documents cut into full blocks; `documents`: one row per document, [CLS] + its first
# block_len - 2 ids + [SEP], then [PAD] to block_len (the authors' `truncation=True, padding='max_length'`)
LAYOUTS = ("packed", "documents")
# the keys that came with the authors' recipe: left out of to_dict (and so of the manifest's config) at their
# defaults, so a packed corpus's manifest is what it was before they existed
RECIPE_KEYS = {"layout": "packed", "split_characters": False}
MIN_BLOCK_LEN = 8  # [CLS] + at least 6 ids + [SEP]
MIN_VOCAB_SIZE = 32  # a trained WordPiece vocabulary: the 5 special tokens and an alphabet
# the bounds of the numeric keys (dotted: a sub-mapping's key): the inclusive minimum, and for
# heldout_fraction an exclusive maximum (config/schema.yaml states the same: tests/test_schema.py)
MINIMUMS: dict[str, int | float] = {
    "block_len": MIN_BLOCK_LEN,
    "heldout_fraction": 0,
    "min_heldout_blocks": 0,
    "max_documents": 1,
    "max_bytes": 1,
    "tokenizer.vocab_size": MIN_VOCAB_SIZE,  # kind wordpiece only
    "tokenizer.min_frequency": 1,
    "tokenizer.limit_alphabet": 1,
    "hub.n_documents": 1,
    "seed": 0,  # numpy's generators take no negative seed
}
EXCLUSIVE_MAXIMUMS: dict[str, int | float] = {"heldout_fraction": 1}
OPTIONAL = ("max_documents", "max_bytes", "tokenizer.limit_alphabet", "hub.n_documents")  # may be null

# defaults of the hub datasets (a config may override each field). RedPajama-V2's own branch holds only a loading
# script, which datasets >= 4 no longer runs: its parquet files are the hub's conversion, `refs/convert/parquet`.
HUB_DEFAULTS: dict[str, dict[str, Any]] = {
    "wikipedia": {"path": "wikimedia/wikipedia", "name": "20231101.en", "text_field": "text"},
    "red_pajama": {
        "path": "togethercomputer/RedPajama-Data-V2",
        "name": "sample",
        "revision": "refs/convert/parquet",
        "streaming": True,
        "text_field": "raw_content",
    },
}
# where a hub dataset keeps a split's parquet files when `hub.data_files` is null (data.hub_data)
HUB_LAYOUTS: dict[str, tuple[str, ...]] = {"wikipedia": NATIVE_PARQUET, "red_pajama": CONVERTED_PARQUET}
HUB_DATASETS = tuple(HUB_LAYOUTS)


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
    """The parquet files of split `split` of hub dataset `path` (config `name`) at `revision`: `data_files`
    (patterns, or a mapping split -> patterns), else the dataset's layout (HUB_LAYOUTS); `text_field` is the
    column with the text; at most `n_documents` rows are read (None: all). `streaming` is recorded only (the
    files are always read row group by row group)."""

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
    layout: str = "packed"  # LAYOUTS
    # each document's characters joined by spaces before tokenizing (the authors' `" ".join(x)` over a
    # document string in their train.py for Wikipedia and RedPajama: BERT's tokenizer then sees single
    # characters, one token per non-space character)
    split_characters: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["paths"] = list(self.paths)
        d["suffixes"] = list(self.suffixes)
        for key, default in RECIPE_KEYS.items():
            if d[key] == default:
                del d[key]
        return d

    def recipe_keys(self) -> dict[str, Any]:
        """The recipe keys (layout, split_characters) away from their defaults: what the manifest records."""
        return {k: getattr(self, k) for k, default in RECIPE_KEYS.items() if getattr(self, k) != default}


def _str_list(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise CorpusError(f"{where}: `{key}` must be a path or a list of paths, got {value!r}")
    return tuple(value)


# the value kind of each key (attention_geometry.formats.value_kinds); paths and suffixes: a string or a list of them
TYPES = {
    "dataset": "str",
    "name": "opt_str",
    "one_document_per": "str",
    "text_column": "str",
    "block_len": "int",
    "heldout_fraction": "number",
    "min_heldout_blocks": "int",
    "max_documents": "opt_int",
    "max_bytes": "opt_int",
    "seed": "int",
    "layout": "str",
    "split_characters": "bool",
}
TOKENIZER_TYPES = {
    "kind": "str",
    "vocab_size": "int",
    "lowercase": "bool",
    "min_frequency": "int",
    "limit_alphabet": "opt_int",
    "name": "opt_str",
    "revision": "opt_str",
}
HUB_TYPES = {**HUB_LOCATION_KINDS, "streaming": "bool", "n_documents": "opt_int", "text_field": "opt_str"}


def corpus_config_from_dict(raw: Any, where: str = "corpus config") -> CorpusConfig:
    """Validate a mapping (a parsed CORPUS.yaml or a workflow's params) into a resolved CorpusConfig; any
    unknown key or value raises CorpusError naming it."""
    top, dataset = checked_top(raw, CorpusConfig, TYPES, DATASETS, where, "corpus config", CorpusError)
    raw = dict(raw or {})
    if "paths" in raw:
        top["paths"] = _str_list(raw["paths"], "paths", where)
    if "suffixes" in raw:
        top["suffixes"] = _str_list(raw["suffixes"], "suffixes", where)
    layout = top.get("layout", "packed")
    check_choice(layout, "layout", LAYOUTS, where, CorpusError)
    odp = top.get("one_document_per", "file")
    check_choice(odp, "one_document_per", ONE_DOCUMENT_PER, where, CorpusError)

    tok = checked_keys(raw.get("tokenizer"), TokenizerConfig, TOKENIZER_TYPES, "tokenizer.", where, "", CorpusError)
    kind = tok.get("kind", "wordpiece")
    check_choice(kind, "tokenizer.kind", TOKENIZER_KINDS, where, CorpusError)
    if kind == "pretrained" and not tok.get("name"):
        raise CorpusError(f"{where}: `tokenizer.name` is required for tokenizer.kind 'pretrained'")

    hub = dict(HUB_DEFAULTS.get(dataset, {}))
    hub.update(checked_keys(raw.get("hub"), HubConfig, HUB_TYPES, "hub.", where, "", CorpusError))
    top["heldout_fraction"] = float(top.get("heldout_fraction", CorpusConfig.heldout_fraction))
    values = {**top, **{f"tokenizer.{k}": v for k, v in tok.items()}, **{f"hub.{k}": v for k, v in hub.items()}}
    if kind != "wordpiece":
        values.pop("tokenizer.vocab_size", None)  # a pretrained tokenizer's vocabulary is its own
    check_minimums(values, MINIMUMS, EXCLUSIVE_MAXIMUMS, OPTIONAL, where, CorpusError)
    if dataset in ("text_files", "jigsaw") and not top.get("paths"):
        raise CorpusError(f"{where}: `paths` is required for dataset {dataset!r}")
    if top.get("name") is None:
        top["name"] = dataset
    return CorpusConfig(**top, hub=HubConfig(**hub), tokenizer=TokenizerConfig(**tok))


def load_corpus_config(path: str | os.PathLike) -> CorpusConfig:
    """Read CORPUS.yaml (keys: see CorpusConfig); an empty file, a file that is not a mapping, unknown keys or
    values raise CorpusError naming them."""
    p = Path(path)
    raw = read_yaml(p, "corpus config", CorpusError)
    if not isinstance(raw, Mapping):  # an empty file would otherwise be the default corpus, silently
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise CorpusError(f"{p}: a corpus config is a mapping of keys (e.g. `dataset: wiki_offline`), got {got}")
    return corpus_config_from_dict(raw, where=str(p))


# ------------------------------------------------------------------------------------------- hub inputs


def tokenizer_on_hub(tc: TokenizerConfig) -> bool:
    """Whether a tokenizer is read from the hub: kind pretrained and `name` neither an existing local file or
    folder nor a path (absolute, or starting with `.` or `~`), as wordpiece.load_pretrained decides."""
    if tc.kind != "pretrained" or not tc.name:
        return False
    if Path(tc.name).expanduser().exists() or Path(tc.name).is_absolute() or tc.name.startswith((".", "~")):
        return False
    return True


def hub_inputs(cfg: CorpusConfig) -> list[HubInput]:
    """What corpus `cfg` reads from the hub (data.hub_data): the parquet files of its split (wikipedia,
    red_pajama) and a pretrained tokenizer's tokenizer.json; [] for none (wiki_offline, text_files, jigsaw with
    a WordPiece or local tokenizer). A malformed `hub.data_files`: CorpusError naming it."""
    where = f"corpus {cfg.name!r}"
    out = []
    if cfg.dataset in HUB_DATASETS:
        hub = cfg.hub
        if not hub.path:
            raise CorpusError(f"{where}: `hub.path` is required for dataset {cfg.dataset!r}")
        layout = HUB_LAYOUTS[cfg.dataset]
        files = {hub.split: split_patterns(hub.data_files, hub.split, hub.split, layout, hub.name, where, CorpusError)}
        out.append(HubInput("dataset", hub.path, "dataset", hub.revision, files))
    if tokenizer_on_hub(cfg.tokenizer):
        out.append(
            HubInput(
                "tokenizer", cfg.tokenizer.name, "model", cfg.tokenizer.revision, {"tokenizer": [["tokenizer.json"]]}
            )
        )
    return out


def fetch_config(raw: Mapping) -> dict[str, Any] | None:
    """The part of corpus config `raw` (a mapping, as in the workflow's `corpora`) that decides its hub inputs,
    itself a valid CORPUS.yaml with the same hub_inputs: what `attention-geometry fetch-hub-data` is given, so
    that a change elsewhere in the corpus config (block_len, the tokenizer's vocabulary) fetches nothing again.
    None where the corpus reads nothing from the hub, or does not validate (prepare-corpus then says why)."""
    try:
        cfg = corpus_config_from_dict(raw)
        if not hub_inputs(cfg):
            return None
    except CorpusError:
        return None
    out: dict[str, Any] = {"dataset": cfg.dataset}
    if cfg.dataset in ("text_files", "jigsaw"):
        out["paths"] = list(cfg.paths)
    if cfg.dataset in HUB_DATASETS:
        out["hub"] = {k: getattr(cfg.hub, k) for k in ("path", "name", "revision", "split", "data_files")}
    if tokenizer_on_hub(cfg.tokenizer):
        out["tokenizer"] = {"kind": "pretrained", "name": cfg.tokenizer.name, "revision": cfg.tokenizer.revision}
    return out
