"""Hub inputs of corpora (attention_geometry.data.hub_data, `attention-geometry fetch-hub-data`, prepare-corpus
--hub-data), against tests/fakehub.py serving tiny parquet datasets in the hub's layouts and a tiny tokenizer:
the fetch downloads exactly the files a config reads and nothing the second time, its manifest's hashes are the
files' own; a prepare from the fetched folder, with the hub offline, equals the same documents prepared from
local files and a hand-tokenized stream; a RedPajama-shaped stand-in (the hub's parquet conversion,
`sample/partial-train/`, column raw_content, revision refs/convert/parquet) prepares; a missing or changed
fetched file, a folder fetched for another config and an offline hub without a fetch are one error line each;
and the workflow wiring (fetch rules for hub inputs only, local rules, the prepare rules' --hub-data)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
from pathlib import Path

import fakehub
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import REPO, SNAKEMAKE, cli_in_process, env, job_counts, job_files, local_rules, run_cli, snakemake

from attention_geometry.data.corpus_config import corpus_config_from_dict, fetch_config, hub_inputs
from attention_geometry.data.hub_data import MANIFEST, fetch_hub_data
from attention_geometry.data.image_config import fetch_config as image_fetch_config
from attention_geometry.data.image_config import hub_inputs as image_hub_inputs
from attention_geometry.data.image_config import image_config_from_dict
from attention_geometry.data.prepare import prepare_corpus
from attention_geometry.errors import UserError
from attention_geometry.formats.corpus import load_corpus

WIKI, RP, TOK = "org/wiki", "org/rp", "org/tiny-bert"
PARQUET_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
WORDS = (
    "the of and a to in is was for on that by with as at from it an were are which this be or has had first one "
    "their new after who they two she been other when there all during into school time may years more most only "
    "over city some world would where later up such used many can state river music album band song church"
).split()


# ------------------------------------------------------------------------------------------- stand-ins


def make_docs(n: int, seed: int = 0) -> list[str]:
    """n distinct documents of lower-case words from WORDS (each starts with its own number)."""
    rng = np.random.default_rng(seed)
    return [
        f"{i} " + " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), int(rng.integers(8, 30)))) for i in range(n)
    ]


def write_parquet(path: Path, columns: dict[str, list]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=7)  # several row groups per file
    return path


def tiny_tokenizer(folder: Path) -> Path:
    """A BERT-like WordPiece tokenizer over WORDS and the digits (the five special tokens first), saved as the
    model repository's tokenizer.json beside files a tokenizer does not need (config.json, vocab.txt)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *list("0123456789"), *[f"##{d}" for d in "0123456789"]]
    vocab += WORDS
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "vocab.txt").write_text("\n".join(vocab))
    return folder


def wiki_repo(root: Path, docs: list[str]) -> Path:
    """wikimedia/wikipedia's layout: {config}/train-NNNNN-of-NNNNN.parquet (columns id, url, title, text), a
    second language that is not read, and a README."""
    half = len(docs) // 2
    for i, part in enumerate((docs[:half], docs[half:])):
        write_parquet(
            root / "20231101.en" / f"train-{i:05d}-of-00002.parquet",
            {
                "id": [str(j) for j in range(len(part))],
                "url": ["u"] * len(part),
                "title": ["t"] * len(part),
                "text": part,
            },
        )
    write_parquet(root / "20231101.de" / "train-00000-of-00001.parquet", {"id": ["0"], "text": ["ein Dokument"]})
    (root / "README.md").write_text("---\nconfigs: []\n---\n")
    return root


def red_pajama_repo(root: Path, docs: list[str]) -> Path:
    """RedPajama-V2's parquet conversion (refs/convert/parquet): {config}/partial-train/NNNN.parquet with its
    columns raw_content, doc_id, meta, quality_signals; another config beside it."""
    for i, part in enumerate((docs[:20], docs[20:])):
        write_parquet(
            root / "sample" / "partial-train" / f"{i:04d}.parquet",
            {
                "raw_content": part,
                "doc_id": [f"d{j}" for j in range(len(part))],
                "meta": ['{"lang": "en"}'] * len(part),
                "quality_signals": ['{"ccnet_perplexity": [[0, 1, 300.0]]}'] * len(part),
            },
        )
    write_parquet(root / "default" / "partial-train" / "0000.parquet", {"raw_content": ["other config"]})
    return root


@pytest.fixture
def online(monkeypatch, tmp_path):
    """huggingface_hub pointed at a local endpoint, online, with an empty cache, in this process (its constants
    are read at import, so they are set here rather than through HF_ENDPOINT / HF_HUB_OFFLINE); the variables a
    prepare with --hub-data sets are restored afterwards."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    return fakehub.point_hub(monkeypatch, tmp_path / "hub-cache")


def online_env(url: str, tmp_path: Path) -> dict:
    """A subprocess's environment: huggingface_hub online at the stand-in, with its own empty cache."""
    return {"HF_ENDPOINT": url, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": ""}


def wiki_config(**kw) -> dict:
    return {
        "dataset": "wikipedia",
        "hub": {"path": WIKI, "revision": "main"},
        "tokenizer": {"kind": "pretrained", "name": TOK, "revision": "main"},
        "block_len": 16,
        "heldout_fraction": 0.1,
        **kw,
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def served(tmp_path: Path, docs: list[str]) -> dict[str, Path]:
    return {
        f"datasets/{WIKI}": wiki_repo(tmp_path / "wiki", docs),
        f"datasets/{RP}": red_pajama_repo(tmp_path / "rp", docs),
        TOK: tiny_tokenizer(tmp_path / "tok"),
    }


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for n in needles:
        assert n in err, (n, err)


# ------------------------------------------------------------------------------------------------ fetch


def test_fetch_downloads_exactly_the_files_it_reads_and_nothing_the_second_time(tmp_path):
    docs = make_docs(40)
    repos = served(tmp_path, docs)
    (tmp_path / "wiki.yaml").write_text(yaml.safe_dump(wiki_config()))
    out = tmp_path / "fetched"
    with fakehub.serve(repos) as (hub, url):
        r = run_cli("fetch-hub-data", "--config", tmp_path / "wiki.yaml", "--out", out, env=online_env(url, tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        first = sorted(hub.downloads())
        manifest_bytes = (out / MANIFEST).read_bytes()
        again = run_cli(
            "fetch-hub-data", "--config", tmp_path / "wiki.yaml", "--out", out, env=online_env(url, tmp_path)
        )
        assert again.returncode == 0, again.stderr[-3000:]
        second = sorted(hub.downloads())
    parquet = [f"20231101.en/train-0000{i}-of-00002.parquet" for i in (0, 1)]
    # exactly the split's files and the tokenizer.json, each once: not the other language, README, config, vocab
    assert first == sorted([f"datasets/{WIKI}/{p}" for p in parquet] + [f"{TOK}/tokenizer.json"])
    assert second == first  # the second call downloads nothing
    assert (out / MANIFEST).read_bytes() == manifest_bytes
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and ".cache" not in p.parts)
    assert on_disk == sorted([MANIFEST, "tokenizer/tokenizer.json", *(f"dataset/{p}" for p in parquet)])
    m = json.loads(manifest_bytes)
    data, tok = m["repos"]
    assert (data["repo_id"], data["repo_type"], data["revision"], data["commit"]) == (
        WIKI,
        "dataset",
        "main",
        fakehub.COMMIT,
    )
    assert data["parts"] == {"train": parquet}
    for f in data["files"]:  # the manifest's hashes are those of the hub's files (LFS: its sha256 is the hub id)
        src = repos[f"datasets/{WIKI}"] / f["path"]
        assert f == {"path": f["path"], "bytes": src.stat().st_size, "sha256": sha256(src), "hub_oid": sha256(src)}
        assert (out / "dataset" / f["path"]).read_bytes() == src.read_bytes()
    raw = (repos[TOK] / "tokenizer.json").read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()  # a regular file: the hub lists its git blob id
    assert (tok["repo_id"], tok["repo_type"], tok["commit"]) == (TOK, "model", fakehub.COMMIT)
    assert tok["files"] == [
        {"path": "tokenizer.json", "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(), "hub_oid": blob}
    ]
    assert "2 files" in r.stdout and "1 files" in r.stdout


def test_fetch_errors_are_one_line(tmp_path, online):
    docs = make_docs(40)
    repos = served(tmp_path, docs)
    with fakehub.serve(repos) as (hub, url):
        online(url)
        hub.refs = {"main": fakehub.COMMIT}
        for raw, needle in [
            (wiki_config(hub={"path": WIKI, "revision": "v9"}), "RevisionNotFound"),
            (wiki_config(hub={"path": "org/nope", "revision": "main"}), "RepositoryNotFound"),
            (
                wiki_config(hub={"path": WIKI, "revision": "main", "name": "20231101.fr"}),
                "no file matches 20231101.fr/train-*.parquet",
            ),
        ]:
            with pytest.raises(UserError, match=re.escape(needle)) as e:
                fetch_hub_data(hub_inputs(corpus_config_from_dict(raw)), tmp_path / "f")
            assert "\n" not in str(e.value)
    # nothing to fetch, and a folder that holds other files: refused before any download
    (tmp_path / "offline.yaml").write_text(yaml.safe_dump({"dataset": "wiki_offline"}))
    one_line_error(
        *cli_in_process(["fetch-hub-data", "--config", tmp_path / "offline.yaml", "--out", tmp_path / "o"])[::2],
        "nothing to fetch",
    )
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    (tmp_path / "wiki.yaml").write_text(yaml.safe_dump(wiki_config()))
    one_line_error(
        *cli_in_process(["fetch-hub-data", "--config", tmp_path / "wiki.yaml", "--out", tmp_path / "busy"])[::2],
        "holds other files",
    )


# ---------------------------------------------------------------------------------------------- prepare


def expected_blocks(docs: list[str], tokenizer_json: Path, cfg, split: str) -> np.ndarray:
    """The split's blocks rebuilt by hand: the document permutation of docs/data.md, each document encoded by
    the tokenizer alone, joined by [SEP], cut into [CLS] + block_len - 2 ids + [SEP]."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    perm = np.random.default_rng(cfg.seed).permutation(len(docs))
    k = math.ceil(cfg.heldout_fraction * len(docs))
    stream = []
    for i in perm[k:] if split == "train" else perm[:k]:
        stream += tok.encode(docs[i], add_special_tokens=False).ids + [sep]
    stream = stream[:-1]
    body = cfg.block_len - 2
    n = len(stream) // body
    return np.array([[cls, *stream[j * body : (j + 1) * body], sep] for j in range(n)])


def test_prepare_reads_only_the_fetched_folder_with_the_hub_offline(tmp_path, online):
    docs = make_docs(40)
    repos = served(tmp_path, docs)
    cfg = corpus_config_from_dict(wiki_config())
    (tmp_path / "wiki.yaml").write_text(yaml.safe_dump(wiki_config()))
    with fakehub.serve(repos) as (hub, url):
        online(url)
        fetch_hub_data(hub_inputs(cfg), tmp_path / "fetched")
        asked = len(hub.requests)
        offline = {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_ENDPOINT": url,
            "HF_HOME": str(tmp_path / "hf"),
        }
        args = ["--config", tmp_path / "wiki.yaml", "--hub-data", tmp_path / "fetched", "--no-progress"]
        r = run_cli("prepare-corpus", *args, "--out", tmp_path / "c", env=offline)
        assert r.returncode == 0, r.stderr[-3000:]
        assert len(hub.requests) == asked  # the prepare asked the hub nothing
    c = load_corpus(tmp_path / "c")
    # a hand-tokenized expectation of both splits
    tok_json = repos[TOK] / "tokenizer.json"
    for split in ("train", "heldout"):
        assert np.array_equal(np.asarray(getattr(c, split)), expected_blocks(docs, tok_json, cfg, split)), split
    # the same documents from local files, the same tokenizer from its local file: the same corpus
    files = tmp_path / "docs"
    files.mkdir()
    for i, d in enumerate(docs):
        (files / f"doc{i:04d}.txt").write_text(d)
    local = corpus_config_from_dict(
        {
            **wiki_config(dataset="text_files", paths=[str(files)]),
            "hub": {},
            "tokenizer": {"kind": "pretrained", "name": str(tok_json)},
        }
    )
    d = load_corpus(prepare_corpus(local, tmp_path / "d"))
    assert c.manifest["files_sha256"] == d.manifest["files_sha256"]
    assert c.manifest["documents_sha256"] == d.manifest["documents_sha256"]
    src = c.manifest["sources"][0]
    assert (src["hub_id"], src["revision"], src["commit"], src["n_documents_read"]) == (
        WIKI,
        "main",
        fakehub.COMMIT,
        40,
    )
    assert [f["sha256"] for f in src["files"]] == [
        sha256(p) for p in sorted((repos[f"datasets/{WIKI}"] / "20231101.en").iterdir())
    ]
    assert src["sha256"] == hashlib.sha256(b"".join(t.encode() + b"\0" for t in docs)).hexdigest()
    assert c.manifest["tokenizer"]["commit"] == fakehub.COMMIT and c.manifest["tokenizer"]["sha256"] == sha256(tok_json)
    # again: nothing to do (and the folder is checked still)
    r = run_cli("prepare-corpus", *args, "--out", tmp_path / "c", env=offline)
    assert r.returncode == 0 and "nothing to do" in r.stdout, r.stderr


def test_a_red_pajama_standin_prepares_from_the_parquet_conversion(tmp_path, online):
    docs = make_docs(45, seed=3)
    repos = served(tmp_path, docs)
    raw = {"dataset": "red_pajama", "hub": {"path": RP, "n_documents": 30}, "block_len": 16}
    raw["tokenizer"] = {"vocab_size": 64, "min_frequency": 1}
    cfg = corpus_config_from_dict(raw)
    assert (cfg.hub.revision, cfg.hub.name, cfg.hub.text_field) == ("refs/convert/parquet", "sample", "raw_content")
    with fakehub.serve(repos) as (hub, url):
        online(url)
        hub.refs = {"main": fakehub.COMMIT, "refs/convert/parquet": PARQUET_COMMIT}
        m = fetch_hub_data(hub_inputs(cfg), tmp_path / "fetched")
        assert [p for _, p, _ in hub.requests if "/revision/" in p] == [
            f"api/datasets/{RP}/revision/refs/convert/parquet"
        ]
    (data,) = m["repos"]
    assert data["commit"] == PARQUET_COMMIT  # the ref, resolved and recorded
    assert data["parts"] == {"train": ["sample/partial-train/0000.parquet", "sample/partial-train/0001.parquet"]}
    c = load_corpus(prepare_corpus(cfg, tmp_path / "c", hub_data=tmp_path / "fetched"))
    assert c.manifest["n_documents"] == 30 and c.manifest["sources"][0]["n_documents_read"] == 30
    assert c.manifest["sources"][0]["commit"] == PARQUET_COMMIT
    # the first 30 rows of raw_content, across the two files, in order
    want = hashlib.sha256(b"".join(d.encode() + b"\0" for d in docs[:30])).hexdigest()
    assert c.manifest["documents_sha256"] == want
    # a text column the files do not have: one line naming the columns
    wrong = corpus_config_from_dict({**raw, "hub": {**raw["hub"], "text_field": "text"}})
    with pytest.raises(
        UserError, match="`hub.text_field` 'text' is not a column .*'doc_id', 'meta', 'quality_signals', 'raw_content'"
    ) as e:
        prepare_corpus(wrong, tmp_path / "x", hub_data=tmp_path / "fetched")
    assert "\n" not in str(e.value) and not list(tmp_path.glob("x*"))


def test_a_bad_fetched_folder_is_one_line(tmp_path, online, monkeypatch):
    docs = make_docs(40)
    repos = served(tmp_path, docs)
    (tmp_path / "wiki.yaml").write_text(yaml.safe_dump(wiki_config()))
    fetched = tmp_path / "fetched"
    with fakehub.serve(repos) as (hub, url):
        online(url)
        fetch_hub_data(hub_inputs(corpus_config_from_dict(wiki_config())), fetched)

    def prepare(config="wiki.yaml", *extra):
        return cli_in_process(["prepare-corpus", "--config", tmp_path / config, "--out", tmp_path / "c", *extra])[::2]

    hub_data = ("--hub-data", fetched)
    # fetched for another revision of the dataset
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(wiki_config(hub={"path": WIKI, "revision": "v2"})))
    one_line_error(*prepare("other.yaml", *hub_data), "fetched for other hub inputs", "fetch_corpus_data")
    # a file changed, then a file gone
    part = fetched / "dataset" / "20231101.en" / "train-00001-of-00002.parquet"
    good = part.read_bytes()
    part.write_bytes(good[:-1] + b"x")
    one_line_error(*prepare("wiki.yaml", *hub_data), "train-00001-of-00002.parquet: not the file fetched")
    part.unlink()
    one_line_error(
        *prepare("wiki.yaml", *hub_data), "train-00001-of-00002.parquet: missing", "fetch-hub-data", "fetch_corpus_data"
    )
    # no manifest: not a fetched folder
    (fetched / MANIFEST).unlink()
    one_line_error(*prepare("wiki.yaml", *hub_data), f"no {MANIFEST}", "fetch_corpus_data")
    # no --hub-data and the hub offline: how to fetch first
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    one_line_error(*prepare("wiki.yaml"), "offline", "fetch-hub-data", "--hub-data")
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob("c.tmp-*"))
    # --hub-data for a corpus that reads nothing from the hub
    (tmp_path / "offline.yaml").write_text(yaml.safe_dump({"dataset": "wiki_offline", "max_documents": 5}))
    one_line_error(*prepare("offline.yaml", *hub_data), "reads nothing from the hub")


def test_prepare_without_hub_data_fetches_into_its_temporary_folder(tmp_path, online):
    docs = make_docs(40)
    repos = served(tmp_path, docs)
    cfg = corpus_config_from_dict(wiki_config())
    with fakehub.serve(repos) as (hub, url):
        online(url)
        c = load_corpus(prepare_corpus(cfg, tmp_path / "c"))
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [
        "heldout.npy",
        "manifest.json",
        "tokenizer.json",
        "train.npy",
    ]
    assert c.manifest["sources"][0]["commit"] == fakehub.COMMIT and c.manifest["n_documents"] == 40


# ----------------------------------------------------------------------------------- parse-time helpers


def test_fetch_config_keeps_exactly_what_decides_the_hub_inputs():
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    for key, raw in paper["corpora"].items():
        full = corpus_config_from_dict({**raw, "name": key})
        part = fetch_config({**raw, "name": key})
        assert part is not None, key  # every paper corpus reads the hub (jigsaw: BERT's tokenizer only)
        assert hub_inputs(corpus_config_from_dict(part)) == hub_inputs(full), key
        assert fetch_config({**raw, "block_len": 64, "seed": 3}) == part  # no fetch again for these
    rp = paper["corpora"]["red_pajama"]
    assert fetch_config({**rp, "hub": {**rp["hub"], "revision": "abc"}})["hub"]["revision"] == "abc"
    for key, raw in paper["images"].items():
        part = image_fetch_config(raw)
        assert image_hub_inputs(image_config_from_dict(part)) == image_hub_inputs(image_config_from_dict(raw)), key
    assert fetch_config({"dataset": "wiki_offline"}) is None
    assert (
        fetch_config({"dataset": "text_files", "paths": ["x"], "tokenizer": {"kind": "pretrained", "name": "./tok"}})
        is None
    )
    assert fetch_config({"dataset": "wikipedia", "block_len": 2}) is None  # invalid: prepare-corpus says why
    assert image_fetch_config({"dataset": "digits"}) is None
    # the paper's sources, as the config names them
    wiki = hub_inputs(corpus_config_from_dict(paper["corpora"]["wikipedia"]))
    assert wiki[0].files == {"train": [["20231101.en/train-*.parquet"]]} and len(wiki[0].revision) == 40
    rp_in = hub_inputs(corpus_config_from_dict(rp))[0]
    assert rp_in.revision == "refs/convert/parquet"
    assert rp_in.files == {"train": [["sample/train/*.parquet"], ["sample/partial-train/*.parquet"]]}
    assert all(i.revision and len(i.revision) == 40 for i in wiki if i.role == "tokenizer")


# -------------------------------------------------------------------------------------------- workflow


@pytest.mark.workflow
def test_paper_dry_run_fetches_on_the_submitting_host_and_the_default_fetches_nothing(tmp_path):
    proc = snakemake("-n", "--configfile", "config/paper.yaml", "--forcerun", "prepare_corpus", "prepare_images")
    counts = job_counts(proc.stdout)
    assert counts["fetch_corpus_data"] == 3 and counts["fetch_image_data"] == 1  # wikipedia, red_pajama, jigsaw
    assert {"fetch_corpus_data", "fetch_image_data"} <= local_rules()
    jobs = job_files(proc.stdout + proc.stderr)
    fetched = {outs[0] for rule, _, outs in jobs if rule.startswith("fetch_")}
    assert fetched == {f"results-paper/hub-data/corpora/{k}" for k in ("wikipedia", "red_pajama", "jigsaw")} | {
        "results-paper/hub-data/images/cifar10"
    }
    prepares = {outs[0]: ins for rule, ins, outs in jobs if rule in ("prepare_corpus", "prepare_images")}
    for out, ins in prepares.items():
        kind, key = out.split("/")[-2:]
        assert f"results-paper/hub-data/{kind}/{key}" in ins, out
    default = snakemake("-n", "--config", f"results={tmp_path}/r")
    assert not any(rule.startswith("fetch_") for rule in job_counts(default.stdout))


@pytest.mark.workflow
def test_the_rules_fetch_then_prepare_offline(tmp_path):
    """fetch_corpus_data fetches from the stand-in; with the stand-in gone, prepare_corpus prepares the corpus
    from the fetched folder alone."""
    docs = make_docs(40)
    repos = served(tmp_path, docs)
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    cfg.update(offline=False, results=str(tmp_path / "r"))
    cfg["corpora"]["wikihub"] = wiki_config()
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    fetched, corpus = tmp_path / "r" / "hub-data" / "corpora" / "wikihub", tmp_path / "r" / "corpora" / "wikihub"

    def run(target, hub_env):
        args = [SNAKEMAKE, "--cores", "1", "--nolock", "--configfile", str(tmp_path / "c.yaml"), "--", str(target)]
        proc = subprocess.run(args, cwd=REPO, env={**env(), **hub_env}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return job_counts(proc.stdout + proc.stderr)

    with fakehub.serve(repos) as (hub, url):
        counts = run(fetched, online_env(url, tmp_path))
        assert counts == {"write_corpus_fetch_config": 1, "fetch_corpus_data": 1}
        assert len(hub.downloads()) == 3
    # the stand-in is gone: the hub cannot be reached, even where a job asked for it
    counts = run(corpus, online_env(url, tmp_path))
    assert counts == {"write_corpus_config": 1, "prepare_corpus": 1}
    c = load_corpus(corpus)
    assert c.manifest["n_documents"] == 40 and c.manifest["sources"][0]["commit"] == fakehub.COMMIT
