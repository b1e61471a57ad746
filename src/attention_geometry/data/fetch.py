"""`attention-geometry fetch-hub-data --config CONFIG.yaml --out DIR`: download what a corpus or image set config
reads from the Hugging Face hub (data.corpus_config.hub_inputs / data.image_config.hub_inputs) into DIR with its
manifest (data.hub_data; docs/data.md, "Hub data"), on a host with internet; prepare-corpus / prepare-images
--hub-data DIR then read only that folder."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attention_geometry.data import corpus_config, image_config
from attention_geometry.data.hub_data import FOLDERS, MANIFEST, HubInput, fetch_hub_data, size_text
from attention_geometry.errors import UserError
from attention_geometry.formats.files import check_out_location, read_yaml

__all__ = ["load_inputs", "run_fetch_hub_data"]


def load_inputs(path: str | os.PathLike) -> tuple[str, Any, list[HubInput]]:
    """(kind "corpus" | "images", the validated config, its hub inputs) of a CORPUS.yaml or IMAGES.yaml, told
    apart by its `dataset`."""
    raw = read_yaml(path, "config", UserError)
    dataset = raw.get("dataset") if isinstance(raw, Mapping) else None
    if dataset in corpus_config.DATASETS:
        cfg = corpus_config.load_corpus_config(path)
        return "corpus", cfg, corpus_config.hub_inputs(cfg)
    if dataset in image_config.IMAGE_DATASETS:
        cfg = image_config.load_image_config(path)
        return "images", cfg, image_config.hub_inputs(cfg)
    known = ", ".join((*corpus_config.DATASETS, *image_config.IMAGE_DATASETS))
    raise UserError(f"{path}: `dataset` must name a corpus or an image set ({known}), got {dataset!r}")


def _check_out(out: Path, config: str) -> None:
    check_out_location(out, [config])
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if p.name not in (MANIFEST, *FOLDERS.values()))
        if others:
            raise UserError(
                f"{out}: holds other files ({', '.join(others[:3])}): not a hub-data folder; use another --out"
            )
    elif out.exists():
        raise UserError(f"{out}: is a file; use another --out")


def run_fetch_hub_data(args: argparse.Namespace) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kind, _, inputs = load_inputs(args.config)
    out = Path(args.out)
    _check_out(out, args.config)
    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    manifest = fetch_hub_data(inputs, out, workers=args.workers)
    for r in manifest["repos"]:
        n = sum(f["bytes"] for f in r["files"])
        print(f"{out / FOLDERS[r['role']]}: {r['repo_id']} @ {r['commit']}: {len(r['files'])} files, {size_text(n)}")
    return 0
