"""A hub model's q/k tensors and config, fetched once into a local folder that scoring then reads offline
(CLI `prefetch-qk`, rule prefetch_qk: on a cluster the submitting host fetches, the compute nodes read).

The folder holds config.json (and the repository's `*.py` with --trust-remote-code) and one
model.safetensors with only the tensors extraction reads (extract.qk_keys: the query and key weights, or
the fused qkv weights of families that store them fused), under their checkpoint names and dtypes, plus
two metadata entries: N_PARAMS_KEY, the full checkpoint's floating-point parameter count (so the score
rows' n_params is the model's, not the subset's), and `attention_geometry.origin` (the hub id and the
commit read). The tensors come through loading.open_source, so from the hub by HTTP range requests where
it answers them (hub.py), else from the download; they are written one at a time
(safetensors_io.write_safetensors), so memory stays near the largest tensor. Scoring the folder gives the
rows of scoring the hub id (tests/test_hub.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from attention_geometry.errors import UserError
from attention_geometry.formats.files import check_writable, replace_dir
from attention_geometry.scoring.extract import get_family, qk_keys
from attention_geometry.weights.loading import open_source
from attention_geometry.weights.safetensors_io import (
    N_PARAMS_KEY,
    SafetensorsSource,
    read_safetensors_header,
    write_safetensors,
)

__all__ = ["prefetch_qk", "ORIGIN_KEY"]

ORIGIN_KEY = "attention_geometry.origin"


def prefetch_qk(
    source: str,
    out: str | os.PathLike,
    revision: str | None = None,
    trust_remote_code: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Write the q/k subset folder of `source` (a hub id, or a local model folder) to `out` (replaced whole,
    atomically). Returns what was written: tensors, bytes (of model.safetensors), n_params, origin and
    bytes_read (the weight bytes fetched by range requests; None when the weights were read from files)."""
    from tqdm.auto import tqdm

    out = Path(out)
    tmp = check_writable(out.parent / f".tmp-{out.name}-{os.getpid()}")  # written there, then swapped in
    src = open_source(source, revision=revision, trust_remote_code=trust_remote_code)
    folder = getattr(src, "directory", None)
    if folder is None or not (Path(folder) / "config.json").is_file():
        raise UserError(
            f"{source}: prefetch-qk reads safetensors or .bin models (a folder with config.json); "
            "a GGUF file is read whole by `score`"
        )
    names = list(dict.fromkeys(n for *_, ns in qk_keys(get_family(src.model_type), src.config, src.keys()) for n in ns))
    commit = Path(folder).name if re.fullmatch(r"[0-9a-f]{40}", Path(folder).name) else (revision or "")
    origin = f"{source}@{commit}" if commit else str(source)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        for f in ["config.json"] + (sorted(p.name for p in Path(folder).glob("*.py")) if trust_remote_code else []):
            shutil.copyfile(Path(folder) / f, tmp / f)
        bar = tqdm(total=len(names), desc=f"fetching q/k of {src.name}", unit="tensor", disable=not progress)

        def fetch(name):
            t = src.get(name)
            bar.update()
            return t

        size = write_safetensors(
            tmp / "model.safetensors",
            [(n, *src.spec(n)) for n in names],
            fetch,
            {N_PARAMS_KEY: str(src.n_params), ORIGIN_KEY: origin},
        )
        bar.close()
        read_safetensors_header(tmp / "model.safetensors")  # what was written reads back (the one reader's checks)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = src.files if isinstance(src, SafetensorsSource) else []
    fetched = [f.bytes_read for f in files if hasattr(f, "bytes_read")]
    return {
        "tensors": len(names),
        "bytes": size,
        "n_params": src.n_params,
        "origin": origin,
        "bytes_read": sum(fetched) if fetched else None,
    }


# --------------------------------------------------------------------------------------------------- CLI


def add_arguments_prefetch_qk(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="hub id (or a local model folder)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write (replaced whole)")
    parser.add_argument("--revision", metavar="R", help="hub revision: branch, tag or commit (default main)")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="the model needs its repository's own code (copied with the config; pinned commit only)",
    )
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def run_prefetch_qk(args: argparse.Namespace) -> int:
    done = prefetch_qk(
        args.source, args.out, revision=args.revision, trust_remote_code=args.trust_remote_code, progress=not args.quiet
    )
    read = "" if done["bytes_read"] is None else f"; {done['bytes_read']} weight bytes read by range requests"
    print(
        f"{done['origin']}: {done['tensors']} q/k tensors, {done['bytes']} bytes, of {done['n_params']} "
        f"parameters -> {args.out}{read}",
        file=sys.stderr,
    )
    return 0
