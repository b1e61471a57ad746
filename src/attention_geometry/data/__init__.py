"""Corpora prepared once into tokenized fixed-length blocks (`attention-geometry prepare-corpus`,
docs/data.md). The format itself (the files, the manifest, the one reader) is attention_geometry.corpus.

    config.py     CorpusConfig (CORPUS.yaml) and its validator, the bounds config/schema.yaml repeats
    sources.py    one reader per dataset kind: wiki_offline, text_files, jigsaw, wikipedia, red_pajama
    wordpiece.py  the tokenizer: a deterministic WordPiece learner, or a pretrained tokenizer
    blocks.py     the cleaned-document cache, encoding, the block writer
    prepare.py    prepare_corpus (split, tokenize, write, swap in atomically) and the CLI
"""

from __future__ import annotations

from ..corpus import FORMAT_VERSION, SPECIAL_TOKENS, Corpus, CorpusError, load_corpus, read_manifest
from .config import (
    DATASETS,
    CorpusConfig,
    HubConfig,
    TokenizerConfig,
    corpus_config_from_dict,
    load_corpus_config,
)
from .prepare import add_arguments_prepare_corpus, corpus_status, prepare_corpus, run_prepare_corpus
from .sources import wiki_offline_path
from .wordpiece import learn_wordpiece_vocab

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
    "read_manifest",
    "wiki_offline_path",
    "learn_wordpiece_vocab",
    "add_arguments_prepare_corpus",
    "run_prepare_corpus",
]
