"""The tokenizer of a prepared corpus: a WordPiece vocabulary learned on the train split (deterministically,
`learn_wordpiece_vocab`), or a pretrained tokenizer loaded from a local file or from the files fetched from the
hub (data.hub_data; docs/data.md)."""

from __future__ import annotations

import heapq
import logging
import operator
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attention_geometry.data.corpus_config import TokenizerConfig, tokenizer_on_hub
from attention_geometry.formats.corpus import SPECIAL_TOKENS, CorpusError
from attention_geometry.formats.files import file_sha256

__all__ = ["learn_wordpiece_vocab", "train_wordpiece", "load_pretrained", "special_ids"]

log = logging.getLogger("attention_geometry.data")


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


def train_wordpiece(docs, idx: np.ndarray, tc: TokenizerConfig):
    """A BERT-style WordPiece tokenizer (BertNormalizer, BertPreTokenizer) whose vocabulary is learned on
    the documents idx (of `docs`, indexable by int: blocks.Documents) by learn_wordpiece_vocab."""
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
    tok = Tokenizer(
        models.WordPiece(
            {t: i for i, t in enumerate(vocab)},
            unk_token=SPECIAL_TOKENS["unk"],
            continuing_subword_prefix="##",
            max_input_chars_per_word=100,
        )
    )
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(SPECIAL_TOKENS.values()))
    cls, sep = tok.token_to_id(SPECIAL_TOKENS["cls"]), tok.token_to_id(SPECIAL_TOKENS["sep"])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok


def load_pretrained(tc: TokenizerConfig, fetched=None) -> tuple[Any, dict[str, Any]]:
    """(tokenizer, its manifest record) of a pretrained tokenizer: a local tokenizer.json (or a folder holding
    one), or a hub id's tokenizer.json from `fetched` (a data.hub_data.FetchedData), read offline."""
    from tokenizers import Tokenizer

    if tokenizer_on_hub(tc):
        if fetched is None:  # pragma: no cover - prepare_corpus fetches (or opens --hub-data) first
            raise CorpusError(f"`tokenizer.name` {tc.name!r}: a hub tokenizer needs its fetched files")
        (local,) = fetched.paths("tokenizer", "tokenizer")
        record = fetched.record("tokenizer", "tokenizer")
        info = {
            "hub_id": tc.name,
            "revision": tc.revision,
            "commit": record["commit"],
            "sha256": record["files"][0]["sha256"],
        }
    else:
        local = Path(tc.name).expanduser()
        if local.is_dir():
            local = local / "tokenizer.json"
        if not local.is_file():
            raise CorpusError(f"`tokenizer.name` {tc.name!r}: no tokenizer.json there")
        info = {"path": str(local), "sha256": file_sha256(local)}
    try:
        tok = Tokenizer.from_file(str(local))
    except Exception as exc:
        raise CorpusError(f"`tokenizer.name` {tc.name!r}: cannot read {local} ({exc})") from None
    tok.no_truncation()
    tok.no_padding()
    return tok, info


def special_ids(tok, where: str) -> dict[str, int]:
    ids = {}
    for role, token in SPECIAL_TOKENS.items():
        i = tok.token_to_id(token)
        if i is None:
            raise CorpusError(f"{where}: the tokenizer has no {token} token")
        ids[role] = int(i)
    return ids
