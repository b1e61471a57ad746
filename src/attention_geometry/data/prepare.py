"""`prepare_corpus`: read, clean, split (by document), tokenize and write a corpus in the prepared-corpus
format (attention_geometry.formats.corpus, docs/data.md), and the `prepare-corpus` CLI.

The prepare runs in OUT.tmp-<pid> and swaps it in for OUT at the end (files.replace_dir); the same config
and inputs give byte-identical files.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from attention_geometry.data import blocks, wordpiece
from attention_geometry.data.corpus_config import CorpusConfig, hub_inputs, load_corpus_config
from attention_geometry.data.hub_data import FetchedData, HubInput, check_hub_data, fetch_now
from attention_geometry.data.sources import READERS, local_inputs
from attention_geometry.formats.corpus import (
    FORMAT_VERSION,
    CorpusError,
    block_dtype,
    content_sha256,
    read_manifest,
    write_manifest,
)
from attention_geometry.formats.files import check_out_location, file_sha256, replace_dir

__all__ = ["corpus_status", "prepare_corpus", "run_prepare_corpus"]

log = logging.getLogger("attention_geometry.data")


def _versions(extra: Iterable[str]) -> dict[str, str]:
    from importlib import metadata

    from attention_geometry import __version__

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


# the datasets read from a file that a registry package ships, found in the environment (its path moves with it)
PACKAGED = ("wiki_offline", "wikitext2")


def input_changes(cfg: CorpusConfig, manifest: dict[str, Any]) -> str | None:
    """None when the local input files corpus `cfg` reads are those its manifest's `sources` record, with
    the same sha256 (hub datasets: not checked, their revision pins them); else what changed, in words.
    wiki_offline's file is compared by content only (its path moves with the environment); an input file
    added to a folder counts unless max_documents or max_bytes cut the reading short."""
    if cfg.dataset not in PACKAGED + ("text_files", "jigsaw"):
        return None
    try:
        current = local_inputs(cfg)
    except CorpusError as exc:
        return str(exc)
    return recorded_input_changes(
        manifest,
        current,
        same_paths=cfg.dataset not in PACKAGED,
        new_inputs=cfg.max_documents is None and cfg.max_bytes is None,
    )


def recorded_input_changes(
    manifest: dict[str, Any], current: list[Path], *, same_paths: bool, new_inputs: bool
) -> str | None:
    """None when the local files a prepare reads now (`current`, in reading order) are those `manifest`'s
    `sources` record (the entries with a `path`), with the same sha256; else the first difference, in words.
    The paths themselves are compared only where `same_paths` (not for a file whose place moves with the
    environment), and a file added after the recorded ones counts only where `new_inputs` (not where the
    reading stopped short of it)."""
    recorded = [s for s in manifest.get("sources") or [] if isinstance(s, dict) and s.get("path")]
    for i, src in enumerate(recorded):
        if i >= len(current):
            return f"{src['path']} is no longer an input"
        path = current[i]
        if same_paths and str(path) != src["path"]:
            return f"input {path} where it read {src['path']}"
        if not path.is_file() or file_sha256(path) != src.get("sha256"):
            return f"the content of {path} changed (sha256)"
    if len(current) > len(recorded) and new_inputs:
        return f"{current[len(recorded)]} is a new input"
    return None


def _input_paths(cfg: CorpusConfig) -> list[Path]:
    """The local files and folders corpus `cfg` reads (as configured: folders stay folders), for the --out check."""
    if cfg.dataset in ("text_files", "jigsaw"):
        return [Path(p).expanduser() for p in cfg.paths]
    if cfg.dataset in PACKAGED:
        try:
            return local_inputs(cfg)
        except CorpusError:
            return []
    return []


def corpus_status(cfg: CorpusConfig, out: str | os.PathLike) -> str:
    """ "missing" (no OUT), "current" (OUT's manifest has this config and its inputs are unchanged:
    input_changes), "changed" (this config, but input text that changed since), "different" (another
    config or not a corpus)."""
    return prepared_status(out, cfg.to_dict(), partial(input_changes, cfg))


def prepared_status(
    out: str | os.PathLike,
    config: dict[str, Any],
    changes: Callable[[dict[str, Any]], str | None],
    kind: str | None = None,
) -> str:
    """What OUT holds, for a prepare of `config` (a corpus's or an image set's, as its manifest records it):
    "missing" (no OUT), "current" (a manifest of this `kind` and config whose inputs are unchanged: `changes`
    of it says nothing), "changed" (this config, but inputs that changed since), "different" (another kind or
    config, or no manifest)."""
    p = Path(out)
    if not p.exists():
        return "missing"
    try:
        manifest = read_manifest(p)
    except CorpusError:
        return "different"
    if manifest.get("kind") != kind or manifest.get("config") != json.loads(json.dumps(config)):
        return "different"
    return "changed" if changes(manifest) else "current"


def refuse_replacing(
    out: Path, status: str, force: bool, changes: Callable[[dict[str, Any]], str | None], held: str, inputs: str
) -> None:
    """CorpusError, unless force, where OUT (of prepared_status `status`) holds something else than this
    config: another config (`held` says what), or one prepared from `inputs` that changed since (`changes`
    of its manifest says how)."""
    if status == "different" and not force:
        raise CorpusError(f"{out} exists and holds another {held}: use --force to replace it, or another --out")
    if status == "changed" and not force:
        why = changes(read_manifest(out))
        raise CorpusError(
            f"{out} was prepared from input {inputs} that changed since ({why}): use --force to prepare it again "
            f"from the current {inputs}"
        )


def write_prepared(out: Path, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Make a prepared folder (a corpus or an image set) whole or not at all: `build(tmp)` writes its files into
    a temporary sibling of OUT and returns the manifest, which is written last; the folder then replaces OUT in
    one swap (files.replace_dir). Temporary folders of dead processes are removed first; on any error, this
    one is. Returns the manifest."""
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(out)
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        manifest = build(tmp)
        write_manifest(tmp, manifest)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def prepare_corpus(
    cfg: CorpusConfig, out: str | os.PathLike, force: bool = False, hub_data: str | os.PathLike | None = None
) -> Path:
    """Read, clean, split (by document), tokenize and write the corpus to OUT (see docs/data.md). Nothing is
    done when OUT already holds this config prepared from the same input text; another corpus at OUT, or
    input text changed since (corpus_status), is an error unless force. OUT is never one of the inputs, a
    folder holding one or a path inside one, nor the current folder (files.check_out_location), force or not.
    What the corpus reads from the hub (corpus_config.hub_inputs) comes from `hub_data`, a folder fetched by
    `fetch-hub-data` for this config, read offline; without it, it is fetched now into the temporary folder."""
    out = Path(out)
    check_out_location(out, [*_input_paths(cfg), *([hub_data] if hub_data is not None else [])])
    fetched = check_hub_data(hub_inputs(cfg), hub_data, "corpus")  # a wrong folder stops here
    status = corpus_status(cfg, out)
    if status == "current":
        log.info("%s already holds this corpus config: nothing to do", out)
        return out
    changes = partial(input_changes, cfg)
    refuse_replacing(out, status, force, changes, "corpus config (or no manifest)", "text")
    if fetched is not None:
        fetched.verify()  # a missing or changed file stops before any work
    t0 = time.perf_counter()
    manifest = write_prepared(out, lambda tmp: _prepare_into(cfg, tmp, fetched))
    log.info(
        "corpus %s (%s) -> %s: %d documents, %d tokens, %d train + %d held-out blocks of %d, vocab %d (%.1f s)",
        cfg.name,
        cfg.dataset,
        out,
        manifest["n_documents"],
        manifest["n_tokens"],
        manifest["n_train_blocks"],
        manifest["n_heldout_blocks"],
        cfg.block_len,
        manifest["vocab_size"],
        time.perf_counter() - t0,
    )
    return out


def _ids_digest(ids: list[int]) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype="<i8").tobytes(), digest_size=16).digest()


def _heldout_digests(tok, docs: blocks.Documents, heldout: np.ndarray) -> set[bytes]:
    """The digests of the token ids of every held-out document that has any: what the model sees of it (the
    tokenizer lowercases, strips accents and maps unknown words to [UNK], so two texts that differ only there
    are the same document to it)."""
    return {_ids_digest(ids) for ids in blocks.encode(tok, docs, heldout, "hashing held-out") if ids}


def _refuse_shared(shared: int, where: str) -> None:
    """CorpusError when training documents encode to the token ids of a held-out document: the held-out loss
    would then measure memorization, not generalization (repeated input files are read once: data.sources)."""
    if shared:
        raise CorpusError(
            f"{where}: {shared} training document(s) encode to the same tokens as a held-out document (the same "
            "text, or one that differs only where the tokenizer does not look: case, accents, unknown words): "
            "the inputs repeat documents; remove the repeats (or set heldout_fraction 0)"
        )


def _prepare_into(cfg: CorpusConfig, tmp: Path, fetched: FetchedData | None = None) -> dict[str, Any]:
    sources: list[dict[str, Any]] = []
    scratch = tmp / "hub-data"  # the hub inputs fetched now, where no fetched folder was given; removed below
    inputs = hub_inputs(cfg)
    if fetched is None and inputs:
        fetched = fetch_now(inputs, scratch, "corpus")
    docs = blocks.Documents(tmp / "documents.bin")
    docs.collect(READERS[cfg.dataset](cfg, sources, fetched), cfg)
    n = len(docs)
    where = f"corpus {cfg.name!r} (dataset {cfg.dataset})"
    if n == 0:
        raise CorpusError(
            f"{where} has no text after cleaning (sources: {[s.get('path') or s.get('hub_id') for s in sources]})"
        )
    log.info("%s: %d documents, %d bytes of text", where, n, docs.n_bytes)

    perm = np.random.default_rng(cfg.seed).permutation(n)
    k = math.ceil(cfg.heldout_fraction * n) if cfg.heldout_fraction > 0 else 0
    if cfg.min_heldout_blocks > 0:
        k = max(k, 1)
    pretrained_info: dict[str, Any] = {}
    tok = None
    if cfg.tokenizer.kind == "pretrained":
        tok, pretrained_info = wordpiece.load_pretrained(cfg.tokenizer, fetched)
    shutil.rmtree(scratch, ignore_errors=True)  # all of the hub's is read: a fetch of this prepare's own is freed
    while True:
        if k >= n:
            raise CorpusError(
                f"{where}: {n} documents are too few for heldout_fraction {cfg.heldout_fraction} "
                f"and min_heldout_blocks {cfg.min_heldout_blocks} (no training document left)"
            )
        if cfg.tokenizer.kind == "wordpiece":
            tok = wordpiece.train_wordpiece(docs, perm[k:], cfg.tokenizer)
        if cfg.min_heldout_blocks == 0:
            break
        have = blocks.count_blocks(tok, docs, perm[:k], cfg.block_len, cfg.layout)
        if have >= cfg.min_heldout_blocks:
            break
        # grow the held-out documents in proportion to the shortfall (+10 %), retrain on the rest
        per_doc = max(have, 0.5) / k
        k = max(k + 1, math.ceil(1.1 * cfg.min_heldout_blocks / per_doc))
        log.info("held-out split short of %d blocks (%d): growing it to %d documents", cfg.min_heldout_blocks, have, k)

    held_digests = _heldout_digests(tok, docs, perm[:k]) if k else set()
    special = wordpiece.special_ids(tok, where)
    vocab_size = int(tok.get_vocab_size(with_added_tokens=True))
    dtype = block_dtype(vocab_size)
    tok.save(str(tmp / "tokenizer.json"))

    stats: dict[str, dict[str, int]] = {}
    for split, idx in (("train", perm[k:]), ("heldout", perm[:k])):
        raw = tmp / f"{split}.raw"
        w = blocks.writer(cfg, raw, special, dtype)
        shared = 0
        for ids in blocks.encode(tok, docs, idx, f"tokenizing {split}"):
            if split == "train" and held_digests and ids:
                shared += _ids_digest(ids) in held_digests
            w.add(ids)
        n_blocks = w.close()
        _refuse_shared(shared, where)
        blocks.raw_to_npy(raw, tmp / f"{split}.npy", n_blocks, cfg.block_len, dtype)
        stats[split] = {"blocks": n_blocks, "tokens": w.n_tokens, "documents": w.n_documents}
        log.info("%s: %d documents, %d tokens -> %d blocks", split, w.n_documents, w.n_tokens, n_blocks)
    if stats["train"]["blocks"] == 0:
        raise CorpusError(f"{where}: the train split has fewer than block_len - 2 = {cfg.block_len - 2} tokens")
    if cfg.heldout_fraction > 0 and stats["heldout"]["blocks"] == 0:
        raise CorpusError(
            f"{where}: the held-out split ({k} documents) has fewer than {cfg.block_len - 2} tokens; "
            "raise heldout_fraction or set min_heldout_blocks"
        )
    n_bytes = docs.n_bytes
    docs.close()
    docs.path.unlink()

    tok_info: dict[str, Any] = dataclasses.asdict(cfg.tokenizer)
    if cfg.tokenizer.kind == "wordpiece":
        tok_info["trained_on"] = "train split"
    else:
        tok_info.update(pretrained_info)
    extra = ["pyarrow"] if cfg.dataset in ("wikipedia", "red_pajama") else []
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
        "files_sha256": content_sha256(tmp),
        **cfg.recipe_keys(),
        "sources": sources,
        "tokenizer": tok_info,
        "config": cfg.to_dict(),
        "versions": _versions(extra),
    }


# ----------------------------------------------------------------------------------------------- CLI


def offline_hub() -> None:
    """Switch huggingface_hub, datasets and transformers offline for this process (before they are imported):
    with --hub-data a prepare reads only that folder."""
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def start_prepare_cli(args: argparse.Namespace) -> None:
    """What the prepare CLIs (prepare-corpus, prepare-images) do first: progress lines to stderr (where
    logging is not set up yet) and, with --hub-data, the hub offline."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.hub_data is not None:
        offline_hub()


def already_prepared(args: argparse.Namespace, status: str, hub: list[HubInput], kind: str, held: str) -> bool:
    """Whether a prepare CLI has nothing to do: --out holds this config prepared from the same inputs (prepared
    `status` "current"), said on stdout; a --hub-data folder that is not for these `hub` inputs is an error
    still."""
    if status != "current":
        return False
    check_hub_data(hub, args.hub_data, kind)
    print(f"{args.out} already holds this {held}: nothing to do")
    return True


def run_prepare_corpus(args: argparse.Namespace) -> int:
    start_prepare_cli(args)
    cfg = load_corpus_config(args.config)
    hub = [args.hub_data] if args.hub_data is not None else []
    check_out_location(args.out, [args.config, *_input_paths(cfg), *hub])
    if already_prepared(args, corpus_status(cfg, args.out), hub_inputs(cfg), "corpus", "corpus config"):
        return 0
    out = prepare_corpus(cfg, args.out, force=args.force, hub_data=args.hub_data)
    m = read_manifest(out)
    print(
        f"{out}: {m['n_documents']} documents, {m['n_tokens']} tokens, {m['n_train_blocks']} train + "
        f"{m['n_heldout_blocks']} held-out blocks of {m['block_len']}, vocab {m['vocab_size']}"
    )
    return 0
